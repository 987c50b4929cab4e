package estimator

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// explainedRequest is q as the explain stage leaves it, with a Basis.
func explainedRequest(s *Service, q string) *request {
	r := newRequest([]string{"http://planner"}, q)
	historyStage{}.run(s, r)
	r.planner, r.res = "http://planner", &plan.ExplainResult{PlanJSON: []byte(`{"plan":1}`), QueryID: "q7", Wall: 3 * time.Millisecond}
	return r
}

func TestModelStage(t *testing.T) {
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	t.Run("the model's estimate, calibrated to the deployment", func(t *testing.T) {
		s := newCascade(t, defaults, constModel(2))
		r := explainedRequest(s, q)
		e, err := modelStage{}.run(s, r)
		if err != nil || e == nil || e.Source != estimate.SourceModel || e.CPUSeconds != 2 || e.ModelCPUSeconds != 2 || e.Sigma != defaults.ModelSigma {
			t.Fatalf("got %+v %v; want the model's 2 s with its prior uncertainty", e, err)
		}
		if e.Planner != "http://planner" || e.Explain != 3*time.Millisecond || e.ExplainQueryID != "q7" || string(e.Plan) != `{"plan":1}` ||
			e.Statement != "query" || e.OptimizerCPUSeconds != 0 {
			t.Fatalf("got %+v; want the EXPLAIN's planner, timing, id and plan, no optimizer number (not calibrated)", e)
		}
		if r.b.Source != estimate.SourceModel || math.Abs(r.b.LnModel-math.Log(2)) > 1e-12 {
			t.Fatalf("basis %+v; want the model's ln 2 s to learn from", r.b)
		}
	})
	t.Run("corrected by the shape's residual", func(t *testing.T) {
		s := newCascade(t, defaults, constModel(2))
		exact, shape := HistoryKeys("SELECT * FROM orders WHERE o_orderkey = 2", alice)
		s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.Log(2), LnCost: math.NaN(), LnText: math.NaN()}, estimate.Actual{CPUSeconds: 8})
		s.Flush()
		e, err := modelStage{}.run(s, explainedRequest(s, q))
		if err != nil || e == nil || e.Source != estimate.SourceModelResidual || !(e.CPUSeconds > 2) || e.ModelCPUSeconds != 2 {
			t.Fatalf("got %+v %v; want model+residual above the raw 2 s", e, err)
		}
	})
	t.Run("a failing model passes its error to the optimizer", func(t *testing.T) {
		s := newCascade(t, defaults, nil)
		r := explainedRequest(s, q)
		if e, err := (modelStage{}).run(s, r); e != nil || err != nil || r.merr == nil {
			t.Fatalf("got %+v %v, merr %v; want a pass with the model's error", e, err, r.merr)
		}
	})
	t.Run("without a model it passes at once", func(t *testing.T) {
		s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) { t.Error("model ran"); return nil, nil })
		r := explainedRequest(s, q)
		r.merr = ErrNoModel
		if e, err := (modelStage{}).run(s, r); e != nil || err != nil || !errors.Is(r.merr, ErrNoModel) {
			t.Fatalf("got %+v %v, merr %v; want a pass, the error kept", e, err, r.merr)
		}
	})
}

// Before the blend line is fitted (and for model+residual) the model's
// estimate and the calibrated optimizer's are weighed by their learned
// precision: equal spreads give their geometric mean, a shape's own narrow
// residual spread keeps nearly the model's number, and the interval never
// narrows below the better of the two.
func TestPrecisionBlend(t *testing.T) {
	for _, c := range []struct {
		name                  string
		model, sigma, opt, sd float64
		want, wantSigma       float64
	}{
		{"equal spreads: the geometric mean", 4, 1, 1, 1, 2, 1},
		{"a narrow model+residual keeps its number", 4, 0.1, 1, 1, 4 * math.Pow(0.25, 0.01/1.01), 0.1},
		{"a narrow optimizer fit pulls toward it", 4, 1, 1, 0.5, math.Exp(0.2 * math.Log(4)), 0.5},
		{"no optimizer number: unchanged", 4, 1, 0, 1, 4, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := &estimate.Estimate{CPUSeconds: c.model, Sigma: c.sigma}
			blend(e, c.opt, c.sd)
			if math.Abs(e.CPUSeconds-c.want) > 1e-9*c.want || math.Abs(e.Sigma-c.wantSigma) > 1e-9 {
				t.Errorf("blend(%v ±%v, %v ±%v) = %v ±%v, want %v ±%v", c.model, c.sigma, c.opt, c.sd, e.CPUSeconds, e.Sigma, c.want, c.wantSigma)
			}
			if lo, hi := min(c.model, c.opt), max(c.model, c.opt); c.opt > 0 && (e.CPUSeconds < lo-1e-12 || e.CPUSeconds > hi+1e-12) {
				t.Errorf("%v outside [%v, %v]", e.CPUSeconds, lo, hi)
			}
		})
	}
}

// The blend line learns from the statements the model stage served which
// of the two numbers this deployment should trust: where the optimizer's
// line is flat and noisy and the model close, a model at 8 s and an
// optimizer at 1 s serve near 8 s (the precision weights, both spreads
// 0.5, served their geometric mean, 2.8 s); where the model is the noisy
// one, near the optimizer's. A residual (model+residual) keeps the
// precision weights, as does a line not yet fitted.
func TestBlendLine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		name           string
		model, opt     func(truth float64) float64 // ln estimates of ln truth
		wantLo, wantHi float64                     // served seconds for model 8 s, optimizer 1 s
	}{
		{"a close model, a flat optimizer: the model's number", func(x float64) float64 { return x + 0.3*rng.NormFloat64() },
			func(x float64) float64 { return 0.4*x - 1 + rng.NormFloat64() }, 5, 9},
		{"a noisy model, a close optimizer: the optimizer's", func(x float64) float64 { return 0.3*x + 1.5*rng.NormFloat64() },
			func(x float64) float64 { return x + 0.2*rng.NormFloat64() }, 0.8, 1.6},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newCascade(t, defaults, constModel(0.1))
			for range 400 {
				truth := 1.5 * rng.NormFloat64()
				b := &Basis{Exact: "x", Shape: "s", LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN(),
					Blend: &BlendPoint{LnModel: c.model(truth), LnOptimizer: c.opt(truth)}}
				s.Observe(b, estimate.Actual{CPUSeconds: math.Exp(truth)})
			}
			s.Flush()
			e := &estimate.Estimate{CPUSeconds: 8, Sigma: 0.5, Source: estimate.SourceModel}
			b := &Basis{}
			s.blendOptimizer(s.reads(), e, b, 1, 0.5)
			if e.CPUSeconds < c.wantLo || e.CPUSeconds > c.wantHi {
				t.Errorf("served %.2f s, want in [%v, %v]", e.CPUSeconds, c.wantLo, c.wantHi)
			}
			if b.Blend == nil || b.Blend.LnModel != math.Log(8) || b.Blend.LnOptimizer != 0 {
				t.Errorf("the pair recorded: %+v, want ln 8 and ln 1", b.Blend)
			}
			if !(e.Sigma > sigmaFloor) || e.Sigma > 2 {
				t.Errorf("Sigma %v, want the line's prediction spread", e.Sigma)
			}
			// A residual of its own: the precision weights.
			r := &estimate.Estimate{CPUSeconds: 8, Sigma: 0.5, Source: estimate.SourceModelResidual}
			rb := &Basis{}
			s.blendOptimizer(s.reads(), r, rb, 1, 0.5)
			if math.Abs(r.CPUSeconds-math.Sqrt(8)) > 1e-9 || rb.Blend != nil {
				t.Errorf("model+residual: %v (pair %+v), want the geometric mean %v and no pair", r.CPUSeconds, rb.Blend, math.Sqrt(8))
			}
		})
	}
	t.Run("not fitted yet: the precision weights", func(t *testing.T) {
		s := newCascade(t, defaults, constModel(0.1))
		e := &estimate.Estimate{CPUSeconds: 8, Sigma: 0.5, Source: estimate.SourceModel}
		s.blendOptimizer(s.reads(), e, &Basis{}, 1, 0.5)
		if math.Abs(e.CPUSeconds-math.Sqrt(8)) > 1e-9 {
			t.Errorf("%v, want %v", e.CPUSeconds, math.Sqrt(8))
		}
	})
}

// On a cluster of an engine the model never saw (its manifest lists only
// Trino), the model's number gets foreignModelSigma and is blended with
// the text model's: before any PrestoDB query finished, the text number
// carries the estimate. A model trained on the engine keeps its own.
func TestModelStageOnAnEngineTheModelNeverSaw(t *testing.T) {
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	trinoOnly := &bundle.Manifest{}
	both := &bundle.Manifest{}
	both.Training.Engines = []string{"presto", "trino"}
	text := &estimate.Estimate{CPUSeconds: 8, Sigma: 0.5, Source: estimate.SourceText}
	for _, c := range []struct {
		name      string
		mf        *bundle.Manifest
		engine    dialect.Engine
		textFar   bool
		wantSigma float64
		nearText  bool
	}{
		{"a Trino-trained model on PrestoDB: the text number carries it", trinoOnly, dialect.Presto, false, 0.5, true},
		{"a text number far from its training is blended with a wider spread", trinoOnly, dialect.Presto, true, 0.5 + textFarSigma, true},
		{"a model trained on PrestoDB keeps its own", both, dialect.Presto, false, defaults.ModelSigma, false},
		{"on Trino nothing changes", trinoOnly, dialect.Trino, false, defaults.ModelSigma, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newCascade(t, defaults, constModel(0.1))
			r := explainedRequest(s, q)
			r.mf, r.engine, r.text, r.textFar = c.mf, c.engine, text, c.textFar
			e, err := modelStage{}.run(s, r)
			if err != nil || e == nil || e.ModelCPUSeconds != 0.1 || math.Abs(e.Sigma-c.wantSigma) > 1e-12 {
				t.Fatalf("got %+v %v; want sigma %v", e, err, c.wantSigma)
			}
			// Precision-weighted in ln: 0.5² against 3² puts 97% on the
			// text's 8 s, 1.5² against 3² 80%.
			if got := e.CPUSeconds > 2; got != c.nearText {
				t.Fatalf("served %v s (model 0.1 s, text 8 s): near the text number %v, want %v", e.CPUSeconds, got, c.nearText)
			}
		})
	}
}

// A target whose manifest entry has a text blend is served as the
// weighted geometric mean of the model's number and the text stage's,
// unless the statement is far from the text model's training.
func TestModelStageBlendsTheTextTargets(t *testing.T) {
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	mf := &bundle.Manifest{Targets: map[string]*bundle.TargetOutput{
		"elapsed": {TextBlend: &bundle.TextBlend{Weight: 0.5, Sigma: 0.4}}}}
	text := &estimate.Estimate{CPUSeconds: 8, Sigma: 0.5, Source: estimate.SourceText,
		Elapsed: estimate.Quantity{Median: 16, Sigma: 0.6}, PeakMemory: estimate.Quantity{Median: 1 << 40, Sigma: 1}}
	for _, c := range []struct {
		far               bool
		wantMedian, sigma float64
	}{{false, 4, 0.4}, {true, 1, 1}} {
		s := newCascade(t, defaults, targetModel(0.1, 1<<20, 1))
		r := explainedRequest(s, q)
		r.mf, r.engine, r.text, r.textFar = mf, dialect.Trino, text, c.far
		e, err := modelStage{}.run(s, r)
		if err != nil || e == nil {
			t.Fatalf("far %v: %v %v", c.far, e, err)
		}
		if !near(e.Elapsed.Median, c.wantMedian, 1e-9) || math.Abs(e.Elapsed.Sigma-c.sigma) > 1e-12 {
			t.Errorf("far %v: elapsed %+v, want %v ±%v", c.far, e.Elapsed, c.wantMedian, c.sigma)
		}
		if e.PeakMemory.Median != 1<<20 || !near(e.CPUSeconds, 0.1, 1e-9) {
			t.Errorf("far %v: memory %+v, CPU %v: want the model's own (no blend for them)", c.far, e.PeakMemory, e.CPUSeconds)
		}
	}
}
