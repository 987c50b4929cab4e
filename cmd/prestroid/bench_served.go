package main

// prestroid bench served: flag parsing and the wiring for bench.Served:
// the binary as shipped (`prestroid serve`, a subprocess with a generated
// configuration: one cluster per routing class, all the one real Trino,
// everything else the shipped defaults) and the statements of the split's
// held-out templates, filled as collect fills them.

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/trinodb/trino-go-client/trino"
	"go.yaml.in/yaml/v3"

	"github.com/prestroid/prestroid/bench"
	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/internal/dialect"
)

func init() {
	registerBench("served", "the estimates `prestroid serve` as shipped serves on the split's held-out templates: q-error, 80% interval coverage, wrong and too-small class per scale, kind and source, vs the calibrated optimizer and the plain model", benchServed)
}

// servedFlags are bench served's flags.
type servedFlags struct {
	binary, trino, engine, classes, explain, model string
	versusModel, versusBinary                      string
	ortLib                                         string
	workloads, split, parts, templates, domains    string
	warmParts                                      string
	warmStatements                                 int
	scales, catalog                                string
	variants, repeats                              int
	seed                                           int64
	sessionShare, textMaxSeconds                   float64
	maxDuration, estimateTimeout                   time.Duration
	runsOut, out, serveLog                         string
	progress                                       bool
}

func servedFlagSet(f *servedFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("bench served", flag.ContinueOnError)
	self, _ := os.Executable()
	fs.StringVar(&f.binary, "binary", self, "the prestroid binary whose serve is evaluated")
	fs.StringVar(&f.trino, "trino", "http://127.0.0.1:8095", "real coordinator URL, Trino or PrestoDB: every class's cluster, and asked directly for the optimizer baseline's plans")
	fs.StringVar(&f.engine, "engine", "", "engine of --trino: trino or presto (default: its /v1/info version says; PrestoDB runs on the tpch connector, --catalog '')")
	fs.StringVar(&f.classes, "classes", "2,20", "routing classes' CPU-second bounds, comma-separated, increasing (a last unbounded class is added)")
	fs.StringVar(&f.explain, "explain", "", "estimator.explain of the proxy: always, when-uncertain or never (default: the shipped default)")
	fs.Float64Var(&f.textMaxSeconds, "text-max-seconds", 0, "estimator.text_max_seconds of the proxy: the text stage decides a statement only when its interval ends below it (0: the shipped default; negative: no bound)")
	fs.StringVar(&f.model, "model", "", "model bundle directory (estimator.model; default: the embedded model)")
	fs.StringVar(&f.versusModel, "versus-model", "", "a second proxy, the same but for this model bundle (\"embedded\": the embedded model), through which every statement also runs, before or after the first as drawn per statement: both reports and the two on the same statements (its runs and log named as the first's with .versus after the stem: x.runs.jsonl, x.versus.runs.jsonl)")
	fs.StringVar(&f.versusBinary, "versus-binary", "", "a second proxy, the same but served by this prestroid binary (with --versus-model, that model too), run as --versus-model's: two builds of the cascade judged on the same statements")
	fs.StringVar(&f.ortLib, "ort-lib", "", "ONNX Runtime library (estimator.ort_lib; default: $PRESTROID_ORT_LIB, then the one `make ort` installs)")
	fs.StringVar(&f.workloads, "workloads", "../shared/workloads", "directory with tpch/*.sql and tpcds/*.sql: trinodb/trino's benchmark queries (docs/workloads.md)")
	fs.StringVar(&f.split, "split", "data/split.json", "template-level train/validation/test split")
	fs.StringVar(&f.parts, "parts", "test", "parts of the split whose templates run, comma-separated")
	fs.StringVar(&f.templates, "templates", "", "keep only these templates of the parts, comma-separated (e.g. tpch/q12,gen/window; empty: all)")
	fs.StringVar(&f.warmParts, "warm-parts", "", "parts of the split whose templates warm the deployment up before the passes (e.g. train): run once through the proxy, learned from, not scored (empty: none, a new deployment)")
	fs.IntVar(&f.warmStatements, "warm-statements", 60, "how many warm-up statements, drawn (seeded) from --warm-parts' templates at --scales, one variant each")
	fs.StringVar(&f.domains, "domains", "data/domains.json", "literal domains of the variant generator (missing ones are read from --trino, not saved)")
	fs.StringVar(&f.scales, "scales", "tiny,sf1", "schemas the templates are filled at, comma-separated, in order")
	fs.StringVar(&f.catalog, "catalog", "iceberg", "storage catalog of the materialized copies, as collect --storage (empty: the tpch/tpcds connectors)")
	fs.IntVar(&f.variants, "variants", 3, "variants per template and scale (variant 0: the file's own values)")
	fs.IntVar(&f.repeats, "repeats", 1, "passes after the first that run every statement again, shuffled")
	fs.Int64Var(&f.seed, "seed", 1, "seed of the variants (as collect's) and of the orders")
	fs.Float64Var(&f.sessionShare, "session-share", 0.5, "share of variants run with a varied session (as collect's)")
	fs.DurationVar(&f.maxDuration, "max-duration", 0, "stop after this long and report on what ran (0: none)")
	fs.DurationVar(&f.estimateTimeout, "estimate-timeout", 0, "routing.estimate_timeout of the proxy: one estimate's budget, EXPLAIN included (0: the shipped default)")
	fs.StringVar(&f.runsOut, "runs-out", "", "write one JSON line per execution to this file")
	fs.StringVar(&f.out, "out", "", "write the report's every figure as JSON to this file")
	fs.StringVar(&f.serveLog, "serve-log", "", "the proxy's stderr (default: beside --out, else --runs-out, else bench-served.serve.log)")
	fs.BoolVar(&f.progress, "progress", true, "a line per execution on stderr")
	return fs
}

func benchServed(args []string) int {
	var f servedFlags
	if err := servedFlagSet(&f).Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runBenchServed(ctx, &f); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench served:", err)
		return 1
	}
	return 0
}

func runBenchServed(ctx context.Context, f *servedFlags) error {
	bounds, err := parseClassBounds(f.classes)
	if err != nil {
		return err
	}
	if f.binary == "" {
		return errors.New("--binary: no prestroid binary")
	}
	ts, err := collector.LoadTemplates(f.workloads)
	if err != nil {
		return err
	}
	split, err := collector.LoadSplit(f.split)
	if err != nil {
		return err
	}
	dom, err := collector.LoadDomains(f.domains)
	if err != nil {
		return err
	}
	wl := bench.ServedWorkload{Split: split, Parts: splitList(f.parts), Templates: splitList(f.templates),
		Scales: splitList(f.scales), Storage: f.catalog, Variants: f.variants, Seed: f.seed, SessionShare: f.sessionShare}
	gen, _, _, err := wl.GenConfig(ts)
	if err != nil {
		return err
	}
	eng, err := collectEngine(ctx, &collectFlags{engine: f.engine, server: f.trino})
	if err != nil {
		return err
	}
	// As for collect: PrestoDB's statements are filled from the domain
	// cache that Trino's runs filled; it gets no database connection.
	var db *sql.DB
	if eng == dialect.Trino {
		conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(f.trino, "://", "://"+bench.ServedUser+"@", 1), Source: "prestroid-bench"})
		if err != nil {
			return err
		}
		db = sql.OpenDB(conn)
		defer db.Close()
	} else if f.catalog != "" {
		return fmt.Errorf("--catalog %s: PrestoDB runs on the tpch connector only (--catalog '')", f.catalog)
	}
	if err := fetchDomains(ctx, db, dom, ts, gen); err != nil {
		return err
	}
	if f.catalog != "" {
		if err := checkStorage(ctx, db, f.catalog, ts, gen); err != nil {
			return err
		}
	}
	items, skipped, err := wl.Items(ts, dom)
	if err != nil {
		return err
	}
	warm, err := warmItems(ctx, f, wl, db, ts, dom)
	if err != nil {
		return err
	}
	if len(skipped) > 0 {
		fmt.Printf("not run: %s (neither a template file in %s nor a generator kind)\n", strings.Join(skipped, ", "), f.workloads)
	}

	dir, err := os.MkdirTemp("", "prestroid-bench-served-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logPath := servedLogPath(f)
	proxy, cfg, err := startServedProxy(ctx, f, bounds, filepath.Join(dir, "prestroid.yaml"), logPath)
	if err != nil {
		return err
	}
	defer proxy.stop()
	fmt.Printf("prestroid serve (%s) on %s, its log in %s\n", f.binary, proxy.base, logPath)

	o := bench.ServedOptions{ProxyURL: proxy.base, Trino: f.trino, Engine: eng, Bounds: bounds, Items: items,
		Repeats: f.repeats, Seed: uint64(f.seed), MaxDuration: f.maxDuration, Warm: warm}
	var vcfg []byte
	vf := versusFlags(f)
	if vf != nil {
		vlog := versusPath(logPath)
		vproxy, c, err := startServedProxy(ctx, vf, bounds, filepath.Join(dir, "prestroid-versus.yaml"), vlog)
		if err != nil {
			return fmt.Errorf("the second proxy (--versus-model, --versus-binary): %w", err)
		}
		defer vproxy.stop()
		fmt.Printf("versus: prestroid serve (%s) on %s with the model %s, its log in %s\n", vf.binary, vproxy.base, cmp.Or(vf.model, "embedded"), vlog)
		o.VersusURL, vcfg = vproxy.base, c
	}
	if f.progress {
		o.Progress = os.Stderr
	}
	if f.runsOut != "" {
		rf, err := os.Create(f.runsOut)
		if err != nil {
			return err
		}
		defer rf.Close()
		o.Runs = rf
		if o.VersusURL != "" {
			vf, err := os.Create(versusPath(f.runsOut))
			if err != nil {
				return err
			}
			defer vf.Close()
			o.VersusRuns = vf
		}
	}
	rep, err := bench.Served(ctx, os.Stdout, o)
	if err != nil {
		return err
	}
	if f.out == "" {
		return nil
	}
	rep.Settings = map[string]any{"binary": f.binary, "trino": f.trino, "engine": eng.String(), "classes": bounds, "explain": f.explain,
		"model": f.model, "parts": wl.Parts, "templates": wl.Templates, "scales": wl.Scales, "catalog": f.catalog,
		"variants": f.variants, "repeats": f.repeats, "warm_parts": f.warmParts, "warm_statements": len(warm), "estimate_timeout": f.estimateTimeout.String(), "text_max_seconds": f.textMaxSeconds, "seed": f.seed, "session_share": f.sessionShare,
		"not_run": skipped, "config": string(cfg)}
	if vf != nil {
		rep.Settings["versus_model"], rep.Settings["versus_binary"], rep.Settings["versus_config"] = cmp.Or(vf.model, "embedded"), vf.binary, string(vcfg)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(f.out, append(b, '\n'), 0o644)
}

// warmItems are the warm-up statements of f (--warm-parts,
// --warm-statements): the templates of those parts that are not measured
// (wl's), filled at wl's scales with one variant each as collect fills
// them, and f.warmStatements of them drawn with f.seed; none without
// --warm-parts.
func warmItems(ctx context.Context, f *servedFlags, wl bench.ServedWorkload, db *sql.DB, ts []collector.Template, dom *collector.Domains) ([]collector.Item, error) {
	if f.warmParts == "" || f.warmStatements <= 0 {
		return nil, nil
	}
	measured, err := wl.Names()
	if err != nil {
		return nil, err
	}
	ww := wl
	ww.Parts, ww.Templates, ww.Variants = splitList(f.warmParts), nil, 1
	names, err := ww.Names()
	if err != nil {
		return nil, err
	}
	ww.Templates = slices.DeleteFunc(names, func(n string) bool { return slices.Contains(measured, n) })
	if len(ww.Templates) == 0 {
		return nil, fmt.Errorf("--warm-parts %s: no template that is not measured", f.warmParts)
	}
	gen, _, _, err := ww.GenConfig(ts)
	if err != nil {
		return nil, err
	}
	if db != nil {
		if err := fetchDomains(ctx, db, dom, ts, gen); err != nil {
			return nil, err
		}
		if f.catalog != "" {
			if err := checkStorage(ctx, db, f.catalog, ts, gen); err != nil {
				return nil, err
			}
		}
	}
	items, _, err := ww.Items(ts, dom)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(uint64(f.seed), 31))
	rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
	return items[:min(len(items), f.warmStatements)], nil
}

// servedConfig is the proxy's configuration: listening on port, one
// cluster per routing class (named bench.ClassName(i), all of them
// f.trino), and f's estimator settings where given; every other setting
// is the shipped default.
func servedConfig(f *servedFlags, bounds []float64, port int) ([]byte, error) {
	type class struct {
		Name          string  `yaml:"name"`
		MaxCPUSeconds float64 `yaml:"max_cpu_seconds,omitempty"`
	}
	type cluster struct {
		Name  string `yaml:"name"`
		URL   string `yaml:"url"`
		Class string `yaml:"class"`
	}
	var c struct {
		Listen   string    `yaml:"listen"`
		Clusters []cluster `yaml:"clusters"`
		Routing  struct {
			Classes         []class `yaml:"classes"`
			EstimateTimeout string  `yaml:"estimate_timeout,omitempty"`
		} `yaml:"routing"`
		Estimator struct {
			Explain string `yaml:"explain,omitempty"`
			Model   string `yaml:"model,omitempty"`
			ORTLib  string `yaml:"ort_lib,omitempty"`
			// TextMaxSeconds: 0 leaves the shipped default.
			TextMaxSeconds float64 `yaml:"text_max_seconds,omitempty"`
		} `yaml:"estimator,omitempty"`
	}
	c.Listen = "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; i <= len(bounds); i++ {
		cl := class{Name: bench.ClassName(i)}
		if i < len(bounds) {
			cl.MaxCPUSeconds = bounds[i]
		}
		c.Routing.Classes = append(c.Routing.Classes, cl)
		c.Clusters = append(c.Clusters, cluster{Name: cl.Name, URL: f.trino, Class: cl.Name})
	}
	c.Estimator.Explain, c.Estimator.Model, c.Estimator.ORTLib = f.explain, f.model, f.ortLib
	c.Estimator.TextMaxSeconds = f.textMaxSeconds
	if f.estimateTimeout > 0 {
		c.Routing.EstimateTimeout = f.estimateTimeout.String()
	}
	b, err := yaml.Marshal(&c)
	if err != nil {
		return nil, err
	}
	return append([]byte("# prestroid bench served: the shipped defaults but for these\n"), b...), nil
}

// versusFlags are the flags of the second proxy of a paired run: f's, but
// for --versus-model's bundle ("embedded": the embedded one) and
// --versus-binary's build where given; nil when neither is (one proxy).
func versusFlags(f *servedFlags) *servedFlags {
	if f.versusModel == "" && f.versusBinary == "" {
		return nil
	}
	vf := *f
	if f.versusModel != "" {
		vf.model = f.versusModel
		if vf.model == "embedded" {
			vf.model = ""
		}
	}
	if f.versusBinary != "" {
		vf.binary = f.versusBinary
	}
	return &vf
}

// startServedProxy writes f's proxy configuration (servedConfig, on a free
// port) to cfgPath and starts f.binary serve with it, its log in logPath;
// the proxy and its configuration.
func startServedProxy(ctx context.Context, f *servedFlags, bounds []float64, cfgPath, logPath string) (*serveProcess, []byte, error) {
	port, err := bench.FreeTCPPort()
	if err != nil {
		return nil, nil, err
	}
	cfg, err := servedConfig(f, bounds, port)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(cfgPath, cfg, 0o600); err != nil {
		return nil, nil, err
	}
	p, err := startServe(ctx, f.binary, cfgPath, logPath, port, f.ortLib != "")
	return p, cfg, err
}

// versusPath is path's name for the second proxy of a paired run:
// ".versus" after the stem (up to the first dot), so that it keeps every
// extension: x.runs.jsonl → x.versus.runs.jsonl.
func versusPath(path string) string {
	dir, base := filepath.Split(path)
	if i := strings.IndexByte(base, '.'); i > 0 {
		return dir + base[:i] + ".versus" + base[i:]
	}
	return path + ".versus"
}

// servedLogPath is where the proxy's stderr goes: --serve-log, else
// beside --out or --runs-out.
func servedLogPath(f *servedFlags) string {
	switch {
	case f.serveLog != "":
		return f.serveLog
	case f.out != "":
		return strings.TrimSuffix(f.out, filepath.Ext(f.out)) + ".serve.log"
	case f.runsOut != "":
		return strings.TrimSuffix(f.runsOut, filepath.Ext(f.runsOut)) + ".serve.log"
	}
	return "bench-served.serve.log"
}

// servedEnv is the proxy's environment: this one's without the
// PRESTROID_ variables that override a configuration (PRESTROID_UPSTREAM
// would replace the clusters), so that the generated configuration and
// the shipped defaults are what runs. PRESTROID_ORT_LIB and
// PRESTROID_CACHE only say where the ONNX Runtime library is; the first
// is dropped too when the configuration names the library (ortInConfig:
// --ort-lib), which it would override.
func servedEnv(env []string, ortInConfig bool) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := k == "PRESTROID_CACHE" || k == "PRESTROID_ORT_LIB" && !ortInConfig
		if strings.HasPrefix(k, "PRESTROID_") && !keep {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// serveProcess is a running `prestroid serve`.
type serveProcess struct {
	base string
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	log  *os.File
}

// startServe starts `binary serve --config cfgPath` (stderr and stdout to
// logPath) and waits until it answers /readyz with a model loaded.
func startServe(ctx context.Context, binary, cfgPath, logPath string, port int, ortInConfig bool) (*serveProcess, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, "serve", "--config", cfgPath)
	cmd.Env = servedEnv(os.Environ(), ortInConfig)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s serve: %w", binary, err)
	}
	p := &serveProcess{base: "http://127.0.0.1:" + strconv.Itoa(port), cmd: cmd, done: make(chan struct{}), log: lf}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(ctx, 2*time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("prestroid serve (log %s): %w", logPath, err)
	}
	return p, nil
}

// waitReady polls /readyz until it is ready; a proxy without an estimator
// (the model or ONNX Runtime did not load) is refused: it would estimate
// nothing.
func (p *serveProcess) waitReady(ctx context.Context, limit time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("exited: %v", p.cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		resp, err := c.Get(p.base + "/readyz")
		if err != nil {
			last = err.Error()
			continue
		}
		var r struct {
			Status string
			Checks []struct {
				Name, Detail string
				OK           bool
			}
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			last = fmt.Sprintf("/readyz %s %+v", resp.Status, r.Checks)
			continue
		}
		for _, ch := range r.Checks {
			if ch.Name == "estimator" && ch.Detail != "model loaded" {
				return fmt.Errorf("no estimator: %s", ch.Detail)
			}
		}
		return nil
	}
	return fmt.Errorf("not ready after %s: %s", limit, last)
}

// stop ends the proxy: SIGTERM, then SIGKILL if it has not exited within
// 15 s.
func (p *serveProcess) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
}
