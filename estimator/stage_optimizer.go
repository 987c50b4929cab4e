package estimator

import (
	"math"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// optimizerStage is the cascade's last: with the model missing or failed
// (request.merr), Trino's plan cost mapped to seconds by the deployment's
// optimizer calibration (optimizerEstimate). While the calibration is not
// fitted the cascade fails open with the model's error, wrapped in an
// UnplacedError when the plan's cost can still teach the calibration once
// the query completes.
type optimizerStage struct{}

func (optimizerStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if e := s.optimizerEstimate(r.reads, r.b); e != nil {
		r.explained(e).Plan = r.res.PlanJSON
		return e, nil
	}
	if r.b != nil && !math.IsNaN(r.b.LnCost) {
		// Nothing places this query (fail open), but its plan's cost and,
		// once it completes, its CPU time teach the optimizer calibration.
		return nil, &UnplacedError{Err: r.merr, Basis: r.b}
	}
	return nil, r.merr
}

// optimizerEstimate maps the plan's cost to seconds with the calibration
// of its engine (Trino's cpuCost; PrestoDB's row count estimates, which
// is all its plans give: planCost); nil while it is not fitted (or there
// is no plan cost).
func (s *Service) optimizerEstimate(v *reads, b *Basis) *estimate.Estimate {
	secs, sd, ok := s.calibrated(v, b)
	if !ok {
		return nil
	}
	b.Source = estimate.SourceOptimizer
	return &estimate.Estimate{Estimated: true, Source: estimate.SourceOptimizer, OptimizerCPUSeconds: secs,
		CPUSeconds: secs, Sigma: max(sd, s.opts.Cascade.ModelSigma)}
}

// calibrated maps the plan cost in b to CPU seconds with the optimizer
// calibration and gives the fit's residual spread; ok is false while the
// calibration is not fitted (or there is no plan cost).
func (s *Service) calibrated(v *reads, b *Basis) (secs, sd float64, ok bool) {
	if b == nil || math.IsNaN(b.LnCost) {
		return 0, 0, false
	}
	c, ok := v.get(globalKey(keyOptimizer, b.Engine))
	if !ok || c.Count < uint64(s.opts.Cascade.MinCalibration) {
		return 0, 0, false
	}
	ln, sd, ok := linePrediction(c, b.LnCost, s.opts.Cascade.Alpha)
	if !ok {
		return 0, 0, false
	}
	return math.Exp(ln), sd, true
}

// linePrediction is what the least-squares line of the statistics c
// (history.Stats.Line, fitted with recency weight slowAlpha(alpha))
// predicts at x, with the standard deviation of a new point there: not
// the line's residual spread alone, which is the spread of the points it
// was fitted on around it, but the prediction error of a least-squares
// line, s²·(1 + 1/n + (x − x̄)²/(n·Var x)) with s² the residual variance
// unbiased by n/(n−2) and n the fit's effective count (meanVariance).
// A young fit, or a statement far from the costs or sizes it was fitted
// on, is then weighed as what it is: a line through a few points, and an
// extrapolation.
func linePrediction(c history.Stats, x, alpha float64) (y, sd float64, ok bool) {
	a, slope, spread, ok := c.Line()
	if !ok {
		return 0, 0, false
	}
	n := 1 / meanVariance(c.Count, slowAlpha(alpha))
	s2 := spread * spread * n / max(n-2, 1)
	dx := x - c.MeanX
	return a + slope*x, math.Sqrt(s2 * (1 + 1/n + dx*dx/(n*c.VarX))), true
}
