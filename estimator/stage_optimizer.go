package estimator

import (
	"math"

	"github.com/prestroid/prestroid/estimate"
)

// optimizerStage is the cascade's last: with the model missing or failed
// (request.merr), Trino's plan cost mapped to seconds by the deployment's
// optimizer calibration (optimizerEstimate). While the calibration is not
// fitted the cascade fails open with the model's error, wrapped in an
// UnplacedError when the plan's cost can still teach the calibration once
// the query completes.
type optimizerStage struct{}

func (optimizerStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if e := s.optimizerEstimate(r.b); e != nil {
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
func (s *Service) optimizerEstimate(b *Basis) *estimate.Estimate {
	secs, sd, ok := s.calibrated(b)
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
func (s *Service) calibrated(b *Basis) (secs, sd float64, ok bool) {
	if b == nil || math.IsNaN(b.LnCost) {
		return 0, 0, false
	}
	c, ok := s.learn.get(globalKey(keyOptimizer, b.Engine))
	if !ok || c.Count < uint64(s.opts.Cascade.MinCalibration) {
		return 0, 0, false
	}
	a, slope, sd, ok := c.Line()
	if !ok {
		return 0, 0, false
	}
	return math.Exp(a + slope*b.LnCost), sd, true
}
