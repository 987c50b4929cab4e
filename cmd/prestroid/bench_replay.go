package main

// prestroid bench replay: flag parsing and the wiring (the estimating
// proxy as serve builds it, history on, in memory and cold) for
// bench.Replay, the estimate cascade on a recurring workload.

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/bench"
	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
)

func init() {
	registerBench("replay", "the estimate cascade on a recurring workload from a cold history, under each estimator.explain setting side by side: q-error, decision time, right class and hot-path EXPLAINs per source, vs the plain model", benchReplay)
}

func benchReplay(args []string) int {
	fs := flag.NewFlagSet("bench replay", flag.ContinueOnError)
	trino := fs.String("trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpch/*.sql and tpcds/*.sql: trinodb/trino's benchmark queries (docs/workloads.md)")
	families := fs.String("families", "tpch", "template families to draw from, comma-separated (empty: all)")
	scale := fs.String("scale", "tiny", "schema the templates are filled with")
	domains := fs.String("domains", "data/domains.json", "literal domains of the variant generator")
	n := fs.Int("n", 100, "statements to run")
	share := fs.Float64("new", 0.3, "share of statements that are templates never run before")
	seed := fs.Uint64("seed", 1, "random seed")
	model := fs.String("model", "", "model bundle directory (default: the embedded model)")
	ortLib := fs.String("ort-lib", "", "ONNX Runtime library (default: the one `make ort` installs)")
	explain := fs.String("explain", "always,when-uncertain,never", "estimator.explain settings to run side by side, comma-separated (one proxy each)")
	maxDur := fs.Duration("max-duration", 0, "stop drawing statements after this long and report on those run (0: none)")
	runsOut := fs.String("runs-out", "", "write one JSON line per statement and setting to this file")
	classes := fs.String("classes", "1", "routing classes' CPU-second bounds, comma-separated, increasing (a last unbounded class is added)")
	users := fs.Int("users", 1, "users the statements are sent as, in rotation (a fleet repeating each other's statements)")
	cacheTTL := fs.Duration("cache-ttl", -1, "estimator.cache_ttl of the proxies (negative: no estimate cache, repeats answered by the history)")
	learn := fs.String("learn", "", "estimator.learn_min_runs values to run side by side, comma-separated, one proxy each per --explain setting (-1: every background EXPLAIN runs, as before the rule; empty: the default alone)")
	explainRate := fs.Float64("explain-rate", 0, "estimator.explain_rate of the proxies but always's (the reference: every statement explained) (0: no ceiling)")
	explainBurst := fs.Int("explain-burst", 0, "estimator.explain_burst with --explain-rate (0: the rate rounded up)")
	mix := fs.String("mix", "", "draw the statements as a fleet runs them, in these shares (e.g. dashboards=0.6,etl=0.25,adhoc=0.15; --new and --users are then unused), and add the fleet's report (docs/operations.md)")
	shapes := fs.Int("dashboard-shapes", 24, "--mix: templates the dashboards show")
	jobs := fs.Int("etl-jobs", 8, "--mix: scheduled statements that repeat exactly")
	fleetUsers := fs.Int("fleet-users", 50, "--mix: users who open the dashboards")
	refresh := fs.Float64("refresh", 0.5, "--mix: share of a dashboard's statements with new literals (the rest repeat its current ones as another user)")
	adhocFam := fs.String("adhoc-families", "", "--mix: template families the ad-hoc statements come from, the dashboards and jobs from the others (empty: all from all)")
	storage := fs.String("storage", "", "catalog of materialized TPC schemas to run on (e.g. iceberg: Parquet partitioned by date; empty: the TPC connectors)")
	templates := fs.String("templates", "", "only these templates, comma-separated (e.g. tpch/q06,tpch/q14; empty: all of --families)")
	cacheKeys := fs.String("cache-keys", "", "estimator.cache_shape_only values to run side by side, one proxy each per --explain setting: range (false, the default: keyed on the range literals too), shape (true: the shape alone, as before) (empty: the default alone)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var fam []string
	if *families != "" {
		fam = strings.Split(*families, ",")
	}
	dom, err := collector.LoadDomains(*domains)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
		return 1
	}
	bounds, err := parseClassBounds(*classes)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
		return 2
	}
	o := bench.ReplayOptions{Workloads: *workloads, Families: fam, Scale: *scale, Domains: dom, N: *n, New: *share, Seed: *seed, Bounds: bounds, MaxDuration: *maxDur, Users: *users,
		Storage: *storage}
	if *templates != "" {
		o.Templates = strings.Split(*templates, ",")
	}
	if *mix != "" {
		m, err := bench.ParseFleetMix(*mix)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
			return 2
		}
		m.DashboardShapes, m.ETLJobs, m.Users, m.Refresh = *shapes, *jobs, *fleetUsers, *refresh
		if *adhocFam != "" {
			m.AdhocFamilies = strings.Split(*adhocFam, ",")
		}
		o.Fleet = &m
	}
	if *runsOut != "" {
		f, err := os.Create(*runsOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
			return 1
		}
		defer f.Close()
		o.Runs = f
	}
	var learns []int
	for _, f := range strings.Split(*learn, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "prestroid bench replay: --learn %q: want integers\n", *learn)
			return 2
		}
		learns = append(learns, v)
	}
	tune := replayTuning{cacheTTL: *cacheTTL, learn: learns, explainRate: *explainRate, explainBurst: *explainBurst}
	for _, f := range strings.Split(*cacheKeys, ",") {
		switch f = strings.TrimSpace(f); f {
		case "":
		case "range", "shape":
			tune.cacheKeys = append(tune.cacheKeys, f)
		default:
			fmt.Fprintf(os.Stderr, "prestroid bench replay: --cache-keys %q: want range and/or shape\n", *cacheKeys)
			return 2
		}
	}
	if err := runBenchReplay(*trino, *model, *ortLib, strings.Split(*explain, ","), tune, o); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
		return 1
	}
	return 0
}

// runBenchReplay starts one estimating proxy per estimator.explain
// setting (and per learn_min_runs value of tune.learn), each with the
// classes of ro.Bounds served by one cluster each (all of them trino,
// named bench.ClassName(i)), and replays through them.
func runBenchReplay(trino, model, ortLib string, settings []string, tune replayTuning, ro bench.ReplayOptions) error {
	learns := tune.learn
	if len(learns) == 0 {
		learns = []int{0} // the default
	}
	keys := tune.cacheKeys
	if len(keys) == 0 {
		keys = []string{"range"} // the default
	}
	for _, mode := range settings {
		mode = strings.TrimSpace(mode)
		for _, learn := range learns {
			for _, key := range keys {
				name := mode
				if len(tune.learn) > 0 {
					name += " learn=" + strconv.Itoa(learn)
				}
				if len(tune.cacheKeys) > 0 {
					name += " cache=" + key
				}
				capped := tune.explainRate > 0 && mode != "always" // always is the reference
				if capped {
					name += " rate=" + strconv.FormatFloat(tune.explainRate, 'g', -1, 64)
				}
				base, _, stop, err := startEstimatingProxy(trino, model, ortLib, func(cfg *config.Config) {
					cfg.Estimator.CacheTTL = config.Duration(tune.cacheTTL)
					cfg.Estimator.CacheShapeOnly = key == "shape"
					cfg.Estimator.Explain = mode
					cfg.Estimator.LearnMinRuns = learn
					if capped {
						cfg.Estimator.ExplainRate, cfg.Estimator.ExplainBurst = tune.explainRate, tune.explainBurst
					}
					cfg.Routing.Classes, cfg.Clusters = nil, nil
					for i := 0; i <= len(ro.Bounds); i++ {
						c := config.CostClass{Name: bench.ClassName(i)}
						if i < len(ro.Bounds) {
							c.MaxCPUSeconds = ro.Bounds[i]
						}
						cfg.Routing.Classes = append(cfg.Routing.Classes, c)
						cfg.Clusters = append(cfg.Clusters, config.Cluster{Name: c.Name, URL: trino, Class: c.Name})
					}
				})
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				defer stop()
				ro.Settings = append(ro.Settings, bench.ReplaySetting{Name: name, ProxyURL: base})
			}
		}
	}
	return bench.Replay(os.Stdout, ro)
}

// replayTuning are bench replay's estimator settings beyond
// estimator.explain: the estimate cache's TTL (by default none: repeats
// are answered by the cascade's history, or explained, which is what is
// measured), the learn_min_runs values to compare (each its own proxy),
// the EXPLAIN ceiling and its burst (not for explain: always, the
// reference), the estimate cache's keys to compare (range, shape:
// estimator.cache_shape_only false and true; each its own proxy).
type replayTuning struct {
	cacheTTL     time.Duration
	learn        []int
	explainRate  float64
	explainBurst int
	cacheKeys    []string
}

// parseClassBounds reads --classes: the routing classes' CPU-second
// bounds, comma-separated, increasing (a last unbounded class follows
// them).
func parseClassBounds(s string) ([]float64, error) {
	var bounds []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		b, err := strconv.ParseFloat(f, 64)
		if err != nil || !(b > 0) || (len(bounds) > 0 && b <= bounds[len(bounds)-1]) {
			return nil, fmt.Errorf("--classes %q: want increasing positive CPU seconds", s)
		}
		bounds = append(bounds, b)
	}
	return bounds, nil
}
