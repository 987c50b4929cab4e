package estimator

import (
	"context"
	"math"
	"sync/atomic"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/plan"
	"golang.org/x/time/rate"
)

// explainStage runs the statement's EXPLAIN on the hot path, as the
// caller, on the least busy planner below the EXPLAIN bound and its
// EXPLAIN ceiling (explainSlot),
// and leaves its result for the stages after it (request.planner and res;
// the plan's summed cpuCost in the Basis, for the optimizer calibration).
// An EXPLAIN that fails ends the cascade with its error (fail open). Over
// the bound on every planner it never waits: it answers from the
// statement's or its shape's history (busyEstimate), else with the text
// stage's estimate whatever its interval, else fails with ErrExplainBusy;
// so it does over the ceiling on every planner below the bound (counted:
// ExplainCounts.SkippedCeiling).
type explainStage struct{}

func (explainStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	planner, release, ceiling := s.explainSlot(r.planners, hotNeed(r.text, r.textFar, &s.opts.Cascade))
	if release == nil {
		if ceiling {
			s.count(reasonSkippedCeiling)
		}
		if e := s.busyEstimate(r.reads, r.kind, r.b, r.engine, r.cacheFP(s), r.h); e != nil {
			return e, nil
		}
		if r.text != nil { // straddles a class bound, but better than failing open
			r.text.ExplainSkipped = true
			if r.b != nil {
				r.b.Source = estimate.SourceText
			}
			return r.text, nil
		}
		return nil, ErrExplainBusy
	}
	s.count(reasonHot)
	ectx, cancel := context.WithTimeout(r.ctx, s.opts.ExplainTimeout)
	res, err := s.opts.Explain.ExplainOn(ectx, planner, r.engine, r.sql, r.h)
	cancel()
	release()
	if err != nil {
		return nil, err
	}
	r.planner, r.res = planner, res
	if r.b != nil {
		if c, err := plan.OptimizerCost(r.engine, res.PlanJSON); err == nil {
			r.b.LnCost = math.Log1p(c)
		}
	}
	return nil, nil
}

// explainSlot takes an EXPLAIN slot on the least busy planner below the
// bound and with a token of its ceiling (CascadeOptions.ExplainRate);
// release is nil when there is none, and ceiling then reports that some
// planner below the bound was over its ceiling. need says how full the
// ceiling's bucket must be for this EXPLAIN to take a token (hotNeed,
// backgroundNeed): near the ceiling the tokens go to the EXPLAINs most
// likely to change a decision.
func (s *Service) explainSlot(planners []string, need func(burst int) float64) (planner string, release func(), ceiling bool) {
	limit := int64(s.opts.Cascade.ExplainLimit)
	for range 3 { // a lost race tries again, then gives up
		var best *atomic.Int64
		var bestLim *rate.Limiter
		for _, p := range planners {
			v, _ := s.inflight.LoadOrStore(p, new(atomic.Int64))
			n := v.(*atomic.Int64)
			if limit > 0 && n.Load() >= limit {
				continue
			}
			lim := s.ceiling(p)
			if lim != nil && lim.Tokens() < max(1, need(lim.Burst())) {
				ceiling = true
				continue
			}
			if best == nil || n.Load() < best.Load() {
				best, bestLim, planner = n, lim, p
			}
		}
		if best == nil {
			return "", nil, ceiling
		}
		if cur := best.Load(); (limit <= 0 || cur < limit) && best.CompareAndSwap(cur, cur+1) {
			if bestLim != nil && !bestLim.Allow() { // another took the last token
				best.Add(-1)
				ceiling = true
				continue
			}
			return planner, func() { best.Add(-1) }, false
		}
	}
	return "", nil, ceiling
}

// backgroundNeed is the tokens a background EXPLAIN needs: 1 more than
// half the bucket (at least 1), more than any hot one (hotNeed), so that
// near the ceiling the decisions the plan can change get the EXPLAINs and
// learning gets what they leave. First come, first served, the
// background EXPLAINs of statements already decided would take the
// tokens the next new shape's decision needs.
func backgroundNeed(burst int) float64 { return 1 + float64(burst/2) }

// hotNeed is the tokens a hot-path EXPLAIN needs, by the chance p that
// the text stage's estimate (text; nil: none; far: far from the text
// model's training, its σ no measure) places the statement in the wrong
// class (misplaced): 1 + ⌊burst/2⌋ · (1 − 2p), at least 1 and at most
// backgroundNeed's (so never more than the bucket holds: with a burst of
// 1, every EXPLAIN needs its one token). A statement as likely wrong as
// right (p ≥ ½), or without a text estimate, needs 1 token; one the text
// stage nearly surely places right (p near 0) nearly backgroundNeed's.
// Under the ceiling (the bucket near empty) the statements the text
// stage is likeliest to place wrong are explained, the others placed by
// the text stage; below it (the bucket full) every one is explained. p is
// worked out at the first call, so without a ceiling (no bucket asks)
// never.
func hotNeed(text *estimate.Estimate, far bool, co *CascadeOptions) func(burst int) float64 {
	p := math.NaN()
	return func(burst int) float64 {
		if math.IsNaN(p) {
			p = 0.5
			if text != nil && !far && text.CPUSeconds > 0 && text.Sigma > 0 {
				p = co.misplaced(text)
			}
		}
		return 1 + float64(burst/2)*max(0, 1-2*p)
	}
}

// misplaced is the chance, under e's lognormal CPU time, that the time
// lies on another side of the CPU's decision bounds (the routing
// classes' and decision_bounds') than e's ClassQuantile quantile, by
// which the router places it: 1 − (Φ(z(hi)) − Φ(z(lo))) for that side's
// bounds (around), z(b) = (ln b − ln median)/σ. Under a cautious quantile
// (0.9) a statement whose median lies well below a bound its 90% quantile
// passes is routed above it and most likely wrong (too large a class);
// with the median it would be the chance of lying beyond the nearest
// bound.
func (co *CascadeOptions) misplaced(e *estimate.Estimate) float64 {
	cq := co.ClassQuantile
	if !(cq > 0 && cq < 1) {
		cq = 0.5
	}
	lo, hi := co.around(estimate.TargetCPU, e.Quantile(cq))
	cdf := func(b float64) float64 { // Φ(z(b)): 0 at no bound below, 1 at none above
		if b <= 0 {
			return 0
		}
		return 0.5 * math.Erfc(-math.Log(b/e.CPUSeconds)/e.Sigma/math.Sqrt2)
	}
	return 1 - (cdf(hi) - cdf(lo))
}
