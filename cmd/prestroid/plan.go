package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

func init() {
	register("plan", "print the O-T-P tree, sub-trees or stats of EXPLAIN plans", runPlan)
}

const planUsage = `usage:
  prestroid plan [flags] [FILE | DIR | -]
  prestroid plan [flags] --server URL [--user U --catalog C --schema S] "SQL"

Reads EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) output from a file, every *.json
in a directory, or stdin (no argument or "-"), or runs the EXPLAIN itself
against --server. Prints the O-T-P tree (indented), the sub-trees with votes
(--subtrees), statistics (--stats), or the predicate token sentences of the
Word2Vec corpus (--sentences). Over a directory it prints the node
count vs max depth distribution and the max (size, depth) per workload (the
file name up to its first "-").

flags:
`

func runPlan(args []string) int {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), planUsage)
		fs.PrintDefaults()
	}
	subtrees := fs.Bool("subtrees", false, "print the sampled sub-trees with votes (+ votes, - does not)")
	n := fs.Int("n", 15, "sub-tree node limit N (∅ nodes count); N ≥ 2^(C+1)-1")
	k := fs.Int("k", 9, "number of sub-trees K kept (0 = all)")
	c := fs.Int("c", 3, "convolution depth C")
	stats := fs.Bool("stats", false, "print node count, max depth, PRED count and tables")
	sentences := fs.Bool("sentences", false, "print the predicate token sentences (the Word2Vec corpus: one line per PRED node)")
	joins := fs.Bool("joins", false, "with --sentences: add join criteria sentences")
	asJSON := fs.Bool("json", false, "machine-readable JSON output")
	server := fs.String("server", "", "Trino coordinator URL: run the EXPLAIN for the SQL argument")
	user := fs.String("user", os.Getenv("USER"), "Trino user for --server")
	catalog := fs.String("catalog", "", "session catalog for --server")
	schema := fs.String("schema", "", "session schema for --server")
	timeout := fs.Duration("timeout", time.Minute, "EXPLAIN timeout for --server")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	cfg := featurize.SamplerConfig{N: *n, K: *k, C: *c}
	if *subtrees {
		if err := cfg.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 2
		}
	}
	out := planOutput{w: os.Stdout, subtrees: *subtrees, stats: *stats, json: *asJSON, cfg: cfg, sentences: *sentences, joins: *joins}

	if *server != "" {
		sql := strings.Join(fs.Args(), " ")
		if strings.TrimSpace(sql) == "" {
			fmt.Fprintln(os.Stderr, "prestroid plan: --server needs a SQL argument")
			return 2
		}
		if !plan.Explainable(sql) {
			fmt.Fprintf(os.Stderr, "prestroid plan: a %s statement gets no EXPLAIN\n", plan.Classify(sql))
			return 1
		}
		h := http.Header{}
		if *user != "" {
			h.Set("X-Trino-User", *user)
		}
		if *catalog != "" {
			h.Set("X-Trino-Catalog", *catalog)
		}
		if *schema != "" {
			h.Set("X-Trino-Schema", *schema)
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		defer cancel()
		res, err := (&plan.ExplainClient{}).Explain(ctx, *server, sql, h)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "EXPLAIN %s: elapsed %d ms, analysis %d ms, wall %s\n", res.QueryID, res.ElapsedMillis, res.AnalysisMillis, res.Wall.Round(time.Millisecond))
		return out.one("query", res.PlanJSON)
	}

	if fs.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "prestroid plan: one FILE, DIR or - at most")
		return 2
	}
	arg := fs.Arg(0)
	if arg == "" || arg == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, plan.DefaultMaxPlanBytes+1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 1
		}
		return out.one("stdin", b)
	}
	st, err := os.Stat(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid plan:", err)
		return 1
	}
	if st.IsDir() {
		return out.dir(arg)
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid plan:", err)
		return 1
	}
	return out.one(arg, b)
}

type planOutput struct {
	w         io.Writer
	subtrees  bool
	stats     bool
	json      bool
	sentences bool
	joins     bool
	cfg       featurize.SamplerConfig
}

// writeSentences prints one token sentence per PRED node (and per join
// criteria with joins), pre-order.
func (o planOutput) writeSentences(root *featurize.OTPNode) {
	stack := []*featurize.OTPNode{root}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if n == nil {
			continue
		}
		if n.Pred != nil && (n.Kind == featurize.OTPPredicate || o.joins && n.Kind == featurize.OTPOperator) {
			if toks := n.Pred.Tokens(); len(toks) > 0 {
				fmt.Fprintln(o.w, strings.Join(toks, " "))
			}
		}
		stack = append(stack, n.Right, n.Left)
	}
}

type statsJSON struct {
	Name     string   `json:"name,omitempty"`
	Workload string   `json:"workload,omitempty"`
	Nodes    int      `json:"nodes"`
	MaxDepth int      `json:"max_depth"`
	Preds    int      `json:"preds"`
	Tables   []string `json:"tables"`
}

type otpJSON struct {
	Kind  string   `json:"kind"`
	Value string   `json:"value,omitempty"`
	Text  string   `json:"text,omitempty"`
	Left  *otpJSON `json:"left,omitempty"`
	Right *otpJSON `json:"right,omitempty"`
}

func toOTPJSON(n *featurize.OTPNode) *otpJSON {
	if n == nil {
		return nil
	}
	return &otpJSON{Kind: n.Kind.String(), Value: n.Value, Text: n.Text, Left: toOTPJSON(n.Left), Right: toOTPJSON(n.Right)}
}

type subtreeNodeJSON struct {
	Kind  string `json:"kind"`
	Value string `json:"value,omitempty"`
	Left  int32  `json:"left"`  // slot; 0 = none
	Right int32  `json:"right"` // slot; 0 = none
	Vote  uint8  `json:"vote"`
}

func build(planJSON []byte) (*featurize.OTPNode, error) {
	p, err := plan.Parse(planJSON)
	if err != nil {
		return nil, err
	}
	return featurize.BuildOTP(p)
}

func (o planOutput) one(name string, planJSON []byte) int {
	root, err := build(planJSON)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prestroid plan: %s: %v\n", name, err)
		return 1
	}
	s := featurize.Stats(root)
	var sts []featurize.SubTree
	if o.subtrees {
		if sts, err = featurize.SampleSubTrees(root, o.cfg); err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 2
		}
	}
	if o.sentences {
		o.writeSentences(root)
		return 0
	}
	if o.json {
		v := map[string]any{"stats": statsJSON{Nodes: s.Nodes, MaxDepth: s.MaxDepth, Preds: s.Preds, Tables: nonNil(s.Tables)}}
		switch {
		case o.subtrees:
			var list [][]subtreeNodeJSON
			for _, st := range sts {
				nodes := make([]subtreeNodeJSON, st.Len())
				for i, n := range st.Nodes {
					nodes[i] = subtreeNodeJSON{Kind: n.Kind.String(), Value: n.Value, Left: st.Left[i] + 1, Right: st.Right[i] + 1, Vote: st.Vote[i]}
				}
				list = append(list, nodes)
			}
			v["subtrees"] = list
			v["n"], v["k"], v["c"] = o.cfg.N, o.cfg.K, o.cfg.C
		case !o.stats:
			v["otp"] = toOTPJSON(root)
		}
		enc := json.NewEncoder(o.w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return 1
		}
		return 0
	}
	switch {
	case o.stats:
		fmt.Fprintf(o.w, "nodes %d\nmax depth %d\npreds %d\ntables %s\n", s.Nodes, s.MaxDepth, s.Preds, strings.Join(s.Tables, ", "))
	case o.subtrees:
		fmt.Fprint(o.w, featurize.RenderSubTrees(sts))
	default:
		fmt.Fprint(o.w, featurize.RenderOTP(root))
	}
	return 0
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// dir prints per-plan stats, the node count × max depth distribution and the
// max (size, depth) per workload.
func (o planOutput) dir(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		fmt.Fprintf(os.Stderr, "prestroid plan: no *.json in %s\n", dir)
		return 1
	}
	var rows []statsJSON
	failed := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			var root *featurize.OTPNode
			if root, err = build(b); err == nil && o.sentences {
				o.writeSentences(root)
				continue
			}
			if err == nil {
				s := featurize.Stats(root)
				name := strings.TrimSuffix(filepath.Base(f), ".json")
				wl := name
				if i := strings.IndexByte(name, '-'); i > 0 {
					wl = name[:i]
				}
				rows = append(rows, statsJSON{Name: name, Workload: wl, Nodes: s.Nodes, MaxDepth: s.MaxDepth, Preds: s.Preds, Tables: nonNil(s.Tables)})
				continue
			}
		}
		fmt.Fprintf(os.Stderr, "prestroid plan: %s: %v\n", f, err)
		failed++
	}
	if o.sentences {
		if failed > 0 {
			return 1
		}
		return 0
	}
	type wmax struct {
		Workload string `json:"workload"`
		Plans    int    `json:"plans"`
		MaxNodes int    `json:"max_nodes"`
		MaxDepth int    `json:"max_depth"`
	}
	byWL := map[string]*wmax{}
	var wls []string
	for _, r := range rows {
		m := byWL[r.Workload]
		if m == nil {
			m = &wmax{Workload: r.Workload}
			byWL[r.Workload] = m
			wls = append(wls, r.Workload)
		}
		m.Plans++
		m.MaxNodes, m.MaxDepth = max(m.MaxNodes, r.Nodes), max(m.MaxDepth, r.MaxDepth)
	}
	sort.Strings(wls)
	if o.json {
		var maxima []*wmax
		for _, w := range wls {
			maxima = append(maxima, byWL[w])
		}
		enc := json.NewEncoder(o.w)
		enc.SetIndent("", "  ")
		enc.Encode(map[string]any{"plans": rows, "workloads": maxima, "failed": failed})
	} else {
		fmt.Fprintf(o.w, "%-28s %7s %6s %6s %7s\n", "plan", "nodes", "depth", "preds", "tables")
		for _, r := range rows {
			fmt.Fprintf(o.w, "%-28s %7d %6d %6d %7d\n", r.Name, r.Nodes, r.MaxDepth, r.Preds, len(r.Tables))
		}
		fmt.Fprintln(o.w, "\nnode count vs max depth (plans per cell)")
		nodeEdges := []int{25, 50, 100, 200, 400, 800, 1600}
		depthEdges := []int{10, 20, 30, 40, 50, 60, 80}
		grid := make([][]int, len(depthEdges)+1)
		for i := range grid {
			grid[i] = make([]int, len(nodeEdges)+1)
		}
		bucket := func(v int, edges []int) int {
			for i, e := range edges {
				if v < e {
					return i
				}
			}
			return len(edges)
		}
		for _, r := range rows {
			grid[bucket(r.MaxDepth, depthEdges)][bucket(r.Nodes, nodeEdges)]++
		}
		label := func(i int, edges []int) string {
			switch {
			case i == 0:
				return fmt.Sprintf("<%d", edges[0])
			case i == len(edges):
				return fmt.Sprintf("≥%d", edges[i-1])
			}
			return fmt.Sprintf("%d-%d", edges[i-1], edges[i]-1)
		}
		fmt.Fprintf(o.w, "%-10s", "depth\\nodes")
		for j := range nodeEdges {
			fmt.Fprintf(o.w, " %8s", label(j, nodeEdges))
		}
		fmt.Fprintf(o.w, " %8s\n", label(len(nodeEdges), nodeEdges))
		for i := len(grid) - 1; i >= 0; i-- {
			fmt.Fprintf(o.w, "%-10s", label(i, depthEdges))
			for _, v := range grid[i] {
				if v == 0 {
					fmt.Fprintf(o.w, " %8s", ".")
				} else {
					fmt.Fprintf(o.w, " %8d", v)
				}
			}
			fmt.Fprintln(o.w)
		}
		fmt.Fprintf(o.w, "\n%-12s %6s %10s %10s\n", "workload", "plans", "max nodes", "max depth")
		for _, w := range wls {
			m := byWL[w]
			fmt.Fprintf(o.w, "%-12s %6d %10d %10d\n", w, m.Plans, m.MaxNodes, m.MaxDepth)
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}
