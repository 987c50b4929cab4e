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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/trinodb/trino-go-client/trino"
)

func init() {
	register("collect", "run SQL workloads against Trino or PrestoDB and record plans and CPU times", runCollect)
}

// collectFlags are collect's flags.
type collectFlags struct {
	server, user, workloads, out, domains string
	seed                                  int64
	scales, templates, genScales          string
	variants, genVariants, reps           int
	sessionShare                          float64
	limit, concurrency                    int
	timeout                               time.Duration
	dryRun, noPlan                        bool
	splitOut                              string
	storage, engine                       string
	operatorStats                         bool
	session                               string
}

func collectFlagSet(f *collectFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("collect", flag.ContinueOnError)
	fs.StringVar(&f.server, "server", "http://127.0.0.1:8083", "Trino or PrestoDB coordinator URL")
	fs.StringVar(&f.engine, "engine", "", "the server's engine, trino or presto; empty: told by its /v1/info version (a contradicting version fails the run)")
	fs.StringVar(&f.user, "user", "prestroid-collect", "user (X-Trino-User, X-Presto-User)")
	fs.StringVar(&f.workloads, "workloads", "../shared/workloads", "directory with tpch/*.sql and tpcds/*.sql: trinodb/trino's benchmark queries (docs/workloads.md)")
	fs.StringVar(&f.out, "out", "data/records/collect.jsonl.gz", "record file (appended to; resumable)")
	fs.StringVar(&f.domains, "domains", "data/domains.json", "column domain cache (created from the server if missing)")
	fs.Int64Var(&f.seed, "seed", 1, "generator seed")
	fs.StringVar(&f.scales, "scales", "tiny", "comma-separated schemas for the TPC templates, in order")
	fs.IntVar(&f.variants, "variants", 10, "variants per template and scale (variant 0: the file's own values)")
	fs.Float64Var(&f.sessionShare, "session-share", 0.5, "share of variants run with a varied session")
	fs.StringVar(&f.session, "session", "", "session properties set on every query over the drawn ones, NAME=VALUE,... (e.g. enable_dynamic_filtering=false: the same statements without dynamic filtering; part of the keys)")
	fs.StringVar(&f.templates, "templates", "", "comma-separated template names to keep (e.g. tpcds/q03,tpch/q06); all if empty")
	fs.StringVar(&f.genScales, "gen-scales", "tiny", "comma-separated schemas for generated large queries; none if empty")
	fs.IntVar(&f.genVariants, "gen-variants", 20, "generated queries per generator kind and scale")
	fs.IntVar(&f.reps, "reps", 1, "runs per query (noise measurement)")
	fs.IntVar(&f.limit, "limit", 0, "run at most this many new queries (0: all)")
	fs.IntVar(&f.concurrency, "concurrency", 1, "queries in flight")
	fs.DurationVar(&f.timeout, "timeout", 5*time.Minute, "per-query execution timeout (cancels the query on the server)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "print the planned queries as JSON lines and exit")
	fs.BoolVar(&f.noPlan, "no-plan", false, "do not take EXPLAIN plans")
	fs.StringVar(&f.storage, "storage", "", "catalog of the Parquet copies made by prestroid materialize to run on (e.g. iceberg); empty: the tpch/tpcds connectors")
	fs.BoolVar(&f.operatorStats, "operator-stats", false, "record each query's CPU time per operator type (fetches the query's full /v1/query/{id}, not pruned)")
	fs.StringVar(&f.splitOut, "write-split", "", "write the seeded template-level 8/1/1 split to this file and exit")
	return fs
}

func collectLogf(format string, a ...any) { fmt.Fprintf(os.Stderr, "collect: "+format+"\n", a...) }

func runCollect(args []string) int {
	var f collectFlags
	if err := collectFlagSet(&f).Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := collect(ctx, &f); err != nil {
		collectLogf("%v", err)
		return 1
	}
	return 0
}

// collect plans the queries (templates, domains from the server) and runs
// them, or writes the split (--write-split) or the plan (--dry-run).
func collect(ctx context.Context, f *collectFlags) error {
	ts, err := collector.LoadTemplates(f.workloads)
	if err != nil {
		return err
	}
	if f.splitOut != "" {
		return collector.MakeSplit(collector.AllTemplateNames(ts), f.seed).WriteFile(f.splitOut)
	}
	dom, err := collector.LoadDomains(f.domains)
	if err != nil {
		return err
	}
	eng, err := collectEngine(ctx, f)
	if err != nil {
		return err
	}
	// PrestoDB gets no database: the runner speaks its protocol itself, and
	// its items are planned from the domain cache that Trino's runs filled.
	var db *sql.DB
	if eng == dialect.Trino {
		conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(f.server, "://", "://"+f.user+"@", 1), Source: "prestroid-collect"})
		if err != nil {
			return err
		}
		db = sql.OpenDB(conn)
		defer db.Close()
		db.SetMaxIdleConns(f.concurrency + 1)
	} else if f.storage != "" {
		return fmt.Errorf("--storage %s: PrestoDB collections run on the tpch connector only", f.storage)
	}

	cfg := collector.GenConfig{
		Seed: f.seed, Scales: splitList(f.scales), Variants: f.variants, SessionShare: f.sessionShare,
		Templates: splitList(f.templates), GenScales: splitList(f.genScales), GenVariants: f.genVariants, Reps: f.reps,
		Storage: f.storage,
	}
	if cfg.Session, err = parseSessionFlag(f.session); err != nil {
		return err
	}
	if err := fetchDomains(ctx, db, dom, ts, cfg); err != nil {
		return err
	}
	if err := dom.Save(f.domains); err != nil {
		return err
	}
	items := collector.Generate(cfg, ts, dom)
	if f.storage != "" && !f.dryRun {
		if err := checkStorage(ctx, db, f.storage, ts, cfg); err != nil {
			return err
		}
	}
	if f.dryRun {
		enc := json.NewEncoder(os.Stdout)
		for _, it := range items {
			enc.Encode(it)
		}
		return nil
	}
	return runItems(ctx, f, eng, db, items)
}

// collectEngine is the engine of --server: --engine, or the one its
// /v1/info version names (Trino when it names neither). A dry run that
// cannot reach the server plans as for Trino; the run itself checks the
// version again.
func collectEngine(ctx context.Context, f *collectFlags) (dialect.Engine, error) {
	eng, err := dialect.Parse(f.engine)
	if err != nil || eng != dialect.Unknown {
		return eng, err
	}
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	v, err := collector.ServerVersion(vctx, &http.Client{Timeout: 30 * time.Second}, f.server)
	if err != nil && !f.dryRun {
		return eng, err
	}
	return collector.ResolveEngine(dialect.Unknown, v)
}

// checkStorage refuses to collect on a storage catalog whose copies of the
// planned families and scales are incomplete (every EXPLAIN on a missing
// table would be recorded as EXPLAIN_FAILED).
func checkStorage(ctx context.Context, db *sql.DB, storage string, ts []collector.Template, cfg collector.GenConfig) error {
	fams := map[string][]string{}
	for _, sc := range cfg.Scales {
		for _, t := range ts {
			if len(cfg.Templates) == 0 || slices.Contains(cfg.Templates, t.Name) {
				if !slices.Contains(fams[sc], t.Family) {
					fams[sc] = append(fams[sc], t.Family)
				}
			}
		}
	}
	for _, sc := range cfg.GenScales {
		if !slices.Contains(fams[sc], "tpcds") {
			fams[sc] = append(fams[sc], "tpcds")
		}
	}
	m := &collector.Materializer{DB: db, Catalog: storage}
	for sc, fs := range fams {
		missing, err := m.Incomplete(ctx, fs, []string{sc})
		if err != nil {
			return err
		}
		if len(missing) > 0 {
			return fmt.Errorf("--storage %s: %d tables not materialized at %s (e.g. %s): run prestroid materialize --catalog %s --families %s --scales %s",
				storage, len(missing), sc, missing[0], storage, strings.Join(fs, ","), sc)
		}
	}
	return nil
}

// runItems runs the items not yet in the record file (at most --limit) on
// a server of engine eng (db: Trino's only).
func runItems(ctx context.Context, f *collectFlags, eng dialect.Engine, db *sql.DB, items []collector.Item) error {
	w, err := collector.OpenWriter(f.out)
	if err != nil {
		return err
	}
	defer w.Close()
	if f.limit > 0 {
		var todo []collector.Item
		for _, it := range items {
			if !w.Has(it.Key) && len(todo) < f.limit {
				todo = append(todo, it)
			}
		}
		items = todo
	}
	host, _ := os.Hostname()
	r := &collector.Runner{
		Server: strings.TrimRight(f.server, "/"), Engine: eng, DB: db, User: f.user, Concurrency: f.concurrency, Timeout: f.timeout,
		Writer: w, Progress: os.Stderr, HTTP: &http.Client{Timeout: 2 * time.Minute}, OperatorStats: f.operatorStats,
		Info: collector.RunInfo{Host: host, Concurrency: f.concurrency, TimeoutMs: f.timeout.Milliseconds(), Run: time.Now().UTC().Format(time.RFC3339)},
	}
	if !f.noPlan {
		r.Plan = explainPlan(&plan.ExplainClient{HTTP: &http.Client{Timeout: 2 * time.Minute}}, eng)
	}
	collectLogf("%d planned queries (%d already in %s), concurrency %d, timeout %s", len(items), w.Len(), f.out, f.concurrency, f.timeout)
	sum, err := r.Run(ctx, items)
	collectLogf("done %d, skipped %d, by status %v, in %s", sum.Done, sum.Skipped, sum.ByStatus, sum.Elapsed.Truncate(time.Second))
	return err
}

// explainPlan adapts the serving EXPLAIN client and featurizer to the
// collector: the plan JSON (compacted) and its O-T-P summary, explained on
// a coordinator of engine (the client takes the session under Trino's
// names, dialect.Canonical, and renames them for it). A plan the
// featurizer cannot read is kept with Plan.Error set.
func explainPlan(c *plan.ExplainClient, engine dialect.Engine) collector.PlanFunc {
	return func(ctx context.Context, server string, it *collector.Item, h http.Header) (*collector.Plan, error) {
		if !plan.Explainable(it.SQL) {
			return nil, nil // not a query (SET SESSION, SHOW, ...): run it without a plan
		}
		res, err := c.ExplainOn(ctx, server, engine, it.SQL, dialect.Canonical(h))
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
		plan, err := plan.Parse(res.PlanJSON)
		if err == nil {
			var root *featurize.OTPNode
			if root, err = featurize.BuildOTP(plan); err == nil {
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

// parseSessionFlag reads collect's --session, written as an X-Trino-Session
// header is (NAME=VALUE pairs separated by commas, read by
// sessionProperties, which the feedback records use too); nil when empty.
// Unlike a header's, every pair must name a property and give it a value,
// once.
func parseSessionFlag(s string) (map[string]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	out := sessionProperties([]string{s})
	ok := len(out) == len(strings.Split(s, ","))
	for k, v := range out {
		ok = ok && k != "" && v != ""
	}
	if !ok {
		return nil, fmt.Errorf("--session %q: want NAME=VALUE,... (each property once)", s)
	}
	return out, nil
}
