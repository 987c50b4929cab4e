package main

// prestroid bench estimate: flag parsing and the wiring (the estimating
// proxy as serve builds it) for bench.Estimate, what the estimating proxy
// adds to a query's submission on a real Trino.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/prestroid/prestroid/bench"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/proxy"
)

func init() {
	registerBench("estimate", "end-to-end added latency of the estimating proxy (EXPLAIN + estimate + forwarding) vs direct, cache miss and hit", benchEstimate)
}

func benchEstimate(args []string) int {
	fs := flag.NewFlagSet("bench estimate", flag.ContinueOnError)
	trino := fs.String("trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpcds/*.sql and tpch/*.sql")
	scale := fs.String("scale", "tiny", "schema the templates are filled with")
	rounds := fs.Int("rounds", 2, "passes over the workload")
	model := fs.String("model", "", "model bundle directory (default: the embedded model)")
	ortLib := fs.String("ort-lib", "", "ONNX Runtime library (default: the one `make ort` installs)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runBenchEstimate(*trino, *workloads, *scale, *rounds, *model, *ortLib); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench estimate:", err)
		return 1
	}
	return 0
}

func runBenchEstimate(trino, workloads, scale string, rounds int, model, ortLib string) error {
	cfg, err := config.Load("")
	if err != nil {
		return err
	}
	cfg.SetUpstreams([]string{trino})
	cfg.Estimator.Model, cfg.Estimator.ORTLib = model, ortLib
	cfg.Routing.EstimateTimeout = config.Duration(time.Minute)
	cfg.Routing.MonitorInterval = config.Duration(-1)
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	signer, err := proxy.NewSigner(nil)
	if err != nil {
		return err
	}
	o := proxyOptions(cfg, signer, quiet)
	// The benchmark measures the model's path (EXPLAIN, featurize, infer;
	// the estimate cache): no history stage serves its repeats.
	cfg.Estimator.History.Disabled = true
	closeEstimator, err := wireEstimator(cfg, &o, quiet)
	if err != nil {
		return err
	}
	defer closeEstimator()
	est, ok := o.Estimator.(estimatorAdapter)
	if !ok {
		return fmt.Errorf("no estimator: the model or the ONNX Runtime library could not be loaded (see prestroid serve's log)")
	}
	srv, err := proxy.New(o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())

	return bench.Estimate(os.Stdout, bench.EstimateOptions{
		Trino: trino, ProxyURL: "http://" + ln.Addr().String(), Workloads: workloads, Scale: scale, Rounds: rounds,
		Featurize: func(ctx context.Context, plan []byte) (time.Duration, error) {
			e, err := est.svc.EstimatePlan(ctx, plan)
			if err != nil {
				return 0, err
			}
			return time.Duration(e.FeaturizeMicros+e.InferMicros) * time.Microsecond, nil
		},
	})
}
