package estimator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The step settles where one served interval in five misses, whether the
// stage's σ is twice, once or half the errors' spread: the factor comes
// to the errors' spread over the stage's σ, and the intervals served
// after the first hundred outcomes cover 80%.
func TestCoverStepSettlesAtEightyPercent(t *testing.T) {
	z := estimate.NormalQuantile(0.9)
	for _, spread := range []float64{0.5, 1, 2} { // the errors' σ; the stage's is 1
		rng := rand.New(rand.NewPCG(1, uint64(spread*10)))
		var st history.Stats
		hits, n := 0, 0
		for i := range 4000 {
			c := math.Exp(st.Mean)
			miss := math.Abs(rng.NormFloat64()*spread) > z*c
			if i >= 100 {
				n++
				if !miss {
					hits++
				}
			}
			m := 0.0
			if miss {
				m = 1
			}
			st = coverStepped(st, m, time.Time{})
		}
		if cov := float64(hits) / float64(n); math.Abs(cov-0.8) > 0.02 {
			t.Errorf("errors of σ %g: the served intervals covered %.3f, want 0.80 ± 0.02", spread, cov)
		}
		if c := math.Exp(st.Mean); math.Abs(math.Log(c/spread)) > 0.25 {
			t.Errorf("errors of σ %g: factor %.3f, want near %g", spread, c, spread)
		}
		if st.Count != 4000 {
			t.Errorf("count %d, want 4000", st.Count)
		}
	}
	// Bounded: a stage that always misses stops at ×4.
	var st history.Stats
	for range 1000 {
		st = coverStepped(st, 1, time.Time{})
	}
	if c := math.Exp(st.Mean); math.Abs(c-4) > 1e-9 {
		t.Errorf("always missing: factor %.4f, want the bound 4", c)
	}
}

// textCalibrated is a cascade whose text stage answers new shapes of σ sigma
// about 0.1 s, taught n outcomes of statements spread by spread about it;
// it returns the served σ of the first and the last, and the share of the
// last half's intervals that held their statement.
func textCalibrated(t *testing.T, url string, sigma, spread float64, n int) (s *Service, first, last, cov float64) {
	t.Helper()
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	s = newCascade(t, co, constModel(0.1))
	s.textHook = textModel
	z := estimate.NormalQuantile(0.9)
	rng := rand.New(rand.NewPCG(7, uint64(spread*100)))
	hits := 0
	for i := range n {
		// A new shape each time (a new table): the text stage's own
		// interval, no shape's residuals.
		e, err := s.EstimateOn(context.Background(), []string{url}, fmt.Sprintf("SELECT * FROM t%d -- text %g 0.1 %g", i, 0.1*math.Exp(-z*sigma), 0.1*math.Exp(z*sigma)), alice)
		if err != nil {
			t.Fatal(err)
		}
		if e.Source != estimate.SourceText {
			t.Fatalf("statement %d: %s answered, want the text stage", i, e.Source)
		}
		b := basisOf(e)
		if q := b.Served[estimate.TargetCPU]; math.Abs(q.Sigma-e.Sigma) > 1e-12 || math.Abs(math.Log(q.Median/e.CPUSeconds)) > 1e-12 {
			t.Fatalf("statement %d: the basis carries %g ± %g, the estimate served %g ± %g", i, q.Median, q.Sigma, e.CPUSeconds, e.Sigma)
		}
		if i == 0 {
			first = e.Sigma
		}
		last = e.Sigma
		actual := 0.1 * math.Exp(spread*rng.NormFloat64())
		if l, h := e.Interval(); i >= n/2 && actual >= l && actual <= h {
			hits++
		}
		before := factorFor(s, dialect.Trino, "text").Outcomes
		s.Observe(b, estimate.Actual{CPUSeconds: actual})
		s.Flush()
		waitFor(t, "the outcome", func() bool { return factorFor(s, dialect.Trino, "text").Outcomes > before })
	}
	return s, first, last, float64(hits) / float64(n-n/2)
}

// The text model's quantiles say σ 1 where the deployment's statements
// spread by 0.35 about its median: served as is, its 80% intervals hold
// nearly every statement. Through the cascade, the outcomes narrow the
// text stage's intervals until 80% hold: the factor is learned and carried
// by each estimate's Basis. The stage still decides with its own σ (a
// statement whose raw interval straddles a class bound is explained).
// The other way round, a text model that claims σ 0.1 on statements spread
// by 0.8 is served wider intervals and decides with them: a statement
// whose raw interval lay inside a class is then explained.
func TestTextIntervalsCalibrateToTheirCoverage(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	z := estimate.NormalQuantile(0.9)
	// 0.3 s with σ 1: its 90% quantile is 1.08 s, over the 1 s bound.
	straddles := fmt.Sprintf("SELECT count(*) FROM lineitem -- text %g 0.3 %g", 0.3*math.Exp(-z), 0.3*math.Exp(z))
	t.Run("too wide", func(t *testing.T) {
		s, first, last, cov := textCalibrated(t, srv.URL, 1, 0.35, 300)
		if math.Abs(first-1) > 1e-9 {
			t.Errorf("first statement's σ %.4f, want the text model's 1 (nothing learned yet)", first)
		}
		if last > 0.6 {
			t.Errorf("after 300 outcomes the text stage serves σ %.3f, want near the statements' 0.35", last)
		}
		if cov < 0.7 || cov > 0.9 {
			t.Errorf("the last 150 intervals covered %.2f, want near 0.80 (the raw ones would hold %.2f)", cov, coverOf(0.35, 1))
		}
		// The last σ served was the factor before the last outcome's step.
		if c := factorFor(s, dialect.Trino, "text"); c.Outcomes != 300 || math.Abs(math.Log(c.Factor/last)) > 0.8*coverStep+1e-9 {
			t.Errorf("text factor %+v, want 300 outcomes and one step from the last σ %.4f served", c, last)
		}
		if c := factorFor(s, dialect.Trino, "model"); c.Outcomes != 0 || c.Factor != 1 {
			t.Errorf("model factor %+v: the model answered no outcome, want 1", c)
		}
		if c := factorFor(s, dialect.Presto, "text"); c.Outcomes != 0 {
			t.Errorf("PrestoDB's text factor %+v: its statements are another engine's, want none", c)
		}
		if e := estimateSQL(t, s, []string{srv.URL}, straddles); e.Source != estimate.SourceModel {
			t.Errorf("after narrowing: %s answered the statement whose own interval straddles the bound, want the model", e.Source)
		}
	})
	t.Run("too narrow", func(t *testing.T) {
		// 0.7 s with σ 0.1: inside the small class (90% quantile 0.8 s);
		// at σ 0.3 its 90% quantile is 1.03 s.
		inside := fmt.Sprintf("SELECT count(*) FROM orders -- text %g 0.7 %g", 0.7*math.Exp(-z*0.1), 0.7*math.Exp(z*0.1))
		s, first, last, cov := textCalibrated(t, srv.URL, 0.1, 0.8, 100)
		if math.Abs(first-0.1) > 1e-9 || last < 0.3 {
			t.Errorf("σ served first %.3f, last %.3f: want the model's 0.1, then at least 0.3", first, last)
		}
		if cov < 0.6 {
			t.Errorf("the last 50 intervals covered %.2f, want near 0.80 (the raw ones would hold %.2f)", cov, coverOf(0.8, 0.1))
		}
		if e := estimateSQL(t, s, []string{srv.URL}, inside); e.Source != estimate.SourceModel {
			t.Errorf("after widening: %s answered the statement whose own interval lay inside the class, want the model", e.Source)
		}
	})
}

// factorFor is s's interval factor of the CPU time of the stage labelled
// src on engine's statements, as /metrics reads it.
func factorFor(s *Service, engine dialect.Engine, src string) estimate.IntervalStats {
	for _, iv := range s.CoverScales() {
		if iv.Engine == string(engine) && iv.Target == "cpu" && iv.Source == src {
			return iv
		}
	}
	return estimate.IntervalStats{}
}

// coverOf is the share of N(0, spread) within the 80% interval of σ sigma.
func coverOf(spread, sigma float64) float64 {
	return math.Erf(estimate.NormalQuantile(0.9) * sigma / spread / math.Sqrt2)
}

// A basis from a replica that served no interval (or from before the
// calibration) teaches no factor; the served interval survives the wire.
func TestBasisCarriesTheServedInterval(t *testing.T) {
	b := &Basis{Exact: "x", Source: estimate.SourceModel, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN(), LnRows: math.NaN(),
		Served: [numTargets]estimate.Quantity{estimate.TargetCPU: {Median: 2, Sigma: 0.4}}}
	cpuOnly := [numTargets]float64{math.Log(2), math.NaN(), math.NaN()}
	got := UnmarshalBasis(MarshalBasis(b))
	if got.Served != b.Served {
		t.Fatalf("round trip: %+v, want %+v", got.Served, b.Served)
	}
	// The peak memory's interval travels too, and its outcome steps the
	// memory's factor, not the CPU time's.
	mem := *b
	mem.Served[estimate.TargetMemory] = estimate.Quantity{Median: 2 * gib, Sigma: 0.3}
	back := UnmarshalBasis(MarshalBasis(&mem))
	if back.Served != mem.Served {
		t.Fatalf("round trip of the memory's interval: %+v, want %+v", back.Served, mem.Served)
	}
	y := [numTargets]float64{math.NaN(), math.Log(8 * gib), math.NaN()}
	if ups := coverUpdates(nil, back, &y, time.Now()); len(ups) != 1 || ups[0].Key != coverKey(estimate.SourceModel, dialect.Trino, estimate.TargetMemory) {
		t.Errorf("a memory outcome steps %d factors, want the model's memory factor alone", len(ups))
	}
	if ups := coverUpdates(nil, got, &cpuOnly, time.Now()); len(ups) != 1 || ups[0].Key != coverKey(estimate.SourceModel, dialect.Trino, estimate.TargetCPU) {
		t.Errorf("a served interval of the model teaches %d factors, want its own", len(ups))
	}
	local := *got
	local.Source = estimate.SourceModelResidual
	if ups := coverUpdates(nil, &local, &cpuOnly, time.Now()); len(ups) != 2 || ups[1].Key != coverKeysTrino.shared[estimate.TargetCPU] {
		t.Errorf("a served interval of model+residual teaches %d factors, want its own and the shared one", len(ups))
	}
	old := UnmarshalBasis([]byte(`{"x":"eA==","src":4}`))
	if old.Served != [numTargets]estimate.Quantity{} {
		t.Fatalf("an older basis reads %+v, want none", old.Served)
	}
	if len(coverUpdates(nil, old, &cpuOnly, time.Now())) != 0 {
		t.Error("an older basis (no served interval) teaches a factor")
	}
	cheap := *b
	cheap.Source = estimate.SourceCheap
	if len(coverUpdates(nil, &cheap, &cpuOnly, time.Now())) != 0 {
		t.Error("the cheap stage's constant teaches a factor")
	}
}

// History and model+residual share a factor (coverLocal): a deployment whose
// repeats run as steadily as history's intervals are wide teaches, through
// history's outcomes alone, narrower intervals to model+residual before it
// has answered more than a few — and not to the text stage or the model,
// whose σ come from elsewhere (each keeps its own factor alone). History's own factor moves with the same steps, so it
// stands at the shared one squared; a statement model+residual answers is
// served its σ times the shared factor.
func TestLocalStagesShareAFactor(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newCascade(t, defaults, constModel(1))
	rng := rand.New(rand.NewPCG(3, 5))
	history := 0
	for i := range 10 {
		q := fmt.Sprintf("SELECT count(*) FROM orders WHERE o_orderkey = %d", i)
		for range 6 {
			e := estimateSQL(t, s, []string{srv.URL}, q)
			b := basisOf(e)
			if e.Source == estimate.SourceHistory {
				history++
			}
			s.Observe(b, estimate.Actual{CPUSeconds: math.Exp(0.02 * rng.NormFloat64())})
			s.Flush()
		}
	}
	h := factorFor(s, dialect.Trino, "history")
	if history < 20 || h.Outcomes != uint64(history) {
		t.Fatalf("history answered %d statements and learned from %d, want at least 20 and all of them", history, h.Outcomes)
	}
	mr := factorFor(s, dialect.Trino, "model+residual")
	local := h.Factor / math.Exp(lnFactorOf(s.learn.store.Get(coverKey(estimate.SourceHistory, dialect.Trino, estimate.TargetCPU))))
	if !(h.Factor < 0.8) || !(local < 0.95) {
		t.Fatalf("history's factor %.3f, the shared one %.3f: every interval held, want both narrowed", h.Factor, local)
	}
	// model+residual's factor is its own times the shared one.
	own := lnFactorOf(s.learn.store.Get(coverKey(estimate.SourceModelResidual, dialect.Trino, estimate.TargetCPU)))
	if math.Abs(math.Log(mr.Factor)-own-math.Log(local)) > 1e-9 {
		t.Errorf("model+residual's factor %.4f, want its own %.4f times the shared %.4f", mr.Factor, math.Exp(own), local)
	}
	for _, src := range []estimate.Source{estimate.SourceText, estimate.SourceModel, estimate.SourceOptimizer} {
		own := math.Exp(lnFactorOf(s.learn.store.Get(coverKey(src, dialect.Trino, estimate.TargetCPU))))
		if c := factorFor(s, dialect.Trino, src.String()); math.Abs(c.Factor-own) > 1e-12 {
			t.Errorf("%s's factor %.4f, want its own %.4f: it shares nothing with history", src, c.Factor, own)
		}
	}
	if c := factorFor(s, dialect.Presto, "model+residual"); c.Factor != 1 {
		t.Errorf("PrestoDB's model+residual factor %.3f: Trino's outcomes, want 1", c.Factor)
	}
	if got := coverScale(s.reads(), estimate.SourceModelResidual, dialect.Trino, estimate.TargetCPU); math.Abs(got-mr.Factor) > 1e-12 {
		t.Errorf("the cascade reads model+residual's factor as %.4f, /metrics %.4f", got, mr.Factor)
	}
}

// Each target's interval is calibrated on its own: the model's peak memory
// is off by about 10% for four statements in five and by a factor near e
// for the fifth (heavy tails: the residuals' spread, which the model stage
// serves as σ, is the outliers', and its intervals hold 89%), its elapsed
// time by a log-normal error its spread describes. The memory's intervals
// are served narrower, the elapsed time's about as computed, and both
// hold about 80% once the factors have learned; each served interval
// travels in the Basis.
func TestEachTargetCalibratesItsOwnInterval(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	s := newCascade(t, defaults, targetModel(2, gib, 10))
	rng := rand.New(rand.NewPCG(11, 13))
	const n = 800
	var memHits, elapsedHits int
	for i := range n {
		e := estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d WHERE k = 1", i))
		b := basisOf(e)
		if e.Source != estimate.SourceModel {
			t.Fatalf("statement %d: %s answered, want the model (a new shape each time)", i, e.Source)
		}
		if b.Served[estimate.TargetMemory] != e.PeakMemory || b.Served[estimate.TargetElapsed] != e.Elapsed {
			t.Fatalf("statement %d: the basis carries %+v, the estimate served memory %+v, elapsed %+v", i, b.Served, e.PeakMemory, e.Elapsed)
		}
		lnMem := 0.1 * rng.NormFloat64()
		if rng.IntN(5) == 0 {
			lnMem = rng.NormFloat64()
		}
		a := estimate.Actual{CPUSeconds: 2, PeakMemoryBytes: gib * math.Exp(lnMem), ElapsedSeconds: 10 * math.Exp(0.5*rng.NormFloat64())}
		if i >= n/2 {
			if l, h := e.PeakMemory.Interval(); a.PeakMemoryBytes >= l && a.PeakMemoryBytes <= h {
				memHits++
			}
			if l, h := e.Elapsed.Interval(); a.ElapsedSeconds >= l && a.ElapsedSeconds <= h {
				elapsedHits++
			}
		}
		s.Observe(b, a)
		s.Flush()
	}
	factor := func(target estimate.Target) estimate.IntervalStats {
		for _, iv := range s.CoverScales() {
			if iv.Engine == "trino" && iv.Target == target.String() && iv.Source == "model" {
				return iv
			}
		}
		return estimate.IntervalStats{}
	}
	mem, elapsed := factor(estimate.TargetMemory), factor(estimate.TargetElapsed)
	t.Logf("factors: memory %.3f, elapsed %.3f", mem.Factor, elapsed.Factor)
	if mem.Outcomes != n || elapsed.Outcomes != n || !(mem.Factor < 0.6) || math.Abs(math.Log(elapsed.Factor)) > 0.25 {
		t.Errorf("memory factor %+v, elapsed %+v: want %d outcomes each, the memory's narrowed, the elapsed time's near 1", mem, elapsed, n)
	}
	for name, hits := range map[string]int{"memory": memHits, "elapsed": elapsedHits} {
		cov := float64(hits) / float64(n-n/2)
		t.Logf("%s: the last %d intervals held %.2f", name, n-n/2, cov)
		if cov < 0.72 || cov > 0.88 {
			t.Errorf("the last %d %s intervals held %.2f, want near 0.80", n-n/2, name, cov)
		}
	}
}
