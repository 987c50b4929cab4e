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
	planner, release, ceiling := s.explainSlot(r.planners, false)
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
// planner below the bound was over its ceiling. A background EXPLAIN
// leaves the hot path a reserve (backgroundReserve): it takes a token
// only while the bucket holds more than that.
func (s *Service) explainSlot(planners []string, background bool) (planner string, release func(), ceiling bool) {
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
			if lim != nil && lim.Tokens() < need(lim, background) {
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

// need is the tokens lim must hold for an EXPLAIN to take one: 1 on the
// hot path; in the background 1 more than half the bucket (at least 1), so
// that near the ceiling the decisions the plan can change get the
// EXPLAINs and learning gets what they leave. First come, first served,
// the background EXPLAINs of statements already decided would take the
// tokens the next new shape's decision needs.
func need(lim *rate.Limiter, background bool) float64 {
	if !background {
		return 1
	}
	return max(1, 1+float64(lim.Burst()/2))
}
