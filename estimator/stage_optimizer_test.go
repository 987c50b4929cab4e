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

// The calibration's spread at a plan cost is a new statement's prediction
// error there, as ordinary least squares gives it: wider than the fitted
// points' residual spread, the more so for a young fit and for a cost
// beyond those it was fitted on (an sf10 plan on a line fitted at tiny).
func TestCalibrationSpreadIsAPredictionError(t *testing.T) {
	s := newCascade(t, defaults, nil)
	var xs, ys []float64
	for i := range 12 {
		x := 10 + float64(i%4)                        // ln(1+cost) 10–13
		y := x - 16 + 0.3*float64(1-2*(i%2))*(1+x/20) // ln CPU, ±0.3 around the line
		xs, ys = append(xs, x), append(ys, y)
		s.Observe(&Basis{Exact: "x:cal", Shape: "s:cal", LnModel: math.NaN(), LnText: math.NaN(), LnCost: x}, estimate.Actual{CPUSeconds: math.Exp(y)})
	}
	s.Flush()
	// Ordinary least squares on the points themselves.
	n := float64(len(xs))
	var mx, my float64
	for i := range xs {
		mx, my = mx+xs[i]/n, my+ys[i]/n
	}
	var sxx, sxy float64
	for i := range xs {
		sxx, sxy = sxx+(xs[i]-mx)*(xs[i]-mx), sxy+(xs[i]-mx)*(ys[i]-my)
	}
	slope := sxy / sxx
	var sse float64
	for i := range xs {
		r := ys[i] - (my + slope*(xs[i]-mx))
		sse += r * r
	}
	for _, x := range []float64{11.5, 16} { // inside the fitted costs; 12x beyond the largest
		secs, sd, ok := s.calibrated(s.reads(), &Basis{LnCost: x})
		want := math.Sqrt(sse / (n - 2) * (1 + 1/n + (x-mx)*(x-mx)/sxx))
		if !ok || math.Abs(math.Log(secs)-(my+slope*(x-mx))) > 1e-9 || math.Abs(sd-want) > 1e-9 {
			t.Fatalf("at ln cost %g: %.4g s, spread %.4f; want %.4g s, spread %.4f (the points' residual spread: %.4f)",
				x, secs, sd, math.Exp(my+slope*(x-mx)), want, math.Sqrt(sse/n))
		}
	}
}
