package estimator

import (
	"errors"
	"math"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

func TestOptimizerStage(t *testing.T) {
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	calibrate := func(s *Service) { // actual seconds = cost/1000
		for i := range defaults.MinCalibration {
			cost := math.Pow(10, 3+float64(i%4))
			s.Observe(&Basis{Exact: "x:cal", Shape: "s:cal", LnModel: math.NaN(), LnText: math.NaN(), LnCost: math.Log1p(cost)}, estimate.Actual{CPUSeconds: cost / 1000})
		}
		s.Flush()
	}
	modelErr := errors.New("model failed")
	t.Run("the calibrated optimizer's cost answers, with the plan", func(t *testing.T) {
		s := newCascade(t, defaults, nil)
		calibrate(s)
		r := explainedRequest(s, q)
		r.merr, r.b.LnCost = modelErr, math.Log1p(50000)
		e, err := optimizerStage{}.run(s, r)
		if err != nil || e == nil || e.Source != estimate.SourceOptimizer || math.Abs(e.CPUSeconds/50-1) > 0.05 || e.Sigma < defaults.ModelSigma {
			t.Fatalf("got %+v %v; want the optimizer's ≈ 50 s with at least the model's uncertainty", e, err)
		}
		if e.OptimizerCPUSeconds != e.CPUSeconds || string(e.Plan) != `{"plan":1}` || e.Planner != "http://planner" || r.b.Source != estimate.SourceOptimizer {
			t.Fatalf("got %+v, basis %+v; want the optimizer's number, the plan and the planner", e, r.b)
		}
	})
	t.Run("not calibrated yet: fails open, the plan's cost still to learn from", func(t *testing.T) {
		s := newCascade(t, defaults, nil)
		r := explainedRequest(s, q)
		r.merr, r.b.LnCost = modelErr, math.Log1p(50000)
		e, err := optimizerStage{}.run(s, r)
		var ue *UnplacedError
		if e != nil || !errors.As(err, &ue) || ue.Basis != r.b || !errors.Is(err, modelErr) {
			t.Fatalf("got %+v %v; want an UnplacedError with the basis, wrapping the model's error", e, err)
		}
	})
	t.Run("no plan cost to learn from: the model's error", func(t *testing.T) {
		s := newCascade(t, defaults, nil)
		r := explainedRequest(s, q)
		r.merr = modelErr
		if e, err := (optimizerStage{}).run(s, r); e != nil || err != modelErr {
			t.Fatalf("got %+v %v; want the model's error itself", e, err)
		}
	})
}
