package estimator

import (
	"math"
	"net/http"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// historyStage sets up what the query's outcome teaches the history
// (request.b) and reads the statement's own history once, every target's
// in one store call (request.exact). It answers when the CPU time's record
// is confident (at least MinCount runs, spread at most MaxSpread): the
// recency-weighted value of each target it holds, no EXPLAIN, with the
// plan of the statement's last EXPLAIN when the plan cache still holds it,
// and intervals at least the run-to-run noise's (historyEstimate). Without
// a history, or for EXECUTE (its text does not say what runs), it passes
// with no Basis.
type historyStage struct{}

func (historyStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if s.learn == nil || r.kind == plan.StmtExecute {
		return nil, nil
	}
	co := &s.opts.Cascade
	r.basis = Basis{LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN(), LnRows: math.NaN()}
	r.b = &r.basis
	r.b.Exact, r.b.Shape, r.b.Family = historyKeys(r.sql, r.engine, r.fingerprint(), r.h)
	r.b.Engine = r.engine
	// One store call: the statement's runs, the run-to-run noise
	// historyEstimate needs when its cached floor is stale, and the
	// history's interval factors (calibrate: its own and the shared one,
	// per target).
	r.reads = s.reads()
	r.reads.pending = append(s.learn.staleFloors(time.Now()), coverKeysOf(r.engine).history...)
	r.exact = r.reads.runs(r.b.Exact)
	if x := r.exact[estimate.TargetCPU]; x.Count >= uint64(max(co.MinCount, 1)) && x.Spread() <= co.MaxSpread {
		e := s.historyEstimate(r.reads, r.kind, r.b, r.exact, true, 0)
		s.cachedPlan(e, r.engine, r.cacheFP(s), r.h)
		return e, nil
	}
	s.planAfterHistory(r)
	return nil, nil
}

// historyEstimate serves a statement from its history rs (the CPU time's
// Count > 0): per target it holds, its mean, with the σ of its next run
// about it (runNoise: its spread shrunk toward the target's learned
// run-to-run noise, at least that noise, plus the mean's own
// uncertainty), at least atLeast. own says rs are the statement's own
// runs, whose mean is corrected by its first run's share (runsMean); a
// shape's or family's runs are each statement's first as often as not.
func (s *Service) historyEstimate(v *reads, kind plan.StatementKind, b *Basis, rs runs, own bool, atLeast float64) *estimate.Estimate {
	b.Source = estimate.SourceHistory
	e := &estimate.Estimate{Estimated: true, Statement: kind.String(), Source: estimate.SourceHistory}
	for _, t := range estimate.Targets {
		if st := rs[t]; st.Count > 0 {
			u, r := s.runNoise(v, t, st, 0)
			e.Set(t, estimate.Quantity{Median: math.Exp(s.ownMean(v, t, st, own)), Sigma: max(math.Sqrt(u+r), atLeast)})
		}
	}
	return e
}

// standIn is the pre-plan stage's history estimate (estimator.explain
// when-uncertain or never): the statement's own runs (exact, as historyStage
// read them) when they are too few (or too spread) to answer alone, else
// its shape's (the same query with other literals), nil when there are
// neither. Not its family's (other sessions): a run with other literals
// answering alone may be far off (tpcds/q40 at sf10: 0.14 s and 2.8 s),
// and the family's residuals already correct the text estimate. Per target the runs hold, its Sigma is what the learned
// run-to-run noise predicts of the next run (runNoise) and, for other
// literals (which may cost more), at least the shape's spread shrunk
// toward ModelSigma by Shrink observations.
func (s *Service) standIn(v *reads, kind plan.StatementKind, b *Basis, exact runs) *estimate.Estimate {
	if b == nil {
		return nil
	}
	co := &s.opts.Cascade
	// Reruns of the statement: the learned run-to-run noise alone (a
	// prior of max_spread, the most a trusted history may spread, made an
	// 80% interval of a statement run once hold 98% of its next runs on
	// Parquet); other literals may cost more: the model's prior.
	rs, prior := exact, 0.0
	if rs[estimate.TargetCPU].Count == 0 {
		rs, prior = v.runs(b.Shape), co.ModelSigma
		if rs[estimate.TargetCPU].Count == 0 {
			return nil
		}
	}
	e := &estimate.Estimate{Estimated: true, Statement: kind.String(), Source: estimate.SourceHistory}
	for _, t := range estimate.Targets {
		if st := rs[t]; st.Count > 0 {
			u, r := s.runNoise(v, t, st, prior)
			e.Set(t, estimate.Quantity{Median: math.Exp(s.ownMean(v, t, st, prior == 0)), Sigma: math.Sqrt(u + r)})
		}
	}
	return e
}

// cachedPlan gives an estimate made without EXPLAIN the plan of the
// statement's last EXPLAIN when the plan cache still holds it (for the
// feedback log's training records; best-effort).
func (s *Service) cachedPlan(e *estimate.Estimate, engine dialect.Engine, fp string, h http.Header) {
	if s.opts.PlanCache == nil || s.scoreHook != nil {
		return
	}
	m, err := s.acquire()
	if err != nil {
		return
	}
	defer m.Release()
	e.Plan, _ = s.opts.PlanCache.Get(estimateKey(m.ID(), engine, fp, h))
}

// busyEstimate stands in for an EXPLAIN the bound refused: the statement's
// history, however short, else its shape's, with at least the model's
// uncertainty (other literals may cost more) and its CPU time's spread;
// nil when there is neither.
func (s *Service) busyEstimate(v *reads, kind plan.StatementKind, b *Basis, engine dialect.Engine, fp string, h http.Header) *estimate.Estimate {
	if b == nil {
		return nil
	}
	for _, k := range []string{b.Exact, b.Shape, b.Family} {
		if k == "" {
			continue
		}
		if rs := v.runs(k); rs[estimate.TargetCPU].Count > 0 {
			e := s.historyEstimate(v, kind, b, rs, k == b.Exact, math.Max(rs[estimate.TargetCPU].Spread(), s.opts.Cascade.ModelSigma))
			e.ExplainSkipped = true
			s.cachedPlan(e, engine, fp, h)
			return e
		}
	}
	return nil
}

// ownMean is what runs st of target t predict of the next run's log: for
// the statement's own runs (own), their mean corrected by the first run's
// share (runsMean); else their mean.
func (s *Service) ownMean(v *reads, t estimate.Target, st history.Stats, own bool) float64 {
	if !own {
		return st.Mean
	}
	return runsMean(st, s.opts.Cascade.Alpha, s.firstRunDrift(v, t))
}
