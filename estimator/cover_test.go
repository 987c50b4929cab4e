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

// The text model's quantiles say σ 1 where the deployment's statements
// spread by 0.35 about its median: served as is, its 80% intervals hold
// nearly every statement. Through the cascade, the outcomes narrow the
// text stage's intervals until 80% hold: the factor is learned, carried
// by each estimate's Basis, and the stage decides with it (a statement
// whose raw interval straddled a class bound is then answered by it).
func TestTextIntervalsCalibrateToTheirCoverage(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	s := newCascade(t, co, constModel(0.1))
	s.textHook = textModel
	lo, hi := 0.1*math.Exp(-estimate.NormalQuantile(0.9)), 0.1*math.Exp(estimate.NormalQuantile(0.9)) // σ 1 about 0.1 s
	// 0.3 s with σ 1: its 90% quantile is 1.08 s, over the 1 s bound.
	straddles := fmt.Sprintf("SELECT count(*) FROM lineitem -- text %g 0.3 %g", 0.3*lo/0.1, 0.3*hi/0.1)
	if e := estimateSQL(t, s, []string{srv.URL}, straddles); e.Source != estimate.SourceModel {
		t.Fatalf("before any outcome: %s answered the straddling statement, want the model", e.Source)
	}
	rng := rand.New(rand.NewPCG(7, 7))
	hits, n := 0, 0
	var first, last float64
	for i := range 300 {
		// A new shape each time (a new table): the text stage's own
		// interval, no shape's residuals.
		e, err := s.EstimateOn(context.Background(), []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d -- text %g 0.1 %g", i, lo, hi), alice)
		if err != nil {
			t.Fatal(err)
		}
		if e.Source != estimate.SourceText {
			t.Fatalf("statement %d: %s answered, want the text stage", i, e.Source)
		}
		b := basisOf(e)
		if math.Abs(b.SigmaServed-e.Sigma) > 1e-12 || math.Abs(b.LnServed-math.Log(e.CPUSeconds)) > 1e-12 {
			t.Fatalf("statement %d: the basis carries %g ± %g, the estimate served %g ± %g", i, b.LnServed, b.SigmaServed, math.Log(e.CPUSeconds), e.Sigma)
		}
		if i == 0 {
			first = e.Sigma
		}
		last = e.Sigma
		actual := 0.1 * math.Exp(0.35*rng.NormFloat64())
		if i >= 150 {
			n++
			if l, h := e.Interval(); actual >= l && actual <= h {
				hits++
			}
		}
		before := s.CoverScales(dialect.Trino)["text"].Outcomes
		s.Observe(b, estimate.Actual{CPUSeconds: actual})
		s.Flush()
		waitFor(t, "the outcome", func() bool { return s.CoverScales(dialect.Trino)["text"].Outcomes > before })
	}
	if math.Abs(first-1) > 1e-9 {
		t.Errorf("first statement's σ %.4f, want the text model's 1 (nothing learned yet)", first)
	}
	if last > 0.6 {
		t.Errorf("after 300 outcomes the text stage serves σ %.3f, want near the statements' 0.35", last)
	}
	if cov := float64(hits) / float64(n); cov < 0.7 || cov > 0.9 {
		t.Errorf("the last %d intervals covered %.2f, want near 0.80 (the raw ones held %.2f)", n, cov, coverOf(0.35, 1))
	}
	// The last σ served was the factor before the last outcome's step.
	if c := s.CoverScales(dialect.Trino)["text"]; c.Outcomes != 300 || math.Abs(math.Log(c.Factor/last)) > 0.8*coverStep+1e-9 {
		t.Errorf("text factor %+v, want 300 outcomes and one step from the last σ %.4f served", c, last)
	}
	if c := s.CoverScales(dialect.Trino)["model"]; c.Outcomes != 0 || c.Factor != 1 {
		t.Errorf("model factor %+v: the model answered no outcome, want 1", c)
	}
	if c := s.CoverScales(dialect.Presto)["text"]; c.Outcomes != 0 {
		t.Errorf("PrestoDB's text factor %+v: its statements are another engine's, want none", c)
	}
	if e := estimateSQL(t, s, []string{srv.URL}, straddles); e.Source != estimate.SourceText {
		t.Errorf("after calibration: %s answered the statement whose raw interval straddled the bound, want the text stage", e.Source)
	}
}

// coverOf is the share of N(0, spread) within the 80% interval of σ sigma.
func coverOf(spread, sigma float64) float64 {
	return math.Erf(estimate.NormalQuantile(0.9) * sigma / spread / math.Sqrt2)
}

// A basis from a replica that served no interval (or from before the
// calibration) teaches no factor; the served interval survives the wire.
func TestBasisCarriesTheServedInterval(t *testing.T) {
	b := &Basis{Exact: "x", Source: estimate.SourceModel, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN(), LnRows: math.NaN(),
		LnServed: math.Log(2), SigmaServed: 0.4}
	got := UnmarshalBasis(MarshalBasis(b))
	if got.LnServed != b.LnServed || got.SigmaServed != b.SigmaServed {
		t.Fatalf("round trip: %g ± %g, want %g ± %g", got.LnServed, got.SigmaServed, b.LnServed, b.SigmaServed)
	}
	if _, ok := coverUpdate(got, math.Log(2), time.Now()); !ok {
		t.Error("a served interval teaches no factor")
	}
	old := UnmarshalBasis([]byte(`{"x":"eA==","src":4}`))
	if old.SigmaServed != 0 || !math.IsNaN(old.LnServed) {
		t.Fatalf("an older basis reads %g ± %g, want none", old.LnServed, old.SigmaServed)
	}
	if _, ok := coverUpdate(old, 0, time.Now()); ok {
		t.Error("an older basis (no served interval) teaches a factor")
	}
	cheap := *b
	cheap.Source = estimate.SourceCheap
	if _, ok := coverUpdate(&cheap, 0, time.Now()); ok {
		t.Error("the cheap stage's constant teaches a factor")
	}
}
