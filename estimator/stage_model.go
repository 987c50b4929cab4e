package estimator

import (
	"math"

	"github.com/prestroid/prestroid/estimate"
)

// modelStage scores the hot-path EXPLAIN's plan with the model
// (estimatePlan; the scoreHook in tests), caches its raw estimate and the
// plan under the estimate cache's key, and answers with the estimate
// corrected by the deployment's global offset and the shape's residual
// (correct: source model, or model+residual), the calibrated optimizer's
// number beside it. Without a model, or when it fails on the plan, it
// passes with request.merr to the optimizer stage.
type modelStage struct{}

func (modelStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if r.merr != nil {
		return nil, nil
	}
	var e *estimate.Estimate
	var err error
	if s.scoreHook != nil {
		e, err = s.scoreHook(r.res.PlanJSON)
	} else {
		e, err = s.estimatePlan(r.ctx, r.m, r.res.PlanJSON)
	}
	if err != nil {
		r.merr = err
		return nil, nil
	}
	r.explained(e)
	if r.key != "" {
		s.opts.Cache.Set(r.key, *e)
		if s.opts.PlanCache != nil {
			s.opts.PlanCache.Set(r.key, r.res.PlanJSON)
		}
	}
	e.Plan = r.res.PlanJSON
	s.correct(e, r.b)
	e.OptimizerCPUSeconds, _, _ = s.calibrated(r.b)
	return e, nil
}

// correct turns the model's raw estimate into the cascade's: the global
// offset (shrunk toward 0), then the shape's residual (shrunk toward the
// global offset), with the uncertainty of each.
func (s *Service) correct(e *estimate.Estimate, b *Basis) {
	e.ModelCPUSeconds, e.Source = e.CPUSeconds, estimate.SourceModel
	co := &s.opts.Cascade
	e.Sigma = co.ModelSigma
	if b == nil {
		return
	}
	b.Source = estimate.SourceModel
	if !(e.CPUSeconds > 0) {
		return
	}
	lnRaw := math.Log(e.CPUSeconds)
	b.LnModel = lnRaw
	off, sigma, shaped := s.modelOffset(b)
	if shaped {
		e.Source = estimate.SourceModelResidual
	}
	e.CPUSeconds, e.Sigma = math.Exp(lnRaw+off), sigma
	b.Source = e.Source
}
