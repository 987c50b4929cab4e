package estimator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/testing/redistest"
)

// The cascade per target: a fake model (scoreHook) that predicts the peak
// memory and the elapsed time beside the CPU time, as the plan model's
// bundle does, and completions that report all three.

const gib = float64(1 << 30)

// targetModel is a model stand-in that predicts cpu seconds, mem bytes
// and elapsed seconds, each with the prior σ 1.
func targetModel(cpu, mem, elapsed float64) func([]byte) (*estimate.Estimate, error) {
	return func([]byte) (*estimate.Estimate, error) {
		e := &estimate.Estimate{Estimated: true, CPUSeconds: cpu, Model: "stand-in"}
		if mem > 0 {
			e.PeakMemory = estimate.Quantity{Median: mem, Sigma: 1}
		}
		if elapsed > 0 {
			e.Elapsed = estimate.Quantity{Median: elapsed, Sigma: 1}
		}
		return e, nil
	}
}

// observeActual teaches s runs of sql (alice's session) with no stage's
// number behind them.
func observeActual(s *Service, sql string, as ...estimate.Actual) {
	exact, shape := HistoryKeys(sql, alice)
	for _, a := range as {
		s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}, a)
	}
	s.Flush()
}

func near(got, want, tol float64) bool { return math.Abs(got/want-1) <= tol }

// A statement's history keeps each target: the history stage serves the
// peak memory and the elapsed time its runs reported, with the intervals
// of the CPU time's rule (the noise learned from the target's own
// repeats); a run without a figure (0 bytes) teaches that target nothing.
func TestHistoryServesEveryTargetItLearned(t *testing.T) {
	const q = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	for _, tc := range []struct {
		name          string
		runs          []estimate.Actual
		mem, elapsed  float64 // served medians; 0: not predicted
		memSigmaFloor bool
	}{
		{"all three learned", []estimate.Actual{{CPUSeconds: 8, PeakMemoryBytes: 2 * gib, ElapsedSeconds: 3}, {CPUSeconds: 8, PeakMemoryBytes: 2 * gib, ElapsedSeconds: 3}}, 2 * gib, 3, true},
		{"no memory figure: no memory served", []estimate.Actual{{CPUSeconds: 8, ElapsedSeconds: 3}, {CPUSeconds: 8, PeakMemoryBytes: -1, ElapsedSeconds: 3}}, 0, 3, false},
		{"the CPU time alone, as before targets", []estimate.Actual{{CPUSeconds: 8}, {CPUSeconds: 8}}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCascade(t, defaults, nil)
			observeActual(s, q, tc.runs...)
			e, err := historyStage{}.run(s, newRequest(nil, q))
			if err != nil || e == nil || e.Source != estimate.SourceHistory || math.Abs(e.CPUSeconds-8) > 1e-9 {
				t.Fatalf("got %+v %v; want the history's 8 s", e, err)
			}
			for _, c := range []struct {
				t    estimate.Target
				want float64
			}{{estimate.TargetMemory, tc.mem}, {estimate.TargetElapsed, tc.elapsed}} {
				q := e.Of(c.t)
				if c.want == 0 {
					if q.Known() {
						t.Fatalf("%s: %+v; want none", c.t, q)
					}
					continue
				}
				// Two equal runs: as for the CPU time (TestHistoryStage),
				// the prior noise 0.25 shrunk by one exact repeat to
				// 0.25/2, times √1.5 for the mean of two.
				if want := 0.25 / 2 * math.Sqrt(1.5); !near(q.Median, c.want, 1e-9) || math.Abs(q.Sigma-want) > 1e-9 {
					t.Fatalf("%s: %+v; want %g, σ %.4f", c.t, q, c.want, want)
				}
			}
		})
	}
}

// Each target learns its own run-to-run noise from the repeats: CPU
// times that scatter by σ 0.3, peak memory by 0.05 and elapsed times by
// 0.8 teach three noises near those, from the one prior.
func TestRepeatsTeachANoisePerTarget(t *testing.T) {
	s := newCascade(t, defaults, nil)
	rng := rand.New(rand.NewPCG(3, 5))
	sigmas := [numTargets]float64{estimate.TargetCPU: 0.3, estimate.TargetMemory: 0.05, estimate.TargetElapsed: 0.8}
	for i := range 300 {
		sql := fmt.Sprintf("SELECT * FROM t WHERE k = %d", i)
		mu := [numTargets]float64{rng.Float64() * 4, 20 + 3*rng.Float64(), rng.Float64() * 4}
		for range 4 {
			var a [numTargets]float64
			for _, tg := range estimate.Targets {
				a[tg] = math.Exp(mu[tg] + sigmas[tg]*rng.NormFloat64())
			}
			observeActual(s, sql, estimate.Actual{CPUSeconds: a[0], PeakMemoryBytes: a[1], ElapsedSeconds: a[2]})
		}
	}
	for _, tg := range estimate.Targets {
		g, _ := s.learn.get(targetKey(keyRepeat, tg))
		got := s.repeatSigma(tg)
		t.Logf("%s: noise %.3f from %d repeats (true %.2f)", tg, got, g.Count, sigmas[tg])
		// The prior (0.25, one repeat's weight) still pulls the smallest
		// a little.
		if g.Count != 900 || math.Abs(got-sigmas[tg]) > 0.2*sigmas[tg]+0.01 {
			t.Errorf("%s: learned %.3f from %d repeats; want %.2f from 900", tg, got, g.Count, sigmas[tg])
		}
	}
}

// The model's per-target numbers are calibrated as its CPU time is: a
// deployment whose queries take 4× the model's peak memory teaches a
// global memory offset that new shapes get, and each shape its residual
// (model+residual); the elapsed time, on which the model is right, keeps
// its number; the raw numbers travel in the basis.
func TestModelResidualsPerTarget(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	s := newCascade(t, defaults, targetModel(2, 1*gib, 10))
	rng := rand.New(rand.NewPCG(1, 2))
	var last *estimate.Estimate
	for i := range 12 {
		e := estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d WHERE k = 1", i))
		b := basisOf(e)
		if b.ModelBy[estimate.TargetMemory] != gib || b.ModelBy[estimate.TargetElapsed] != 10 {
			t.Fatalf("basis carries %v; want the model's raw memory and elapsed", b.ModelBy)
		}
		s.Observe(b, estimate.Actual{CPUSeconds: 2, PeakMemoryBytes: 4 * gib * math.Exp(0.1*rng.NormFloat64()), ElapsedSeconds: 10 * math.Exp(0.1*rng.NormFloat64())})
		s.Flush()
		last = e
	}
	e := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM a_new_shape WHERE k = 1")
	t.Logf("after 12 shapes: memory %.2f GiB σ %.2f (from %.2f GiB σ %.2f at the 12th), elapsed %.2f s σ %.2f",
		e.PeakMemory.Median/gib, e.PeakMemory.Sigma, last.PeakMemory.Median/gib, last.PeakMemory.Sigma, e.Elapsed.Median, e.Elapsed.Sigma)
	if e.Source != estimate.SourceModel || !near(e.PeakMemory.Median, 4*gib*12/13, 0.1) || e.PeakMemory.Sigma > 0.5 {
		t.Fatalf("a new shape: %s, memory %+v; want the model, ~4 GiB·12/13 (the learned offset), a learned σ", e.Source, e.PeakMemory)
	}
	if e.Elapsed.Median != 10 || e.Elapsed.Sigma > 0.5 {
		t.Fatalf("elapsed %+v; want the model's 10 s (its residuals are noise around 0), a learned σ", e.Elapsed)
	}
	// The same shape with other literals: its own residual.
	b := basisOf(estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM lone WHERE k = 1"))
	s.Observe(b, estimate.Actual{CPUSeconds: 2, PeakMemoryBytes: 16 * gib})
	s.Flush()
	e = estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM lone WHERE k = 2")
	if e.Source != estimate.SourceModelResidual || !(e.PeakMemory.Median > 8*gib) {
		t.Fatalf("the shape's residual: %s, memory %.2f GiB; want model+residual, toward 16 GiB", e.Source, e.PeakMemory.Median/gib)
	}
}

// The text stage's per-target numbers learn their own residuals
// (keyText/keyTextRes per target): correctText moves the text model's peak
// memory by what completions taught.
func TestTextResidualsPerTarget(t *testing.T) {
	s := newCascade(t, defaults, nil)
	for i := range 10 {
		exact, shape := HistoryKeys(fmt.Sprintf("SELECT * FROM t%d", i), alice)
		b := &Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.Log(1)}
		b.TextBy[estimate.TargetMemory] = gib
		s.Observe(b, estimate.Actual{CPUSeconds: 1, PeakMemoryBytes: 3 * gib})
	}
	s.Flush()
	exact, shape := HistoryKeys("SELECT * FROM fresh", alice)
	b := &Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}
	e := &estimate.Estimate{Estimated: true, Source: estimate.SourceText, CPUSeconds: 1, Sigma: 0.5, PeakMemory: estimate.Quantity{Median: gib, Sigma: 0.7}}
	s.correctText(s.reads(), e, b)
	if !near(e.PeakMemory.Median, 3*gib*10/11, 0.01) || e.PeakMemory.Sigma < 0.7 || b.TextBy[estimate.TargetMemory] != gib {
		t.Fatalf("memory %+v (basis %v); want ~3 GiB·10/11 with at least the text model's σ 0.7, the raw 1 GiB recorded", e.PeakMemory, b.TextBy)
	}
	if e.Elapsed.Known() {
		t.Fatalf("elapsed %+v; the text model predicted none", e.Elapsed)
	}
}

// A statement that ran before gets each target tempered by its own runs:
// the model's 8 GiB for a statement whose one run took 1 GiB is served
// near 1 GiB (one run weighs 16 to the model's prior σ 1), and an offset
// that other shapes taught never moves it away from the run; a target the
// model does not predict is served from the runs.
func TestTemperPerTarget(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	s := newCascade(t, defaults, targetModel(2, 8*gib, 0))
	// Other shapes ran at 3× the model's memory: a global offset up.
	for i := range 8 {
		b := basisOf(estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM other%d", i)))
		s.Observe(b, estimate.Actual{CPUSeconds: 2, PeakMemoryBytes: 24 * gib})
	}
	s.Flush()
	const q = "SELECT * FROM orders WHERE o_orderkey = 7"
	s.Observe(basisOf(estimateSQL(t, s, []string{srv.URL}, q)), estimate.Actual{CPUSeconds: 2, PeakMemoryBytes: gib, ElapsedSeconds: 5})
	s.Flush()
	e := estimateSQL(t, s, []string{srv.URL}, q)
	if e.Source != estimate.SourceModelResidual && e.Source != estimate.SourceModel {
		t.Fatalf("source %s; want the model (one run is too few for the history)", e.Source)
	}
	// Held at the raw 8 GiB (the offset would take it to ~24 GiB), then
	// weighed 16:1 toward the run's 1 GiB: exp((16·0 + 1·ln 8)/17) GiB.
	t.Logf("memory %.3f GiB σ %.3f; elapsed %.3f s σ %.3f", e.PeakMemory.Median/gib, e.PeakMemory.Sigma, e.Elapsed.Median, e.Elapsed.Sigma)
	if m := e.PeakMemory.Median / gib; m < 1 || m > 1.2 {
		t.Fatalf("memory %.3f GiB; want near the run's 1 GiB (≤ 1.2), never past it nor toward the offset", m)
	}
	if e.PeakMemory.Sigma < s.repeatSigma(estimate.TargetMemory) {
		t.Fatalf("memory σ %.3f below the run-to-run noise %.3f", e.PeakMemory.Sigma, s.repeatSigma(estimate.TargetMemory))
	}
	if e.Elapsed.Median != 5 || !(e.Elapsed.Sigma > 0) {
		t.Fatalf("elapsed %+v; want the run's 5 s with an interval (the model predicts none)", e.Elapsed)
	}
}

// Decision bounds per target: a pre-plan estimate decides only when, for
// every target with bounds, it predicts the target and its interval lies
// on one side of each bound (or the plan could not move it across).
func TestDecidesOnEveryBoundedTarget(t *testing.T) {
	mem := func(median, sigma float64) estimate.Quantity { return estimate.Quantity{Median: median, Sigma: sigma} }
	for _, c := range []struct {
		name    string
		co      CascadeOptions
		e       estimate.Estimate
		after   float64
		decides bool
	}{
		{"no bounds at all: decides", CascadeOptions{}, estimate.Estimate{CPUSeconds: 5, Sigma: 2}, 0, true},
		{"a memory bound, no memory predicted: explain",
			CascadeOptions{Bounds: Bounds{estimate.TargetMemory: {4 * gib}}}, estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.1}, 0, false},
		{"1 GiB ±30% under a 4 GiB bound: decides",
			CascadeOptions{Bounds: Bounds{estimate.TargetMemory: {4 * gib}}}, estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.1, PeakMemory: mem(gib, 0.3)}, 0, true},
		{"20 GiB ±30% above it: decides",
			CascadeOptions{Bounds: Bounds{estimate.TargetMemory: {4 * gib}}}, estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.1, PeakMemory: mem(20*gib, 0.3)}, 0, true},
		{"3.5 GiB ±50% straddles it: explain",
			CascadeOptions{Bounds: Bounds{estimate.TargetMemory: {4 * gib}}}, estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.1, PeakMemory: mem(3.5*gib, 0.5)}, 0.3, false},
		{"between two bounds: decides",
			CascadeOptions{Bounds: Bounds{estimate.TargetMemory: {gib, 64 * gib}}}, estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.1, PeakMemory: mem(8*gib, 0.5)}, 0, true},
		{"memory certain, CPU straddles its class: explain",
			CascadeOptions{ClassBounds: []float64{1, 0}, Bounds: Bounds{estimate.TargetMemory: {4 * gib}}},
			estimate.Estimate{CPUSeconds: 1, Sigma: 0.5, PeakMemory: mem(gib, 0.3)}, 0, false},
		{"CPU certain, memory straddles: explain",
			CascadeOptions{ClassBounds: []float64{1, 0}, Bounds: Bounds{estimate.TargetMemory: {4 * gib}}},
			estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.3, PeakMemory: mem(4*gib, 0.3)}, 0, false},
		{"both certain: decides",
			CascadeOptions{ClassBounds: []float64{1, 0}, Bounds: Bounds{estimate.TargetMemory: {4 * gib}}},
			estimate.Estimate{CPUSeconds: 0.1, Sigma: 0.3, PeakMemory: mem(gib, 0.3)}, 0, true},
		{"a CPU decision bound counts as a class bound",
			CascadeOptions{Bounds: Bounds{estimate.TargetCPU: {30}}}, estimate.Estimate{CPUSeconds: 25, Sigma: 0.5}, 0, false},
		{"an elapsed bound, none predicted: explain",
			CascadeOptions{Bounds: Bounds{estimate.TargetElapsed: {60}}}, estimate.Estimate{CPUSeconds: 25, Sigma: 0.5, PeakMemory: mem(gib, 0.1)}, 0, false},
		{"the last class's bound is no decision bound (above it: the last class still)",
			CascadeOptions{ClassBounds: []float64{1, 10}}, estimate.Estimate{CPUSeconds: 10, Sigma: 0.5}, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.co.Explain, c.co.ClassQuantile = ExplainWhenUncertain, 0.9
			if got := c.co.decides(&c.e, sigma(c.after)); got != c.decides {
				t.Fatalf("decides = %v; want %v", got, c.decides)
			}
			c.co.Explain = ExplainNever
			if !c.co.decides(&c.e, sigma(c.after)) {
				t.Fatal("under never every estimate decides")
			}
		})
	}
}

// A memory bound makes the text stage explain a statement whose text
// estimate predicts no memory, where the CPU classes alone let it decide;
// once the statement's shape has run, its history (which knows the
// memory) decides before the plan.
func TestTextStageExplainsForAMemoryBoundItCannotPlace(t *testing.T) {
	const (
		first = "SELECT count(*) FROM orders WHERE o_orderkey = 1 -- text 0.05 0.1 0.2"
		other = "SELECT count(*) FROM orders WHERE o_orderkey = 2 -- text 0.05 0.1 0.2"
	)
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newTextCascade(t, ExplainWhenUncertain, 0.1)
	e := estimateSQL(t, s, []string{srv.URL}, first)
	if e.Source != estimate.SourceText || f.explains.Load() > 1 {
		t.Fatalf("CPU classes alone: %s; want the text stage", e.Source)
	}
	waitFor(t, "the background EXPLAIN", func() bool { return f.explains.Load() == 1 })
	s.Observe(basisOf(e), estimate.Actual{CPUSeconds: 0.1, PeakMemoryBytes: 64 << 20, ElapsedSeconds: 0.3})
	s.Flush()
	waitFor(t, "the observation", func() bool { st, ok := s.learn.get(basisOf(e).Shape); return ok && st.Count > 0 })

	s.opts.Cascade.Bounds = MergeBounds(Bounds{estimate.TargetMemory: {4 * gib}})
	s.opts.Cascade.MinCount = 100 // the statement's own runs never answer alone
	// The shape ran: its history knows the memory, far below 4 GiB.
	e = estimateSQL(t, s, []string{srv.URL}, other)
	if e.Source != estimate.SourceHistory || e.Planner != "" || !near(e.PeakMemory.Median, 64<<20, 1e-9) {
		t.Fatalf("a memory bound, the shape's memory known: %s (planner %q), memory %+v; want the history before the plan", e.Source, e.Planner, e.PeakMemory)
	}
	waitFor(t, "the background EXPLAIN", func() bool { return f.explains.Load() == 2 })
	// A new shape: neither the text model nor a history knows its memory.
	e = estimateSQL(t, s, []string{srv.URL}, "SELECT count(*) FROM lineitem -- text 0.05 0.1 0.2")
	if e.Source == estimate.SourceText || e.Source == estimate.SourceHistory || e.Planner == "" {
		t.Fatalf("a memory bound, no memory known: %s (planner %q); want the EXPLAIN on the hot path", e.Source, e.Planner)
	}
}

func TestMergeBounds(t *testing.T) {
	a := Bounds{estimate.TargetMemory: {8 * gib, 4 * gib, 0, math.Inf(1), math.NaN()}, estimate.TargetCPU: {30}}
	b := Bounds{estimate.TargetMemory: {4 * gib, 16 * gib}, estimate.TargetElapsed: {-1}}
	got := MergeBounds(a, nil, b)
	want := Bounds{estimate.TargetMemory: {4 * gib, 8 * gib, 16 * gib}, estimate.TargetCPU: {30}}
	if len(got) != len(want) || !slices.Equal(got[estimate.TargetMemory], want[estimate.TargetMemory]) || !slices.Equal(got[estimate.TargetCPU], want[estimate.TargetCPU]) {
		t.Fatalf("got %v; want %v (sorted, each once, nothing that bounds nothing)", got, want)
	}
	if a[estimate.TargetMemory][0] != 8*gib || len(b[estimate.TargetMemory]) != 2 {
		t.Fatal("the arguments changed")
	}
	if MergeBounds() != nil || MergeBounds(Bounds{estimate.TargetCPU: {0}}) != nil {
		t.Fatal("no bound: want nil")
	}
}

// What was stored before targets beyond CPU read as it did: a CPU-only
// entry under the statement's key (each store) is served, with no memory
// or elapsed; learn bytes of the old form decode with no per-target
// numbers; the per-target keys never collide with an old one.
func TestOldHistoryStillReads(t *testing.T) {
	const q = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	exact, _ := HistoryKeys(q, alice)
	for _, st := range storeKinds {
		t.Run(st.name, func(t *testing.T) {
			store := st.open(t)
			at := fixedTime
			old := history.Stats{}.Add(math.Log(8), 0.2, at).Add(math.Log(8), 0.2, at)
			if err := store.Update(history.Update{Key: exact, Apply: func(history.Stats, bool) history.Stats { return old }}); err != nil {
				t.Fatal(err)
			}
			s := NewService(nil, ServiceOptions{Workers: 1, History: store, Cascade: defaults})
			defer s.Close()
			e, err := historyStage{}.run(s, newRequest(nil, q))
			if err != nil || e == nil || !near(e.CPUSeconds, 8, 1e-9) || e.PeakMemory.Known() || e.Elapsed.Known() {
				t.Fatalf("got %+v %v; want the old entry's 8 s, no other target", e, err)
			}
		})
	}
	b := UnmarshalBasis([]byte(`{"x":"eDox","s":"czox","m":0.5,"t":-1,"src":4}`))
	if b == nil || b.LnModel != 0.5 || b.LnText != -1 || b.ModelBy != ([numTargets]float64{}) || b.TextBy != ([numTargets]float64{}) ||
		!math.IsNaN(b.lnModel(estimate.TargetMemory)) || !math.IsNaN(b.lnText(estimate.TargetElapsed)) {
		t.Fatalf("old learn bytes: %+v", b)
	}
	if k := targetKey(exact, estimate.TargetMemory); k == exact || len(k) == len(exact) || targetKey(exact, estimate.TargetCPU) != exact {
		t.Fatalf("target keys: %q for %q", k, exact)
	}
}

// The per-target numbers travel in the learn bytes.
func TestBasisCarriesTheTargetsNumbers(t *testing.T) {
	b := &Basis{Exact: "x:1", Shape: "s:1", LnModel: 1, LnCost: math.NaN(), LnText: math.NaN()}
	b.ModelBy[estimate.TargetMemory], b.ModelBy[estimate.TargetElapsed], b.TextBy[estimate.TargetElapsed] = 3*gib, 12, 7
	got := UnmarshalBasis(MarshalBasis(b))
	if got.ModelBy != b.ModelBy || got.TextBy != b.TextBy || got.LnModel != 1 {
		t.Fatalf("round trip: %+v; want %+v", got, b)
	}
}

var fixedTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// storeKinds are the three history stores, each opened fresh.
var storeKinds = []struct {
	name string
	open func(t *testing.T) history.Store
}{
	{"memory", func(*testing.T) history.Store { return history.NewMemory(0) }},
	{"bolt", func(t *testing.T) history.Store {
		b, err := history.OpenBolt(t.TempDir()+"/h.db", 0)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}},
	{"redis", func(t *testing.T) history.Store {
		rs := redistest.Start(t)
		r, err := history.OpenRedis(history.RedisOptions{URL: "redis://" + rs.Addr, Prefix: "targets:", Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}},
}

// The model stage serves, per target beyond CPU whose manifest has a text
// blend, the weighted geometric mean of the model's number and the text
// stage's, with the smaller of the two spreads; the CPU time and a target
// without a blend (or without a text number) keep the model's own.
func TestBlendTextTargets(t *testing.T) {
	mf := &bundle.Manifest{Targets: map[string]*bundle.TargetOutput{
		"peak_memory": {TextBlend: &bundle.TextBlend{Weight: 0.25, Sigma: 0.5}},
		"elapsed":     {},
	}}
	model := func() *estimate.Estimate {
		return &estimate.Estimate{CPUSeconds: 3, Sigma: 1, PeakMemory: estimate.Quantity{Median: gib, Sigma: 0.9},
			Elapsed: estimate.Quantity{Median: 2, Sigma: 0.7}}
	}
	text := &estimate.Estimate{CPUSeconds: 30, Sigma: 1, PeakMemory: estimate.Quantity{Median: 16 * gib, Sigma: 1.2},
		Elapsed: estimate.Quantity{Median: 20, Sigma: 0.3}}

	e := model()
	blendTextTargets(e, mf, text)
	if want := gib * 2; !near(e.PeakMemory.Median, want, 1e-12) || e.PeakMemory.Sigma != 0.5 { // 16^0.25 = 2
		t.Errorf("peak memory %+v, want median %.4g with σ 0.5", e.PeakMemory, want)
	}
	if e.Elapsed != model().Elapsed || e.CPUSeconds != 3 || e.Sigma != 1 {
		t.Errorf("elapsed %+v, CPU %v (σ %v): want the model's own (no blend for them)", e.Elapsed, e.CPUSeconds, e.Sigma)
	}

	narrow := model()
	narrow.PeakMemory.Sigma = 0.2 // a shape with residuals of its own keeps its narrower spread
	blendTextTargets(narrow, mf, text)
	if narrow.PeakMemory.Sigma != 0.2 {
		t.Errorf("σ %v, want the model's narrower 0.2", narrow.PeakMemory.Sigma)
	}
	for name, c := range map[string]struct {
		mf   *bundle.Manifest
		text *estimate.Estimate
	}{
		"no text number":             {mf, nil},
		"a text number without this": {mf, &estimate.Estimate{CPUSeconds: 30}},
		"no manifest":                {nil, text},
	} {
		e := model()
		blendTextTargets(e, c.mf, c.text)
		if e.PeakMemory != model().PeakMemory {
			t.Errorf("%s: peak memory %+v, want the model's own", name, e.PeakMemory)
		}
	}
}
