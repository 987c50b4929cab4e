package onnx

import (
	"context"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/estimator/tablestats"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/training"
)

// The targets beyond CPU (bundle/targets.go) with the real runtime and the
// shipped default bundle, which predicts peak memory and elapsed time.

func examplePlan(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "explain", "tpcds-q01-sf1.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDefaultBundlePredictsEveryTarget(t *testing.T) {
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	defer m.Close()
	if got, want := m.Targets(), []estimate.Target{estimate.TargetCPU, estimate.TargetMemory, estimate.TargetElapsed}; !slices.Equal(got, want) {
		t.Fatalf("Targets() = %v, want %v", got, want)
	}
	f, err := m.Featurize(examplePlan(t))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := m.PredictAll([]*featurize.Features{f})
	if err != nil {
		t.Fatal(err)
	}
	ys, err := m.Predict([]*featurize.Features{f})
	if err != nil {
		t.Fatal(err)
	}
	if ys[0] != ps[0].Y[estimate.TargetCPU] {
		t.Errorf("Predict %v, PredictAll's CPU %v: want the same output", ys[0], ps[0].Y[estimate.TargetCPU])
	}
	mf := m.Manifest()
	for _, tg := range []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		q := m.Quantity(tg, ps[0])
		spec := mf.Targets[tg.String()]
		// A TPC-DS query on sf1: between a kilobyte and 100 GB of memory,
		// between a millisecond and an hour of elapsed time.
		lo, hi := 1e3, 1e11
		if tg == estimate.TargetElapsed {
			lo, hi = 1e-3, 3600
		}
		if !q.Known() || q.Median < lo || q.Median > hi || q.Sigma != spec.Sigma {
			t.Errorf("%s: %+v, want a median in [%g, %g] %s with the manifest's sigma %v", tg, q, lo, hi, tg.Unit(), spec.Sigma)
		}
		t.Logf("%s: median %.4g %s, sigma %.2f", tg, q.Median, tg.Unit(), q.Sigma)
	}

	// Through the service: the raw model's numbers land in the estimate.
	svc := estimator.NewService(m, estimator.ServiceOptions{Workers: 1})
	defer svc.Close()
	e, err := svc.EstimatePlan(context.Background(), examplePlan(t))
	if err != nil {
		t.Fatal(err)
	}
	if !e.PeakMemory.Known() || !e.Elapsed.Known() {
		t.Fatalf("estimate %+v: want PeakMemory and Elapsed", e)
	}
	if want := m.Quantity(estimate.TargetMemory, ps[0]); math.Abs(e.PeakMemory.Median/want.Median-1) > 1e-6 {
		t.Errorf("PeakMemory %+v, the model's %+v", e.PeakMemory, want)
	}
	if h := e.ResourceEstimate(); !strings.Contains(h, "PEAK_MEMORY=") || !strings.Contains(h, "EXECUTION_TIME=") {
		t.Errorf("resource estimate %q: want all three", h)
	}
}

func TestSingleTargetBundleStillLoads(t *testing.T) {
	rt := runtime(t)
	full := loadFixture(t, rt, copyDefault(t))
	defer full.Close()
	// The default bundle without its targets section: an old bundle (its
	// graph's extra outputs are never fetched).
	dir := copyDefault(t)
	editManifest(t, dir, func(m map[string]any) { delete(m, "targets") })
	old := loadFixture(t, rt, dir)
	defer old.Close()
	if got := old.Targets(); !slices.Equal(got, []estimate.Target{estimate.TargetCPU}) {
		t.Fatalf("Targets() = %v, want the CPU only", got)
	}
	f, err := old.Featurize(examplePlan(t))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := old.PredictAll([]*featurize.Features{f})
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Known[estimate.TargetMemory] || ps[0].Known[estimate.TargetElapsed] {
		t.Errorf("prediction %+v: want the CPU only", ps[0])
	}
	if q := old.Quantity(estimate.TargetMemory, ps[0]); q != (estimate.Quantity{}) {
		t.Errorf("Quantity(memory) = %+v, want zero", q)
	}
	fp, err := full.PredictAll([]*featurize.Features{f})
	if err != nil {
		t.Fatal(err)
	}
	if ps[0].Y[estimate.TargetCPU] != fp[0].Y[estimate.TargetCPU] {
		t.Errorf("CPU %v without targets, %v with: want the same", ps[0].Y[0], fp[0].Y[0])
	}
	svc := estimator.NewService(old, estimator.ServiceOptions{Workers: 1})
	defer svc.Close()
	e, err := svc.EstimatePlan(context.Background(), examplePlan(t))
	if err != nil {
		t.Fatal(err)
	}
	if !(e.CPUSeconds > 0) || e.PeakMemory != (estimate.Quantity{}) || e.Elapsed != (estimate.Quantity{}) {
		t.Errorf("estimate CPU %v memory %+v elapsed %+v: want the CPU only", e.CPUSeconds, e.PeakMemory, e.Elapsed)
	}
	// The untrained fixture has no targets either.
	fx := loadFixture(t, rt, copyFixture(t))
	defer fx.Close()
	if got := fx.Targets(); len(got) != 1 {
		t.Errorf("fixture Targets() = %v", got)
	}
}

func TestRefusedTargets(t *testing.T) {
	rt := runtime(t)
	target := func(m map[string]any, label string) map[string]any {
		return m["targets"].(map[string]any)[label].(map[string]any)
	}
	for _, c := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"a target that is not one", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["targets"].(map[string]any)["gpu"] = target(m, "elapsed") })
		}, []string{"manifest.json", `targets: "gpu" is not a target beyond CPU`}},
		{"the CPU as a target", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["targets"].(map[string]any)["cpu"] = target(m, "elapsed") })
		}, []string{"manifest.json", `"cpu" is not a target beyond CPU`}},
		{"a transform of another unit", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { target(m, "peak_memory")["transform"] = "ln_seconds_minmax_open" })
		}, []string{"manifest.json", `targets.peak_memory.transform "ln_seconds_minmax_open"`, "ln bytes"}},
		{"an output shared with the CPU", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { target(m, "elapsed")["output"] = "y" })
		}, []string{"manifest.json", `targets.elapsed.output "y" is also the output of cpu`}},
		{"an output the model lacks", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { target(m, "elapsed")["output"] = "y_wall" })
		}, []string{"model.onnx", `y_wall`}},
		{"no sigma", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { delete(target(m, "peak_memory"), "sigma") })
		}, []string{"manifest.json", "targets.peak_memory.sigma 0"}},
		{"min above max", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { target(m, "elapsed")["min"] = 100.0 })
		}, []string{"manifest.json", "targets.elapsed: min=100"}},
		{"no golden array", func(t *testing.T, dir string) {
			editGolden(t, dir, func(arrs map[string]*npy.Array) { delete(arrs, "expected_peak_memory") })
		}, []string{"golden.npz", "targets.peak_memory", `"expected_peak_memory" missing`}},
		{"a golden output the model disagrees with", func(t *testing.T, dir string) {
			editGolden(t, dir, func(arrs map[string]*npy.Array) { arrs["expected_elapsed"].Data.([]float32)[3] += 0.01 })
		}, []string{"golden.npz", "elapsed", "golden case 3"}},
		{"a text target the text model lacks", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["text"].(map[string]any)["targets"].(map[string]any)["elapsed"].(map[string]any)["output"] = "q_wall"
			})
		}, []string{"text.onnx", "q_wall"}},
		{"a text golden case without a target's values", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				delete(m["text"].(map[string]any)["golden"].([]any)[1].(map[string]any)["expected_targets"].(map[string]any), "peak_memory")
			})
		}, []string{"manifest.json", "0 expected peak_memory values"}},
		{"a text golden target the model disagrees with", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				v := m["text"].(map[string]any)["golden"].([]any)[2].(map[string]any)["expected_targets"].(map[string]any)["peak_memory"].([]any)
				v[1] = v[1].(float64) + 0.01
			})
		}, []string{"text.onnx", "peak_memory quantile 0.5", "golden case 2"}},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			dir := copyDefault(t)
			c.break_(t, dir)
			m, err := bundle.LoadDir(rt, bundle.ModelOptions{})(dir)
			if err == nil {
				m.Close()
				t.Fatal("the bundle was accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestTextStagePredictsEveryTarget(t *testing.T) {
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	defer m.Close()
	ctx := featurize.TextContext{Catalog: "tpch", Schema: "tiny"}
	const sql = "SELECT count(*) FROM lineitem WHERE quantity < 24"
	p, ok, err := m.TextPredict(sql, ctx)
	if err != nil || !ok {
		t.Fatalf("TextPredict: ok=%v err=%v", ok, err)
	}
	_, secs, _, _ := m.TextQuantiles(sql, ctx)
	if !slices.Equal(secs, p.Values[estimate.TargetCPU]) {
		t.Errorf("TextQuantiles %v, TextPredict's CPU %v", secs, p.Values[estimate.TargetCPU])
	}
	for _, tg := range []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		v := p.Values[tg]
		if len(v) != 3 || !(v[0] > 0 && v[0] <= v[1] && v[1] <= v[2]) {
			t.Errorf("%s: %v, want 0 < q10 ≤ q50 ≤ q90", tg, v)
		}
	}

	// Through the cascade's text stage (as BenchmarkTextDecision): the
	// text model's numbers of every target land in the estimate.
	q, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "workloads", "tpcds", "q03.sql"))
	if err != nil {
		t.Skip(err)
	}
	co := estimator.CascadeOptions{Explain: estimator.ExplainWhenUncertain, ClassBounds: []float64{100, 0}, ClassQuantile: 0.9,
		ModelSigma: 1, MaxSpread: 0.5, Shrink: 1, MinCount: 2}
	h := http.Header{"X-Trino-User": {"test"}, "X-Trino-Catalog": {"tpcds"}, "X-Trino-Schema": {"tiny"}}
	ts := tablestats.New(tablestats.Options{})
	if f, err := training.ReadTableStats(filepath.Join("..", "..", "data", "table-stats.json")); err == nil {
		names, _ := plan.Tables(string(q), "tpcds", "tiny")
		for _, n := range names {
			ts.Seed(n, h, f.Tables[n.String()])
		}
	}
	svc := estimator.NewService(m, estimator.ServiceOptions{Explain: &plan.ExplainClient{}, ExplainTimeout: time.Millisecond,
		History: history.NewMemory(100), Cascade: co, TableStats: ts})
	defer svc.Close()
	e, err := svc.EstimateOn(context.Background(), []string{"http://127.0.0.1:1"}, string(q), h)
	if err != nil || e.Source != estimate.SourceText {
		t.Fatalf("%v %+v: want the text stage's estimate", err, e)
	}
	if !e.PeakMemory.Known() || !(e.PeakMemory.Sigma > 0) || !e.Elapsed.Known() || !(e.Elapsed.Sigma > 0) {
		t.Errorf("text estimate memory %+v elapsed %+v: want both with a spread", e.PeakMemory, e.Elapsed)
	}
	t.Logf("text stage: CPU %.3g s, memory %.3g B (σ %.2f), elapsed %.3g s (σ %.2f)", e.CPUSeconds,
		e.PeakMemory.Median, e.PeakMemory.Sigma, e.Elapsed.Median, e.Elapsed.Sigma)
}

// TestLiveModelStageTargets: a statement EXPLAINed on the live Trino and
// scored by the default bundle through the cascade's model stage carries
// all three targets, and the resource-estimate header names them.
func TestLiveModelStageTargets(t *testing.T) {
	server := trinotest.URL(t)
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	svc := estimator.NewService(m, estimator.ServiceOptions{Workers: 1, History: history.NewMemory(100),
		Cascade: estimator.CascadeOptions{MinCount: 2, MaxSpread: 0.5, Shrink: 1, ModelSigma: 1}})
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const sql = "SELECT l.returnflag, sum(l.extendedprice) FROM tpch.%s.lineitem l JOIN tpch.%s.orders o ON l.orderkey = o.orderkey GROUP BY 1"
	mem := map[string]float64{}
	for _, scale := range []string{"tiny", "sf1"} {
		e, err := svc.EstimateFor(ctx, dialect.Trino, []string{server}, sprintf2(sql, scale), trinotest.UserHeader("prestroid-targets"))
		if err != nil {
			t.Fatalf("%s: %v", scale, err)
		}
		if e.Source != estimate.SourceModel || !e.PeakMemory.Known() || !e.Elapsed.Known() {
			t.Fatalf("%s: source %s, memory %+v, elapsed %+v: want the model's three targets", scale, e.Source, e.PeakMemory, e.Elapsed)
		}
		h := e.ResourceEstimate()
		if !strings.Contains(h, "PEAK_MEMORY=") || !strings.Contains(h, "EXECUTION_TIME=") || !strings.Contains(h, "CPU_TIME=") {
			t.Errorf("%s: resource estimate %q", scale, h)
		}
		t.Logf("%s: CPU %.3g s, memory %.3g B (σ %.2f), elapsed %.3g s (σ %.2f): %s", scale, e.CPUSeconds,
			e.PeakMemory.Median, e.PeakMemory.Sigma, e.Elapsed.Median, e.Elapsed.Sigma, h)
		mem[scale] = e.PeakMemory.Median
	}
	// A hash join over sf1's 1.5 M orders holds far more than tiny's 15,000.
	if !(mem["sf1"] > 2*mem["tiny"]) {
		t.Errorf("peak memory sf1 %.3g B, tiny %.3g B: want sf1 well above tiny", mem["sf1"], mem["tiny"])
	}
}

// TestLiveModelStageBlendsTheTextTargets: under explain: when-uncertain, a
// statement the text stage defers to the plan (its interval ends above
// text_max_seconds) is EXPLAINed on the live Trino and served, for each
// target with a text blend in the default bundle's manifest, the weighted
// geometric mean of the model's number (what explain: always serves, no
// text stage) and the text stage's, with the smaller spread.
func TestLiveModelStageBlendsTheTextTargets(t *testing.T) {
	server := trinotest.URL(t)
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	defer m.Close()
	const sql = "SELECT l.returnflag, sum(l.extendedprice) FROM tpch.tiny.lineitem l JOIN tpch.tiny.orders o ON l.orderkey = o.orderkey GROUP BY 1"
	h := trinotest.UserHeader("prestroid-blend")
	stats, err := training.ReadTableStats(filepath.Join("..", "..", "data", "table-stats.json"))
	if err != nil {
		t.Fatal(err)
	}
	ts := tablestats.New(tablestats.Options{})
	names, _ := plan.Tables(sql, "", "")
	var tables []featurize.TableStats
	for _, n := range names {
		ts.Seed(n, h, stats.Tables[n.String()])
		tables = append(tables, stats.Tables[n.String()])
	}
	serve := func(co estimator.CascadeOptions) *estimate.Estimate {
		t.Helper()
		co.ModelSigma, co.MaxSpread, co.Shrink, co.MinCount = 1, 0.5, 1, 2
		// a model of its own: the service closes it
		svc := estimator.NewService(loadFixture(t, rt, copyDefault(t)), estimator.ServiceOptions{Workers: 1, History: history.NewMemory(100), Cascade: co, TableStats: ts})
		defer svc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		e, err := svc.EstimateFor(ctx, dialect.Trino, []string{server}, sql, h)
		if err != nil || e.Source != estimate.SourceModel {
			t.Fatalf("%v %+v: want the model stage's estimate", err, e)
		}
		return e
	}
	alone := serve(estimator.CascadeOptions{Explain: estimator.ExplainAlways})
	served := serve(estimator.CascadeOptions{Explain: estimator.ExplainWhenUncertain, TextMaxSeconds: 1e-9})
	text, ok, err := m.TextPredict(sql, featurize.TextContext{Tables: tables}) // as the text stage reads it
	if err != nil || !ok {
		t.Fatalf("TextPredict: ok=%v err=%v", ok, err)
	}
	if served.CPUSeconds != alone.CPUSeconds {
		t.Errorf("CPU %v s, alone %v s: the blend is for the targets beyond CPU", served.CPUSeconds, alone.CPUSeconds)
	}
	for _, tg := range []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		tb := m.Manifest().TextBlend(tg)
		if tb == nil {
			t.Fatalf("%s: the default bundle has no text blend", tg)
		}
		mq, got := alone.Of(tg), served.Of(tg)
		want := math.Exp((1-tb.Weight)*math.Log(mq.Median) + tb.Weight*math.Log(text.Values[tg][1]))
		if math.Abs(got.Median/want-1) > 1e-6 || got.Sigma != min(mq.Sigma, tb.Sigma) {
			t.Errorf("%s: served %+v, want %.4g (model %.4g, text %.4g, weight %v) with σ %v", tg, got, want,
				mq.Median, text.Values[tg][1], tb.Weight, min(mq.Sigma, tb.Sigma))
		}
		t.Logf("%s: model %.4g, text %.4g, served %.4g (σ %.2f)", tg, mq.Median, text.Values[tg][1], got.Median, got.Sigma)
	}
}
