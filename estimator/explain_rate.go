package estimator

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"time"

	"golang.org/x/time/rate"
)

// Why an EXPLAIN ran, or did not: the reasons of ExplainCounts.
type explainReason int

const (
	reasonHot            explainReason = iota // on the hot path: the plan could change the decision
	reasonLearn                               // in the background: a shape with few explained runs or wide residuals
	reasonDrift                               // in the background: the drift sample of a well-known shape
	reasonSkippedCeiling                      // none: the planner's ExplainRate ceiling (hot or background)
	reasonSkippedKnown                        // none in the background: a well-known shape, or the same plan already being explained
	numExplainReasons
)

// ExplainCounts count the EXPLAINs the cascade sent to a planner, by
// reason (Hot, Learn, Drift: each one round trip; a cached estimate runs
// none), and those it did not send: SkippedCeiling (over the planner's
// ExplainRate: the hot path answered without the plan, or the background
// EXPLAIN was dropped) and SkippedKnown (a background EXPLAIN not worth its
// cost: the shape is well known and not drawn for the drift sample, or
// another user's identical statement is being explained).
type ExplainCounts struct {
	Hot, Learn, Drift, SkippedCeiling, SkippedKnown uint64
}

// ExplainCounts reports the EXPLAINs by reason since the service started.
func (s *Service) ExplainCounts() ExplainCounts {
	c := &s.explains
	return ExplainCounts{Hot: c[reasonHot].Load(), Learn: c[reasonLearn].Load(), Drift: c[reasonDrift].Load(),
		SkippedCeiling: c[reasonSkippedCeiling].Load(), SkippedKnown: c[reasonSkippedKnown].Load()}
}

func (s *Service) count(r explainReason) { s.explains[r].Add(1) }

// ceiling is planner's token bucket of EXPLAINs (CascadeOptions.ExplainRate),
// nil without a ceiling.
func (s *Service) ceiling(planner string) *rate.Limiter {
	co := &s.opts.Cascade
	if co.ExplainRate <= 0 {
		return nil
	}
	if v, ok := s.ceilings.Load(planner); ok {
		return v.(*rate.Limiter)
	}
	burst := co.ExplainBurst
	if burst <= 0 {
		burst = max(1, int(math.Ceil(co.ExplainRate)))
	}
	v, _ := s.ceilings.LoadOrStore(planner, rate.NewLimiter(rate.Limit(co.ExplainRate), burst))
	return v.(*rate.Limiter)
}

// learnReason says whether the background EXPLAIN of a statement whose
// Basis is b (nil: no history) is worth its cost (CascadeOptions.LearnMinRuns,
// LearnMaxSpread, DriftSample): reasonLearn for a shape the model does not
// know well yet (fewer explained runs than LearnMinRuns, a residual spread
// above LearnMaxSpread; every shape without the rule or without a
// history), reasonDrift for a well-known shape drawn for the drift sample,
// reasonSkippedKnown otherwise. It reads the shape's CPU residual (one
// history read, through v).
func (s *Service) learnReason(v *reads, b *Basis) explainReason {
	co := &s.opts.Cascade
	if co.LearnMinRuns <= 0 || b == nil || s.learn == nil || b.Shape == "" {
		return reasonLearn
	}
	st, ok := v.get(shapeKey(keyResidual, b.Shape))
	if !ok || st.Count < uint64(co.LearnMinRuns) {
		return reasonLearn
	}
	if co.LearnMaxSpread > 0 && math.Sqrt(max(st.Var, 0)) > co.LearnMaxSpread {
		return reasonLearn
	}
	draw := func() float64 { return driftDraw(b.Exact, time.Now()) }
	if s.drift != nil {
		draw = s.drift
	}
	if co.DriftSample > 0 && draw() < co.DriftSample {
		return reasonDrift
	}
	return reasonSkippedKnown
}

// driftDraw is the drift sample's draw for the statement whose history key
// is exact, at now: uniform in [0, 1) over statements, the same for every
// run of one statement within the hour. A repeat (by another user, say)
// then shares the first run's draw: drawn, the first run's EXPLAIN filled
// the estimate cache and the repeat is answered from it; not drawn,
// neither is the repeat. A fresh draw per run explained 5% of the repeats
// of statements the history had answered unexplained (bench replay --mix:
// one of 78 repeats by another user).
func driftDraw(exact string, now time.Time) float64 {
	h := fnv.New64a()
	h.Write([]byte(exact))
	var hour [8]byte
	binary.LittleEndian.PutUint64(hour[:], uint64(now.Unix()/3600))
	h.Write(hour[:])
	return float64(h.Sum64()>>11) / (1 << 53)
}
