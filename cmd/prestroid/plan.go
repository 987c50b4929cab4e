package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
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
	dynamic := fs.Bool("dynamic-filters", embeddedTree().DynamicFilters, "a clause [column DYNAMIC] in a scan's predicate per dynamic filter it waits for (default: as the embedded model reads plans)")
	server := fs.String("server", "", "Trino or PrestoDB coordinator URL: run the EXPLAIN for the SQL argument")
	engine := fs.String("engine", "", "engine of --server: trino or presto (default: its /v1/info version says)")
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
	out := planOutput{w: os.Stdout, subtrees: *subtrees, stats: *stats, json: *asJSON, cfg: cfg, sentences: *sentences, joins: *joins,
		tree: featurize.TreeOptions{DynamicFilters: *dynamic}}

	if *server != "" {
		h := http.Header{}
		for name, v := range map[string]string{"X-Trino-User": *user, "X-Trino-Catalog": *catalog, "X-Trino-Schema": *schema} {
			if v != "" {
				h.Set(name, v)
			}
		}
		eng, err := collectEngine(context.Background(), &collectFlags{engine: *engine, server: *server})
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 1
		}
		return out.explain(*server, eng, strings.Join(fs.Args(), " "), h, *timeout)
	}

	if fs.NArg() > 1 {
		fmt.Fprintln(os.Stderr, "prestroid plan: one FILE, DIR or - at most")
		return 2
	}
	return out.path(fs.Arg(0))
}

// explain runs the EXPLAIN of sql on server (of engine) as the caller h
// (X-Trino-* names, renamed for the engine) and prints its plan.
func (o planOutput) explain(server string, engine dialect.Engine, sql string, h http.Header, timeout time.Duration) int {
	if strings.TrimSpace(sql) == "" {
		fmt.Fprintln(os.Stderr, "prestroid plan: --server needs a SQL argument")
		return 2
	}
	if !plan.Explainable(sql) {
		fmt.Fprintf(os.Stderr, "prestroid plan: a %s statement gets no EXPLAIN\n", plan.Classify(sql))
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := (&plan.ExplainClient{}).ExplainOn(ctx, server, engine, sql, h)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid plan:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "EXPLAIN %s: elapsed %d ms, analysis %d ms, wall %s\n", res.QueryID, res.ElapsedMillis, res.AnalysisMillis, res.Wall.Round(time.Millisecond))
	return o.one("query", res.PlanJSON)
}

// path prints the plan of a file, of every *.json in a directory, or of
// stdin (arg "" or "-").
func (o planOutput) path(arg string) int {
	if arg == "" || arg == "-" {
		b, err := io.ReadAll(io.LimitReader(os.Stdin, plan.DefaultMaxPlanBytes+1))
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid plan:", err)
			return 1
		}
		return o.one("stdin", b)
	}
	st, err := os.Stat(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid plan:", err)
		return 1
	}
	if st.IsDir() {
		return o.dir(arg)
	}
	b, err := os.ReadFile(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid plan:", err)
		return 1
	}
	return o.one(arg, b)
}

type planOutput struct {
	w         io.Writer
	subtrees  bool
	stats     bool
	json      bool
	sentences bool
	joins     bool
	cfg       featurize.SamplerConfig
	tree      featurize.TreeOptions
}

// writeSentences prints one token sentence per PRED node (and per join
// criteria with joins), pre-order.
func (o planOutput) writeSentences(root *featurize.OTPNode) {
	for _, toks := range featurize.PredicateSentences(root, o.joins) {
		fmt.Fprintln(o.w, strings.Join(toks, " "))
	}
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

func (o planOutput) build(planJSON []byte) (*featurize.OTPNode, error) {
	p, err := plan.Parse(planJSON)
	if err != nil {
		return nil, err
	}
	return featurize.BuildOTPWith(p, o.tree)
}

// embeddedTree is the embedded model's tree readings (its manifest's
// tree_features): the tree `prestroid plan` prints unless told otherwise.
func embeddedTree() featurize.TreeOptions {
	b, err := fs.ReadFile(embeddedModel, bundle.ManifestFile)
	if err != nil {
		return featurize.TreeOptions{}
	}
	var m bundle.Manifest
	if json.Unmarshal(b, &m) != nil {
		return featurize.TreeOptions{}
	}
	return m.Tree()
}

func (o planOutput) one(name string, planJSON []byte) int {
	root, err := o.build(planJSON)
	if err != nil {
		fmt.Fprintf(os.Stderr, "prestroid plan: %s: %v\n", name, err)
		return 1
	}
	s := featurize.NewPlanStat("", root)
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
		return o.oneJSON(root, s, sts)
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

// oneJSON prints one plan's --json object: its stats, and the sub-trees
// (--subtrees) or the O-T-P tree (unless --stats).
func (o planOutput) oneJSON(root *featurize.OTPNode, s featurize.PlanStat, sts []featurize.SubTree) int {
	s.Name, s.Workload = "", ""
	v := map[string]any{"stats": s}
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

// dir prints per-plan stats, the node count × max depth distribution and the
// max (size, depth) per workload.
func (o planOutput) dir(dir string) int {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	if len(files) == 0 {
		fmt.Fprintf(os.Stderr, "prestroid plan: no *.json in %s\n", dir)
		return 1
	}
	var rows []featurize.PlanStat
	failed := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil {
			var root *featurize.OTPNode
			if root, err = o.build(b); err == nil && o.sentences {
				o.writeSentences(root)
				continue
			}
			if err == nil {
				rows = append(rows, featurize.NewPlanStat(strings.TrimSuffix(filepath.Base(f), ".json"), root))
				continue
			}
		}
		fmt.Fprintf(os.Stderr, "prestroid plan: %s: %v\n", f, err)
		failed++
	}
	if !o.sentences {
		o.printDir(rows, failed)
	}
	if failed > 0 {
		return 1
	}
	return 0
}

// printDir prints dir's table, grid and workload maxima (or their JSON).
func (o planOutput) printDir(rows []featurize.PlanStat, failed int) {
	maxima := featurize.WorkloadMaxima(rows)
	if o.json {
		enc := json.NewEncoder(o.w)
		enc.SetIndent("", "  ")
		if len(maxima) == 0 {
			maxima = nil
		}
		enc.Encode(map[string]any{"plans": rows, "workloads": maxima, "failed": failed})
		return
	}
	fmt.Fprintf(o.w, "%-28s %7s %6s %6s %7s\n", "plan", "nodes", "depth", "preds", "tables")
	for _, r := range rows {
		fmt.Fprintf(o.w, "%-28s %7d %6d %6d %7d\n", r.Name, r.Nodes, r.MaxDepth, r.Preds, len(r.Tables))
	}
	fmt.Fprintln(o.w, "\nnode count vs max depth (plans per cell)")
	g := featurize.NewSizeDepthGrid(rows, featurize.DefaultNodeEdges, featurize.DefaultDepthEdges)
	fmt.Fprintf(o.w, "%-10s", "depth\\nodes")
	for j := range g.NodeEdges {
		fmt.Fprintf(o.w, " %8s", featurize.BucketLabel(j, g.NodeEdges))
	}
	fmt.Fprintf(o.w, " %8s\n", featurize.BucketLabel(len(g.NodeEdges), g.NodeEdges))
	for i := len(g.Counts) - 1; i >= 0; i-- {
		fmt.Fprintf(o.w, "%-10s", featurize.BucketLabel(i, g.DepthEdges))
		for _, v := range g.Counts[i] {
			if v == 0 {
				fmt.Fprintf(o.w, " %8s", ".")
			} else {
				fmt.Fprintf(o.w, " %8d", v)
			}
		}
		fmt.Fprintln(o.w)
	}
	fmt.Fprintf(o.w, "\n%-12s %6s %10s %10s\n", "workload", "plans", "max nodes", "max depth")
	for _, m := range maxima {
		fmt.Fprintf(o.w, "%-12s %6d %10d %10d\n", m.Workload, m.Plans, m.MaxNodes, m.MaxDepth)
	}
}
