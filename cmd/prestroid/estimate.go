package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/internal/dialect"
)

func init() {
	register("estimate", "predict a query's CPU time with the cost model (EXPLAIN on Trino, no execution)", runEstimate)
}

func runEstimate(args []string) int {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: prestroid estimate --server URL [--user U] [--catalog C --schema S] [--model DIR] [--json] "SQL"
       prestroid estimate --plan FILE [--model DIR] [--json]

Runs EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) as the user and predicts the
query's CPU time with the model bundle (default: the one embedded in the
binary). SQL "-" reads the statement from standard input.`)
		fs.PrintDefaults()
	}
	server := fs.String("server", os.Getenv("PRESTROID_TRINO_URL"), "Trino or PrestoDB coordinator URL (env PRESTROID_TRINO_URL)")
	engine := fs.String("engine", "", "engine of --server: trino or presto (default: its /v1/info version says)")
	user := fs.String("user", os.Getenv("USER"), "user (X-Trino-User, or X-Presto-User on PrestoDB)")
	catalog := fs.String("catalog", "", "default catalog (X-Trino-Catalog)")
	schema := fs.String("schema", "", "default schema (X-Trino-Schema)")
	password := fs.String("password-env", "", "name of an environment variable holding the user's password (Basic auth; needs https)")
	var session multiFlag
	fs.Var(&session, "session", "session property NAME=VALUE (repeatable)")
	model := fs.String("model", os.Getenv("PRESTROID_MODEL"), "model bundle directory (default: the embedded bundle; env PRESTROID_MODEL)")
	ortLib := fs.String("ort-lib", os.Getenv("PRESTROID_ORT_LIB"), "ONNX Runtime library libonnxruntime.so.1 (env PRESTROID_ORT_LIB; default: where `make ort` installs it)")
	plan := fs.String("plan", "", "estimate a saved EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) plan instead of asking Trino")
	asJSON := fs.Bool("json", false, "print a JSON object (cpu_seconds, model, explain_ms, featurize_us, infer_us, ...)")
	timeout := fs.Duration("timeout", 60*time.Second, "time limit for the EXPLAIN and the model")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(os.Stderr, "prestroid estimate:", err)
		return code
	}
	var sql string
	switch {
	case *plan != "" && fs.NArg() == 0:
	case *plan == "" && fs.NArg() == 1:
		var err error
		if sql, err = readSQL(fs.Arg(0)); err != nil {
			return fail(2, err)
		}
	default:
		fs.Usage()
		return 2
	}
	if *plan == "" && *server == "" {
		return fail(2, fmt.Errorf("--server is required (or set PRESTROID_TRINO_URL)"))
	}

	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg := estimateConfig(*model, *ortLib, *timeout)
	svc, _, _, err := newEstimatorService(cfg.Estimator, cfg.Routing, cfg.Guardrails, nil, logger)
	if err != nil {
		return fail(1, err)
	}
	defer svc.Close()

	var h http.Header
	eng := dialect.Trino
	if *plan == "" {
		if h, err = callerHeader(*user, *catalog, *schema, *password, session); err != nil {
			return fail(2, err)
		}
		if eng, err = collectEngine(context.Background(), &collectFlags{engine: *engine, server: *server}); err != nil {
			return fail(1, err)
		}
	}
	e, err := estimateOne(svc, *plan, eng, *server, sql, h, *timeout)
	if err != nil {
		return fail(1, err)
	}
	if err := printEstimate(e, *asJSON); err != nil {
		return fail(1, err)
	}
	return 0
}

// estimateConfig is the configuration of one estimate: config's defaults
// (the cheap statements' constant, the ONNX Runtime library when ortLib is
// empty) but one inference at a time, no caches, no history (nothing to
// learn, and a missing model is an error), and always the plan: the text
// stage's shortcut exists for routing, and there are no classes here.
func estimateConfig(model, ortLib string, timeout time.Duration) *config.Config {
	cfg := &config.Config{Estimator: config.Estimator{Model: model, ORTLib: ortLib, MaxBatch: 1, Workers: 1,
		History:  config.History{Disabled: true},
		CacheTTL: -1, VectorCacheBytes: -1, PlanCacheBytes: -1, ExplainTimeout: config.Duration(timeout),
		Explain: "always"}}
	cfg.FillDefaults()
	return cfg
}

// estimateOne estimates the saved plan file, or sql on server (of engine)
// as h (X-Trino-* names: the EXPLAIN renames them for the engine).
func estimateOne(svc *estimator.Service, plan string, engine dialect.Engine, server, sql string, h http.Header, timeout time.Duration) (*estimate.Estimate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if plan != "" {
		js, err := os.ReadFile(plan)
		if err != nil {
			return nil, err
		}
		return svc.EstimatePlan(ctx, js)
	}
	return svc.EstimateFor(ctx, engine, []string{server}, sql, h)
}

// callerHeader is the identity and session the EXPLAIN runs as; password
// names an environment variable holding the user's password.
func callerHeader(user, catalog, schema, password string, session []string) (http.Header, error) {
	h := http.Header{}
	if user != "" {
		h.Set("X-Trino-User", user)
	}
	if catalog != "" {
		h.Set("X-Trino-Catalog", catalog)
	}
	if schema != "" {
		h.Set("X-Trino-Schema", schema)
	}
	for _, s := range session {
		if !strings.Contains(s, "=") {
			return nil, fmt.Errorf("--session %q: want NAME=VALUE", s)
		}
		h.Add("X-Trino-Session", s)
	}
	if password != "" {
		req, _ := http.NewRequest("GET", "/", nil)
		req.SetBasicAuth(user, os.Getenv(password))
		h.Set("Authorization", req.Header.Get("Authorization"))
	}
	return h, nil
}

// printEstimate prints e as a line or as the --json object.
func printEstimate(e *estimate.Estimate, asJSON bool) error {
	out := estimate.NewJSON(*e)
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(estimateOutput{out, e.Untrained})
	}
	if !e.Estimated {
		fmt.Println("not estimated:", e.Reason)
		return nil
	}
	if e.Source == estimate.SourceCheap {
		fmt.Printf("%.3f CPU seconds (CPU_TIME=%s)  cheap by nature: no EXPLAIN\n", e.CPUSeconds, out.CPUTime)
		return nil
	}
	fmt.Printf("%.3f CPU seconds (CPU_TIME=%s)  model %s  explain %.1f ms  featurize %d µs  infer %d µs\n",
		e.CPUSeconds, out.CPUTime, e.Model, float64(e.Explain)/float64(time.Millisecond), e.Featurize.Microseconds(), e.Infer.Microseconds())
	if e.PeakMemory.Known() || e.Elapsed.Known() {
		fmt.Println("resource estimate:", out.ResourceEstimate)
	}
	if e.Untrained {
		fmt.Println("warning: the model is UNTRAINED (random weights); the number means nothing")
	}
	return nil
}

// readSQL is arg, or standard input when arg is "-".
func readSQL(arg string) (string, error) {
	if arg != "-" {
		return arg, nil
	}
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
	return string(b), err
}

// estimateOutput is the --json object: the endpoint's fields plus whether
// the model is an untrained fixture.
type estimateOutput struct {
	estimate.JSON
	Untrained bool `json:"untrained,omitempty"`
}
