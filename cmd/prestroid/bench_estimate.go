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
	"github.com/prestroid/prestroid/proxy/protocol"
)

func init() {
	registerBench("estimate", "end-to-end added latency of the estimating proxy (EXPLAIN + estimate + forwarding) vs direct, cache miss and hit", benchEstimate)
}

func benchEstimate(args []string) int {
	fs := flag.NewFlagSet("bench estimate", flag.ContinueOnError)
	trino := fs.String("trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpch/*.sql and tpcds/*.sql: trinodb/trino's benchmark queries (docs/workloads.md)")
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
	// The benchmark measures the model's path (EXPLAIN, featurize, infer;
	// the estimate cache): no history stage serves its repeats.
	base, est, stop, err := startEstimatingProxy(trino, model, ortLib, func(cfg *config.Config) { cfg.Estimator.History.Disabled = true })
	if err != nil {
		return err
	}
	defer stop()
	return bench.Estimate(os.Stdout, bench.EstimateOptions{
		Trino: trino, ProxyURL: base, Workloads: workloads, Scale: scale, Rounds: rounds,
		Featurize: func(ctx context.Context, plan []byte) (time.Duration, error) {
			e, err := est.svc.EstimatePlan(ctx, plan)
			if err != nil {
				return 0, err
			}
			return e.Featurize + e.Infer, nil
		},
	})
}

// startEstimatingProxy starts the estimating proxy in process, wired as serve wires
// it, in front of trino (monitor off, a minute's estimate budget), with
// tune applied to the configuration first; it returns its URL, the
// estimator and a stop function.
func startEstimatingProxy(trino, model, ortLib string, tune func(*config.Config)) (string, estimatorAdapter, func(), error) {
	cfg, err := config.Load("")
	if err != nil {
		return "", estimatorAdapter{}, nil, err
	}
	cfg.SetUpstreams([]string{trino})
	cfg.Estimator.Model, cfg.Estimator.ORTLib = model, ortLib
	cfg.Routing.EstimateTimeout = config.Duration(time.Minute)
	cfg.Routing.MonitorInterval = config.Duration(-1)
	tune(cfg)
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return "", estimatorAdapter{}, nil, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	signer, err := protocol.NewSigner(nil)
	if err != nil {
		return "", estimatorAdapter{}, nil, err
	}
	o := proxy.OptionsFrom(cfg)
	o.Signer, o.Logger = signer, quiet
	closeEstimator, err := wireEstimator(cfg, &o, quiet)
	if err != nil {
		return "", estimatorAdapter{}, nil, err
	}
	est, ok := o.Estimator.(estimatorAdapter)
	if !ok {
		closeEstimator()
		return "", estimatorAdapter{}, nil, fmt.Errorf("no estimator: the model or the ONNX Runtime library could not be loaded (see prestroid serve's log)")
	}
	srv, err := proxy.New(o)
	if err != nil {
		closeEstimator()
		return "", estimatorAdapter{}, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeEstimator()
		return "", estimatorAdapter{}, nil, err
	}
	go srv.Serve(ln)
	stop := func() {
		srv.Shutdown(context.Background())
		closeEstimator()
	}
	return "http://" + ln.Addr().String(), est, stop, nil
}
