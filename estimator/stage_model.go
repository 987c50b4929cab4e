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
	secs, sd, ok := s.calibrated(r.b)
	if ok {
		e.OptimizerCPUSeconds = secs
		blendOptimizer(e, secs, sd)
	}
	return e, nil
}

// blendOptimizer combines the model's corrected estimate e with the
// calibrated optimizer's number (secs, its fit's residual spread sd) on
// the same plan: in ln CPU, weighted by precision (e.Sigma² against sd²),
// both spreads learned on this deployment. The two err differently — the
// Tree-CNN reads the plan's shape, the optimizer's cost grows with the
// data a plan reads — and their mean is better than either: on held-out
// TPC templates over Parquet (sf10), first sight, the model alone was
// 2.57× off in the median (p90 10.0), the calibrated optimizer 2.01×
// (4.14), their geometric mean 1.97× (4.55), and on the statements of at
// least 1 s CPU 1.19× (2.10) against 1.97× and 2.01× (prestroid bench
// served, models/README.md "Served on Parquet"). A shape with residuals of its own
// (model+residual, a small spread) keeps nearly its own number. The
// served Sigma is the smaller of the two (no narrower: the errors are not
// independent).
func blendOptimizer(e *estimate.Estimate, secs, sd float64) {
	if !(e.CPUSeconds > 0) || !(secs > 0) {
		return
	}
	vm := max(e.Sigma*e.Sigma, sigmaFloor*sigmaFloor)
	vo := max(sd*sd, sigmaFloor*sigmaFloor)
	w := vm / (vm + vo) // the optimizer's weight
	e.CPUSeconds = math.Exp((1-w)*math.Log(e.CPUSeconds) + w*math.Log(secs))
	e.Sigma = math.Sqrt(min(vm, vo))
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
