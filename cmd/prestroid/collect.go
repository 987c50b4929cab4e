package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/trinodb/trino-go-client/trino"
)

func init() {
	register("collect", "run SQL workloads against Trino and record plans and CPU times", runCollect)
}

func runCollect(args []string) int {
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8083", "Trino coordinator URL")
	user := fs.String("user", "prestroid-collect", "Trino user (X-Trino-User)")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpcds/*.sql and tpch/*.sql")
	out := fs.String("out", "data/records/collect.jsonl.gz", "record file (appended to; resumable)")
	domainsPath := fs.String("domains", "data/domains.json", "column domain cache (created from the server if missing)")
	seed := fs.Int64("seed", 1, "generator seed")
	scales := fs.String("scales", "tiny", "comma-separated schemas for the TPC templates, in order")
	variants := fs.Int("variants", 10, "variants per template and scale (variant 0: the file's own values)")
	sessionShare := fs.Float64("session-share", 0.5, "share of variants run with a varied session")
	templates := fs.String("templates", "", "comma-separated template names to keep (e.g. tpcds/q03,tpch/q06); all if empty")
	genScales := fs.String("gen-scales", "tiny", "comma-separated schemas for generated large queries; none if empty")
	genVariants := fs.Int("gen-variants", 20, "generated queries per generator kind and scale")
	reps := fs.Int("reps", 1, "runs per query (noise measurement)")
	limit := fs.Int("limit", 0, "run at most this many new queries (0: all)")
	concurrency := fs.Int("concurrency", 1, "queries in flight")
	timeout := fs.Duration("timeout", 5*time.Minute, "per-query execution timeout (cancels the query on Trino)")
	dryRun := fs.Bool("dry-run", false, "print the planned queries as JSON lines and exit")
	noPlan := fs.Bool("no-plan", false, "do not take EXPLAIN plans")
	splitOut := fs.String("write-split", "", "write the seeded template-level 8/1/1 split to this file and exit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(os.Stderr, "collect: "+format+"\n", a...) }

	ts, err := collector.LoadTemplates(*workloads)
	if err != nil {
		logf("%v", err)
		return 1
	}
	if *splitOut != "" {
		if err := collector.MakeSplit(collector.AllTemplateNames(ts), *seed).WriteFile(*splitOut); err != nil {
			logf("%v", err)
			return 1
		}
		return 0
	}
	dom, err := collector.LoadDomains(*domainsPath)
	if err != nil {
		logf("%v", err)
		return 1
	}
	conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(*server, "://", "://"+*user+"@", 1), Source: "prestroid-collect"})
	if err != nil {
		logf("%v", err)
		return 1
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxIdleConns(*concurrency + 1)

	cfg := collector.GenConfig{
		Seed: *seed, Scales: splitList(*scales), Variants: *variants, SessionShare: *sessionShare,
		Templates: splitList(*templates), GenScales: splitList(*genScales), GenVariants: *genVariants, Reps: *reps,
	}
	if err := fetchDomains(ctx, db, dom, ts, cfg); err != nil {
		logf("%v", err)
		return 1
	}
	if err := dom.Save(*domainsPath); err != nil {
		logf("%v", err)
		return 1
	}
	items := collector.Generate(cfg, ts, dom)
	if *dryRun {
		enc := json.NewEncoder(os.Stdout)
		for _, it := range items {
			enc.Encode(it)
		}
		return 0
	}
	w, err := collector.OpenWriter(*out)
	if err != nil {
		logf("%v", err)
		return 1
	}
	defer w.Close()
	if *limit > 0 {
		var todo []collector.Item
		for _, it := range items {
			if !w.Has(it.Key) && len(todo) < *limit {
				todo = append(todo, it)
			}
		}
		items = todo
	}
	host, _ := os.Hostname()
	r := &collector.Runner{
		Server: strings.TrimRight(*server, "/"), DB: db, User: *user, Concurrency: *concurrency, Timeout: *timeout,
		Writer: w, Progress: os.Stderr, HTTP: &http.Client{Timeout: 2 * time.Minute},
		Info: collector.RunInfo{Host: host, Concurrency: *concurrency, TimeoutMs: timeout.Milliseconds(), Run: time.Now().UTC().Format(time.RFC3339)},
	}
	if !*noPlan {
		r.Plan = explainPlan(&plan.ExplainClient{HTTP: &http.Client{Timeout: 2 * time.Minute}})
	}
	logf("%d planned queries (%d already in %s), concurrency %d, timeout %s", len(items), w.Len(), *out, *concurrency, *timeout)
	sum, err := r.Run(ctx, items)
	logf("done %d, skipped %d, by status %v, in %s", sum.Done, sum.Skipped, sum.ByStatus, sum.Elapsed.Truncate(time.Second))
	if err != nil {
		logf("%v", err)
		return 1
	}
	return 0
}

// explainPlan adapts the serving EXPLAIN client and featurizer to the
// collector: the plan JSON (compacted) and its O-T-P summary.
func explainPlan(c *plan.ExplainClient) collector.PlanFunc {
	return func(ctx context.Context, server string, it *collector.Item, h http.Header) (*collector.Plan, error) {
		if !plan.Explainable(it.SQL) {
			return nil, nil // not a query (SET SESSION, SHOW, ...): run it without a plan
		}
		res, err := c.Explain(ctx, server, it.SQL, h)
		if err != nil {
			var te *plan.TrinoError
			if !errors.As(err, &te) {
				// Not a verdict on the query (network, HTTP status, a
				// deadline): retry in a later run.
				return nil, fmt.Errorf("%w: %w", collector.ErrUnavailable, err)
			}
			return nil, err
		}
		p := &collector.Plan{
			QueryID: res.QueryID, ElapsedMillis: res.ElapsedMillis, AnalysisMillis: res.AnalysisMillis,
			PlanningMillis: res.PlanningMillis, WallMillis: res.Wall.Milliseconds(),
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, res.PlanJSON); err != nil {
			p.JSON = append(json.RawMessage(nil), res.PlanJSON...)
			p.Error = "compact: " + err.Error()
		} else {
			p.JSON = buf.Bytes()
		}
		pl, err := plan.Parse(res.PlanJSON)
		if err == nil {
			var root *featurize.OTPNode
			if root, err = featurize.BuildOTP(pl); err == nil {
				s := featurize.Stats(root)
				p.OTP = &collector.OTPSummary{Nodes: s.Nodes, MaxDepth: s.MaxDepth, Preds: s.Preds, Tables: s.Tables}
			}
		}
		if err != nil {
			p.Error = err.Error()
		}
		return p, nil
	}
}

// fetchDomains reads, from the server, the column lists and the value
// domains that the templates and generators need at every scale (cached).
func fetchDomains(ctx context.Context, db *sql.DB, dom *collector.Domains, ts []collector.Template, cfg collector.GenConfig) error {
	if err := dom.FetchColumns(ctx, db, "tpcds", "tpch"); err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, n := range cfg.Templates {
		keep[n] = true
	}
	need := map[string]map[string]bool{} // catalog -> column set
	for _, t := range ts {
		if len(keep) > 0 && !keep[t.Name] {
			continue
		}
		if need[t.Catalog] == nil {
			need[t.Catalog] = map[string]bool{}
		}
		for _, c := range t.Columns(dom.Columns[t.Catalog]) {
			need[t.Catalog][c] = true
		}
	}
	for _, sc := range cfg.Scales {
		for cat, set := range need {
			var cols []string
			for c := range set {
				cols = append(cols, c)
			}
			if err := dom.Fetch(ctx, db, cat, sc, cols); err != nil {
				return err
			}
		}
	}
	for _, sc := range cfg.GenScales {
		if err := dom.Fetch(ctx, db, "tpcds", sc, collector.GenColumns()); err != nil {
			return err
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
