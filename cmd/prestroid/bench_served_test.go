package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/internal/workloads"
)

func TestBenchServedFlagsDefaultToTheTestPartOnIcebergAtTinyAndSF1(t *testing.T) {
	var f servedFlags
	if err := servedFlagSet(&f).Parse(nil); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	for _, c := range []struct{ name, got, want string }{
		{"binary", f.binary, self}, {"trino", f.trino, "http://127.0.0.1:8095"}, {"classes", f.classes, "2,20"},
		{"parts", f.parts, "test"}, {"scales", f.scales, "tiny,sf1"}, {"catalog", f.catalog, "iceberg"},
		{"split", f.split, "data/split.json"}, {"explain", f.explain, ""},
	} {
		if c.got != c.want {
			t.Errorf("--%s defaults to %q, want %q", c.name, c.got, c.want)
		}
	}
	if f.variants != 3 || f.repeats != 1 {
		t.Errorf("--variants %d --repeats %d, want 3 and 1", f.variants, f.repeats)
	}
	if err := servedFlagSet(&f).Parse([]string{"--catalog", "", "--explain", "never", "--repeats", "2"}); err != nil {
		t.Fatal(err)
	}
	if f.catalog != "" || f.explain != "never" || f.repeats != 2 {
		t.Errorf("flags not applied: catalog %q explain %q repeats %d", f.catalog, f.explain, f.repeats)
	}
}

// loadServed writes the generated configuration and loads it as serve
// does.
func loadServed(t *testing.T, f *servedFlags, bounds []float64) *config.Config {
	t.Helper()
	b, err := servedConfig(f, bounds, 18123)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	// As servedEnv leaves them to the proxy (PRESTROID_ORT_LIB too when
	// --ort-lib is given, which these configurations test).
	for _, k := range []string{"PRESTROID_UPSTREAM", "PRESTROID_EXPLAIN", "PRESTROID_MODEL", "PRESTROID_LISTEN", "PRESTROID_ORT_LIB"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	cfg, err := config.Load(p)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return cfg
}

func TestBenchServedConfigIsOneClusterPerClassAndTheShippedDefaults(t *testing.T) {
	f := &servedFlags{trino: "http://127.0.0.1:8095"}
	cfg := loadServed(t, f, []float64{2, 20})
	if cfg.Listen != "127.0.0.1:18123" {
		t.Errorf("listen %q", cfg.Listen)
	}
	if len(cfg.Routing.Classes) != 3 || len(cfg.Clusters) != 3 {
		t.Fatalf("%d classes and %d clusters, want 3 and 3", len(cfg.Routing.Classes), len(cfg.Clusters))
	}
	for i, want := range []float64{2, 20, 0} {
		c, cl := cfg.Routing.Classes[i], cfg.Clusters[i]
		name := "class" + string(rune('0'+i))
		if c.Name != name || c.MaxCPUSeconds != want || cl.Name != name || cl.Class != name || cl.URL != f.trino {
			t.Errorf("class %d: %+v, cluster %+v; want %s bounded by %v, served by %s", i, c, cl, name, want, f.trino)
		}
	}
	def, _ := config.Load("")
	def.FillDefaults()
	if cfg.Estimator.Explain != def.Estimator.Explain || cfg.Estimator.CacheTTL != def.Estimator.CacheTTL ||
		cfg.Estimator.History != def.Estimator.History || cfg.Estimator.Model != "" {
		t.Errorf("estimator settings differ from the shipped defaults: %+v", cfg.Estimator)
	}

	f = &servedFlags{trino: "http://t:1", explain: "never", model: "/m", ortLib: "/lib/ort.so"}
	cfg = loadServed(t, f, []float64{5})
	if cfg.Estimator.Explain != "never" || cfg.Estimator.Model != "/m" || cfg.Estimator.ORTLib != "/lib/ort.so" || len(cfg.Routing.Classes) != 2 {
		t.Errorf("flags not in the configuration: explain %q model %q ort %q, %d classes", cfg.Estimator.Explain, cfg.Estimator.Model, cfg.Estimator.ORTLib, len(cfg.Routing.Classes))
	}
	if time.Duration(cfg.Routing.EstimateTimeout) != config.DefaultEstimateTimeout {
		t.Errorf("estimate timeout %v without --estimate-timeout, want the shipped %v", time.Duration(cfg.Routing.EstimateTimeout), config.DefaultEstimateTimeout)
	}
	if cfg.Estimator.TextMaxSeconds != def.Estimator.TextMaxSeconds {
		t.Errorf("text_max_seconds %v without --text-max-seconds, want the shipped %v", cfg.Estimator.TextMaxSeconds, def.Estimator.TextMaxSeconds)
	}
	f = &servedFlags{trino: "http://t:1", estimateTimeout: 10 * time.Second, textMaxSeconds: 0.5}
	if cfg = loadServed(t, f, []float64{5}); time.Duration(cfg.Routing.EstimateTimeout) != 10*time.Second {
		t.Errorf("--estimate-timeout 10s: the proxy's budget is %v", time.Duration(cfg.Routing.EstimateTimeout))
	}
	if cfg.Estimator.TextMaxSeconds != 0.5 {
		t.Errorf("--text-max-seconds 0.5: the proxy's is %v", cfg.Estimator.TextMaxSeconds)
	}
}

func TestBenchServedKeepsConfigOverridesOutOfTheProxysEnvironment(t *testing.T) {
	env := []string{"PATH=/bin", "PRESTROID_UPSTREAM=http://x", "PRESTROID_ORT_LIB=/o", "PRESTROID_EXPLAIN=always", "PRESTROID_CACHE=/c", "HOME=/h"}
	if got, want := servedEnv(env, false), []string{"PATH=/bin", "PRESTROID_ORT_LIB=/o", "PRESTROID_CACHE=/c", "HOME=/h"}; !slices.Equal(got, want) {
		t.Errorf("env %v, want %v", got, want)
	}
	// --ort-lib in the configuration: the environment must not override it.
	if got, want := servedEnv(env, true), []string{"PATH=/bin", "PRESTROID_CACHE=/c", "HOME=/h"}; !slices.Equal(got, want) {
		t.Errorf("env with --ort-lib %v, want %v", got, want)
	}
	for _, c := range []struct {
		f    servedFlags
		want string
	}{
		{servedFlags{out: "/tmp/r/served.json"}, "/tmp/r/served.serve.log"},
		{servedFlags{runsOut: "runs.jsonl"}, "runs.serve.log"},
		{servedFlags{out: "o.json", serveLog: "x.log"}, "x.log"},
		{servedFlags{}, "bench-served.serve.log"},
	} {
		if got := servedLogPath(&c.f); got != c.want {
			t.Errorf("log of %+v: %q, want %q", c.f, got, c.want)
		}
	}
}

func TestBenchServedSecondProxyDiffersOnlyInTheVersusFlags(t *testing.T) {
	base := servedFlags{binary: "/b/prestroid", model: "/m/v3", trino: "http://t", explain: "always"}
	if versusFlags(&base) != nil {
		t.Error("neither --versus-model nor --versus-binary: want one proxy")
	}
	for _, c := range []struct {
		model, binary      string
		wantModel, wantBin string
	}{
		{"/m/v5", "", "/m/v5", "/b/prestroid"},
		{"embedded", "", "", "/b/prestroid"},
		{"", "/b/other", "/m/v3", "/b/other"},
		{"embedded", "/b/other", "", "/b/other"},
	} {
		f := base
		f.versusModel, f.versusBinary = c.model, c.binary
		vf := versusFlags(&f)
		if vf == nil || vf.model != c.wantModel || vf.binary != c.wantBin {
			t.Fatalf("--versus-model %q --versus-binary %q: %+v, want model %q binary %q", c.model, c.binary, vf, c.wantModel, c.wantBin)
		}
		if vf.trino != base.trino || vf.explain != base.explain {
			t.Errorf("the second proxy's other flags %+v, want the first's", vf)
		}
		if f.model != base.model || f.binary != base.binary {
			t.Errorf("the first proxy's flags changed: %+v", f)
		}
	}
}

// TestBenchServedAgainstTrino runs the command end to end on one
// template at tiny on the tpch connector: the harness Trino (make test),
// this package built as the binary under test.
func TestBenchServedAgainstTrino(t *testing.T) {
	trinoURL := os.Getenv("PRESTROID_TRINO_URL")
	if trinoURL == "" {
		t.Skip("PRESTROID_TRINO_URL not set: run `make test`, which starts a real Trino")
	}
	wl, err := workloads.FromEnv("../../../shared/workloads")
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "prestroid")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// the second proxy runs a copy of the build (--versus-binary): its
	// settings must name the copy
	bin2 := filepath.Join(dir, "prestroid-versus")
	if b, err := os.ReadFile(bin); err != nil || os.WriteFile(bin2, b, 0o755) != nil {
		t.Fatalf("copying the build: %v", err)
	}
	var f servedFlags
	if err := servedFlagSet(&f).Parse([]string{"--binary", bin, "--trino", trinoURL, "--workloads", wl,
		"--split", "../../data/split.json", "--domains", "../../data/domains.json", "--templates", "tpch/q12",
		"--scales", "tiny", "--catalog", "", "--variants", "1", "--repeats", "1", "--progress=false",
		"--ort-lib", os.Getenv("PRESTROID_ORT_LIB"), "--out", filepath.Join(dir, "served.json"),
		"--runs-out", filepath.Join(dir, "served.runs.jsonl"), "--versus-model", "embedded", "--versus-binary", bin2,
		// a first EXPLAIN on a just-started, busy Trino can outlast the shipped
		// budget, and the proxy then serves no estimate: not what this tests
		"--estimate-timeout", "1m"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := runBenchServed(ctx, &f); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(f.out)
	if err != nil {
		t.Fatal(err)
	}
	type report struct {
		Executions int
		Overall    struct {
			Rows []struct {
				Group string
				N     int
			}
		}
	}
	var rep struct {
		report
		Versus *report
		Paired []struct {
			Group    string
			N        int
			AQ50     float64 `json:"a_q50"`
			AMeanQ50 float64 `json:"a_mean_q50"`
		}
		Settings map[string]any
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	// the run with --versus-model: two proxies, every statement through both
	if rep.Versus == nil {
		t.Fatal("no second proxy's report")
	}
	for name, r := range map[string]report{"a": rep.report, "b": *rep.Versus} {
		n := map[string]int{}
		for _, row := range r.Overall.Rows {
			n[row.Group] = row.N
		}
		if r.Executions != 2 || n["all, new shape"] != 1 || n["all, repeat"] != 1 {
			t.Errorf("%s: executions %d, rows %v; want tpch/q12 once new, once repeated", name, r.Executions, n)
		}
	}
	paired := map[string]int{}
	for _, r := range rep.Paired {
		paired[r.Group] = r.N
		if r.N > 0 && !(r.AQ50 >= 1 && r.AMeanQ50 >= 1) {
			t.Errorf("paired %s: q-errors %v, %v; want >= 1", r.Group, r.AQ50, r.AMeanQ50)
		}
	}
	if paired["first sight"] != 1 || paired["repeat"] != 1 {
		t.Errorf("paired rows %v, want the first sight and the repeat of both", paired)
	}
	if !strings.Contains(rep.Settings["versus_config"].(string), "name: class0") || rep.Settings["versus_model"] != "embedded" ||
		rep.Settings["versus_binary"] != bin2 {
		t.Errorf("settings %v: want the second proxy's configuration, model and binary", rep.Settings)
	}
	// each proxy's executions in its own file; of a statement's two, one ran first
	first := map[string]int{}
	for _, path := range []string{f.runsOut, filepath.Join(dir, "served.versus.runs.jsonl")} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 2 {
			t.Fatalf("%s: %d executions, want 2", path, len(lines))
		}
		for _, l := range lines {
			var r struct {
				Pass          int
				First         *bool
				ActualMem     float64 `json:"actual_mem"`
				ActualElapsed float64 `json:"actual_elapsed"`
				MemLo         float64 `json:"mem_lo"`
				MemHi         float64 `json:"mem_hi"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil || r.First == nil {
				t.Fatalf("%s: %q: %v, want a first field", path, l, err)
			}
			// Trino's peak memory and elapsed time beside the CPU time; the
			// bundled model predicts memory, served with its interval
			if !(r.ActualMem > 0 && r.ActualElapsed > 0) || !(r.MemLo > 0 && r.MemLo <= r.MemHi) {
				t.Errorf("%s: %q: want Trino's peak memory and elapsed time and the served memory's interval", path, l)
			}
			if *r.First {
				first[fmt.Sprint(r.Pass)]++
			}
		}
	}
	if first["0"] != 1 || first["1"] != 1 {
		t.Errorf("first executions per pass %v, want one of the two each", first)
	}
	if _, err := os.Stat(filepath.Join(dir, "served.versus.serve.log")); err != nil {
		t.Errorf("the second proxy's log: %v", err)
	}
}
