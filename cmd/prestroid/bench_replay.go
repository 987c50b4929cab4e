package main

// prestroid bench replay: flag parsing and the wiring (the estimating
// proxy as serve builds it, history on, in memory and cold) for
// bench.Replay, the estimate cascade on a recurring workload.

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/prestroid/prestroid/bench"
	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
)

func init() {
	registerBench("replay", "the estimate cascade on a recurring workload from a cold history: q-error and decision time per source, vs the plain model", benchReplay)
}

func benchReplay(args []string) int {
	fs := flag.NewFlagSet("bench replay", flag.ContinueOnError)
	trino := fs.String("trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpcds/*.sql and tpch/*.sql")
	families := fs.String("families", "tpch", "template families to draw from, comma-separated (empty: all)")
	scale := fs.String("scale", "tiny", "schema the templates are filled with")
	domains := fs.String("domains", "data/domains.json", "literal domains of the variant generator")
	n := fs.Int("n", 100, "statements to run")
	share := fs.Float64("new", 0.3, "share of statements that are templates never run before")
	seed := fs.Uint64("seed", 1, "random seed")
	model := fs.String("model", "", "model bundle directory (default: the embedded model)")
	ortLib := fs.String("ort-lib", "", "ONNX Runtime library (default: the one `make ort` installs)")
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
	o := bench.ReplayOptions{Workloads: *workloads, Families: fam, Scale: *scale, Domains: dom, N: *n, New: *share, Seed: *seed}
	if err := runBenchReplay(*trino, *model, *ortLib, o); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench replay:", err)
		return 1
	}
	return 0
}

func runBenchReplay(trino, model, ortLib string, ro bench.ReplayOptions) error {
	// No estimate cache: repeats are answered by the cascade's history
	// (or explained), which is what is measured.
	base, _, stop, err := startEstimatingProxy(trino, model, ortLib, func(cfg *config.Config) { cfg.Estimator.CacheTTL = -1 })
	if err != nil {
		return err
	}
	defer stop()
	ro.ProxyURL = base
	return bench.Replay(os.Stdout, ro)
}
