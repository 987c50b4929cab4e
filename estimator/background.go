package estimator

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The background EXPLAINs of the text stage (stage_text.go): when the
// stage answers before the plan, the EXPLAIN and the model run here,
// bounded by the same per-planner EXPLAIN bound (no free slot: skipped),
// and their result fills the estimate and plan caches and, through
// Basis.Pending, the query's history record (Observe, Settle) and its
// feedback record (Settle's Background.Plan).

// maxPending bounds the background results kept for the queries that have
// not completed yet (each may hold a plan). Past it the finished result
// that has waited longest is dropped (its query, if it ever completes
// here, learns without the model's number); only while every entry is
// still running does no background EXPLAIN start (counted as skipped).
// Behind a load balancer about half of a replica's results wait for a
// query whose last page another replica sees: refusing new ones once
// 1,024 had piled up stopped the replica's learning for up to an hour.
const maxPending = 1024

// pendingTTL is how long a finished background result waits for its
// query's outcome (a query that failed before its last page, or completed
// on another replica, never claims it).
const pendingTTL = time.Hour

// Background is the outcome of a background EXPLAIN + model, for the
// query's feedback record.
type Background struct {
	// ModelCPUSeconds is the model's raw prediction (0 when the model did
	// not run); Plan the EXPLAIN JSON (nil when the EXPLAIN failed).
	ModelCPUSeconds float64
	Plan            []byte
	Planner         string
	Explain         time.Duration
	Err             error
	lnModel, lnCost float64
	// modelBy is the model's raw median of each target beyond CPU (0: not
	// predicted), for Basis.ModelBy.
	modelBy [numTargets]float64
}

type pendingEntry struct {
	done chan struct{}
	r    Background
	at   time.Time // when done was closed
}

// pendingSet holds the background results by Basis.Pending token.
type pendingSet struct {
	mu     sync.Mutex
	m      map[string]*pendingEntry
	prefix string
	seq    atomic.Uint64
}

func (p *pendingSet) add() (string, *pendingEntry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pendingEntry{}
		p.prefix = strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	}
	if len(p.m) >= maxPending {
		now := time.Now()
		for k, e := range p.m {
			if !e.at.IsZero() && now.Sub(e.at) > pendingTTL {
				delete(p.m, k)
			}
		}
		if len(p.m) >= maxPending {
			oldest, at := "", now
			for k, e := range p.m {
				if !e.at.IsZero() && e.at.Before(at) {
					oldest, at = k, e.at
				}
			}
			if oldest == "" {
				return "", nil // every entry is still running
			}
			delete(p.m, oldest)
		}
	}
	tok := p.prefix + strconv.FormatUint(p.seq.Add(1), 36)
	e := &pendingEntry{done: make(chan struct{})}
	p.m[tok] = e
	return tok, e
}

func (p *pendingSet) finish(e *pendingEntry, r Background) {
	p.mu.Lock()
	e.r, e.at = r, time.Now()
	p.mu.Unlock()
	close(e.done)
}

// take removes and returns the entry of tok.
func (p *pendingSet) take(tok string) (*pendingEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[tok]
	delete(p.m, tok)
	return e, ok
}

func (p *pendingSet) has(tok string) bool {
	_, ok := p.peek(tok)
	return ok
}

// peek returns the entry of tok and leaves it.
func (p *pendingSet) peek(tok string) (*pendingEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[tok]
	return e, ok
}

// result is e's outcome, once e.done is closed.
func (p *pendingSet) result(e *pendingEntry) Background {
	p.mu.Lock()
	defer p.mu.Unlock()
	return e.r
}

// DropPlans makes background results keep no plan (Background.Plan nil)
// when drop is true: set it when no sink records plans (no feedback log).
// A result waits up to pendingTTL (an hour) for its query's outcome, and
// the outcome of a query whose last page passed through another replica
// never comes here, so a plan kept for nobody is held that long.
func (s *Service) DropPlans(drop bool) { s.dropPlans.Store(drop) }

// BackgroundStats count the background EXPLAINs: run to the end (Done),
// failed (EXPLAIN or model), and Skipped (no EXPLAIN slot free, or too
// many results waiting for their queries).
type BackgroundStats struct {
	Done, Failed, Skipped uint64
}

// BackgroundStats reports the background EXPLAINs' counters.
func (s *Service) BackgroundStats() BackgroundStats {
	return BackgroundStats{Done: s.bgDone.Load(), Failed: s.bgFailed.Load(), Skipped: s.bgSkipped.Load()}
}

// goBackground runs f on a goroutine that Close waits for; false (f not
// run) once the service is closing.
func (s *Service) goBackground(f func()) bool {
	s.bgMu.Lock()
	defer s.bgMu.Unlock()
	if s.bgClosed {
		return false
	}
	s.bgWG.Add(1)
	go func() {
		defer s.bgWG.Done()
		f()
	}()
	return true
}

// stopBackground cancels the background EXPLAINs and waits for them and
// for the observations waiting on them.
func (s *Service) stopBackground() {
	s.bgMu.Lock()
	s.bgClosed = true
	s.bgMu.Unlock()
	s.bgCancel()
	s.bgWG.Wait()
}

// explainBehind starts the EXPLAIN + model of a statement the text stage
// answered, on the least busy planner below the EXPLAIN bound (none free:
// skipped, counted). b (may be nil) gets the Pending token that Observe
// and Settle resolve; key is the estimate cache's key ("" for none).
//
// It runs only when worth its cost (learnReason): for a shape the model
// does not know well yet, or as the drift sample of one it does; not while
// the same statement in the same session (key) is being explained in the
// background for another user (counted as skipped_known), nor over the
// planner's ceiling (skipped_ceiling).
func (s *Service) explainBehind(m *bundle.Model, planners []string, engine dialect.Engine, sql string, h http.Header, kind plan.StatementKind, key string, b *Basis, v *reads) {
	reason := s.learnReason(v, b)
	if reason == reasonSkippedKnown {
		s.count(reasonSkippedKnown)
		return
	}
	if key != "" {
		if _, running := s.bgKeys.LoadOrStore(key, struct{}{}); running {
			s.count(reasonSkippedKnown)
			return
		}
	}
	unkey := func() {
		if key != "" {
			s.bgKeys.Delete(key)
		}
	}
	planner, release, ceiling := s.explainSlot(planners, backgroundNeed)
	if release == nil {
		unkey()
		if ceiling {
			s.count(reasonSkippedCeiling)
		}
		s.bgSkipped.Add(1)
		return
	}
	if m != nil && !m.Acquire() {
		unkey()
		release()
		s.bgSkipped.Add(1)
		return
	}
	done := func() {
		unkey()
		release()
		if m != nil {
			m.Release()
		}
	}
	var tok string
	var pe *pendingEntry
	if b != nil {
		if tok, pe = s.pending.add(); pe == nil {
			done()
			s.bgSkipped.Add(1)
			return
		}
	}
	ok := s.goBackground(func() {
		defer done()
		s.count(reason)
		r := s.runBehind(m, planner, engine, sql, h, kind, key)
		if r.Err != nil {
			s.bgFailed.Add(1)
		} else {
			s.bgDone.Add(1)
		}
		if pe != nil {
			s.pending.finish(pe, r)
		}
	})
	if !ok {
		done()
		if pe != nil {
			s.pending.take(tok)
		}
		return
	}
	if b != nil {
		b.Pending = tok
	}
}

// runBehind is one background EXPLAIN + model.
func (s *Service) runBehind(m *bundle.Model, planner string, engine dialect.Engine, sql string, h http.Header, kind plan.StatementKind, key string) Background {
	r := Background{Planner: planner, lnModel: math.NaN(), lnCost: math.NaN()}
	ctx, cancel := context.WithTimeout(s.bgCtx, s.opts.ExplainTimeout)
	defer cancel()
	res, err := s.opts.Explain.ExplainOn(ctx, planner, engine, sql, h)
	if err != nil {
		r.Err = err
		return r
	}
	r.Explain = res.Wall
	if !s.dropPlans.Load() {
		r.Plan = res.PlanJSON
	}
	if c, err := plan.OptimizerCost(engine, res.PlanJSON); err == nil {
		r.lnCost = math.Log1p(c)
	}
	var e *estimate.Estimate
	if s.scoreHook != nil {
		e, err = s.scoreHook(res.PlanJSON)
	} else if m != nil {
		e, err = s.estimatePlan(ctx, m, res.PlanJSON)
	} else {
		err = ErrNoModel
	}
	if err != nil {
		r.Err = err
		return r
	}
	e.Statement, e.Planner = kind.String(), planner
	e.Explain, e.ExplainQueryID = r.Explain, res.QueryID
	if key != "" {
		s.opts.Cache.Set(key, *e)
		if s.opts.PlanCache != nil {
			s.opts.PlanCache.Set(key, res.PlanJSON)
		}
	}
	r.ModelCPUSeconds = e.CPUSeconds
	for _, t := range beyondCPU {
		if q := e.Of(t); q.Known() {
			r.modelBy[t] = q.Median
		}
	}
	if e.CPUSeconds > 0 {
		r.lnModel = math.Log(e.CPUSeconds)
	}
	return r
}

// Settle waits, at most until ctx ends, for the background EXPLAIN +
// model behind b (Basis.Pending), fills b's LnModel, ModelBy and LnCost from it and
// returns its outcome (for the query's feedback record: the plan and the
// model's number). ok is false when b has none on this replica (none
// started, another replica's, already settled, expired) or ctx ended
// first; b.Pending is cleared either way, so Observe then learns from b as
// it is.
func (s *Service) Settle(ctx context.Context, b *Basis) (bg Background, ok bool) {
	if b == nil || b.Pending == "" {
		return Background{}, false
	}
	e, found := s.pending.take(b.Pending)
	b.Pending = ""
	if !found {
		return Background{}, false
	}
	select {
	case <-e.done:
	case <-ctx.Done():
		return Background{}, false
	}
	r := s.pending.result(e)
	r.fill(b)
	return r, true
}

// fill sets b's LnModel, LnCost and ModelBy from what r found.
func (r *Background) fill(b *Basis) {
	if !math.IsNaN(r.lnModel) {
		b.LnModel = r.lnModel
	}
	if !math.IsNaN(r.lnCost) {
		b.LnCost = r.lnCost
	}
	for _, t := range beyondCPU {
		if r.modelBy[t] > 0 {
			b.ModelBy[t] = r.modelBy[t]
		}
	}
}

// SettleThen is Settle on a goroutine that Close waits for, bounded by
// the EXPLAIN timeout (plus inference), then then(bg, ok); it reports false
// (then not called) when b has nothing pending here or the service is
// closing, so the caller carries on at once.
func (s *Service) SettleThen(b *Basis, then func(bg Background, ok bool)) bool {
	if b == nil || b.Pending == "" || !s.pending.has(b.Pending) {
		if b != nil {
			b.Pending = ""
		}
		return false
	}
	return s.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.settleTimeout())
		defer cancel()
		bg, ok := s.Settle(ctx, b)
		then(bg, ok)
	})
}

// settleTimeout bounds how long Observe waits for a background result
// (the EXPLAIN's own bound, plus the model's inference).
func (s *Service) settleTimeout() time.Duration { return s.opts.ExplainTimeout + 5*time.Second }
