package estimator

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

// The text stage (issue 17 item 6): before paying for an EXPLAIN, the
// bundle's text model (bundle.Model.TextQuantiles, ~0.1 ms) gives quantiles
// of the CPU time from the SQL text and session alone. When the
// deployment lets it (CascadeOptions.Explain) and, for
// ExplainWhenUncertain, when its interval lies inside one routing class
// (so no plan-based number could change the class), it answers at once
// with source text; the EXPLAIN and the model then run in the background,
// bounded by the same per-planner EXPLAIN bound (no free slot: skipped),
// and their result fills the estimate and plan caches and, through
// Basis.Pending, the query's history record (Observe, Settle) and its
// feedback record (Settle's Background.Plan).

// ExplainMode says when the cascade pays for an EXPLAIN on the hot path
// (estimator.explain).
type ExplainMode uint8

const (
	// ExplainAlways: every statement the history (or the estimate cache)
	// cannot answer is explained before it is sent; the text stage is not
	// consulted on the hot path.
	ExplainAlways ExplainMode = iota
	// ExplainWhenUncertain: the text stage answers when its interval lies
	// inside one class (CascadeOptions.ClassBounds); when it straddles a
	// bound, EXPLAIN as ExplainAlways does.
	ExplainWhenUncertain
	// ExplainNever: the text stage answers whenever the bundle has a text
	// model; EXPLAIN + model on the hot path only without one.
	ExplainNever
)

var explainModeNames = [...]string{ExplainAlways: "always", ExplainWhenUncertain: "when-uncertain", ExplainNever: "never"}

func (m ExplainMode) String() string {
	if int(m) < len(explainModeNames) {
		return explainModeNames[m]
	}
	return "unknown"
}

// ParseExplainMode reads estimator.explain's value; empty is ExplainAlways.
func ParseExplainMode(s string) (ExplainMode, error) {
	if s == "" {
		return ExplainAlways, nil
	}
	for i, n := range explainModeNames {
		if n == s {
			return ExplainMode(i), nil
		}
	}
	return 0, fmt.Errorf("estimator: explain mode %q: want always, when-uncertain or never", s)
}

// maxPending bounds the background results kept for the queries that have
// not completed yet (each may hold a plan); past it no background EXPLAIN
// starts (counted as skipped).
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
			return "", nil
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
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.m[tok]
	return ok
}

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

// HasText reports whether the served model has a text stage.
func (s *Service) HasText() bool {
	if s.textHook != nil {
		return true
	}
	m, err := s.acquire()
	if err != nil {
		return false
	}
	defer m.Release()
	return m.HasText()
}

// TextContext is the text model's view of the caller's session h: its
// catalog, schema and session properties (X-Trino-Session, URL-decoded).
func TextContext(h http.Header) featurize.TextContext {
	tc := featurize.TextContext{Catalog: h.Get("X-Trino-Catalog"), Schema: h.Get("X-Trino-Schema")}
	for _, v := range h.Values("X-Trino-Session") {
		for _, kv := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
			if !ok || k == "" {
				continue
			}
			if u, err := url.QueryUnescape(val); err == nil {
				val = u
			}
			if tc.Session == nil {
				tc.Session = map[string]string{}
			}
			tc.Session[k] = val
		}
	}
	return tc
}

// textEstimate runs the text model: nil without one (or when it fails).
// The estimate is the log-normal whose median is the model's middle
// quantile and whose Sigma is the wider of its two sides, so that the
// estimate's quantiles at the model's outer ones cover the model's
// interval.
func (s *Service) textEstimate(m *bundle.Model, kind plan.StatementKind, sql string, h http.Header) *estimate.Estimate {
	var qs, secs []float64
	id := ""
	if s.textHook != nil {
		qs, secs = s.textHook(sql)
	} else {
		if m == nil {
			return nil
		}
		var ok bool
		var err error
		if qs, secs, ok, err = m.TextQuantiles(sql, TextContext(h)); !ok || err != nil {
			return nil
		}
		id = m.ID()
	}
	if len(qs) == 0 || len(qs) != len(secs) {
		return nil
	}
	mid := 0
	for i, q := range qs {
		if math.Abs(q-0.5) < math.Abs(qs[mid]-0.5) {
			mid = i
		}
	}
	med := secs[mid]
	if !(med > 0) {
		med = minSeconds
	}
	sigma := 0.0
	if lo := len(qs) - 1; lo > 0 {
		if qs[0] < 0.5 && secs[0] > 0 {
			sigma = math.Max(sigma, math.Log(med/secs[0])/-estimate.NormalQuantile(qs[0]))
		}
		if qs[lo] > 0.5 && secs[lo] > 0 {
			sigma = math.Max(sigma, math.Log(secs[lo]/med)/estimate.NormalQuantile(qs[lo]))
		}
	}
	return &estimate.Estimate{Estimated: true, Statement: kind.String(), Source: estimate.SourceText, Model: id,
		CPUSeconds: med, Sigma: max(sigma, sigmaFloor)}
}

// correctText applies what the history learned about the text model on
// this deployment to its raw estimate e: the global offset, then the
// shape's residual (as correct does for the model), and records the raw
// median in b (when not nil) so that the query's outcome teaches both.
// Without the shape's residuals e keeps at least the model's own spread.
func (s *Service) correctText(e *estimate.Estimate, b *Basis) {
	if b == nil {
		return
	}
	lnRaw, sigma0 := math.Log(e.CPUSeconds), e.Sigma
	b.LnText = lnRaw
	off, sigma, shaped := s.offset(keyText, shapeKey(keyTextRes, b.Shape), sigma0)
	if !shaped {
		sigma = max(sigma, sigma0)
	}
	e.CPUSeconds, e.Sigma = math.Exp(lnRaw+off), max(sigma, sigmaFloor)
}

// decides reports whether the estimate e, made before the plan, may route
// the query under the cascade's ExplainMode: always for ExplainNever; for
// ExplainWhenUncertain when the plan could not change its class, that is
//
//   - its interval — from the lower of its 10% and (1 − ClassQuantile)
//     quantiles to the higher of its 90% and ClassQuantile quantiles, so
//     that the quantile routing picks the class with lies inside it —
//     falls in one class of ClassBounds (e knows the class), or
//   - the class the plan's estimate would be routed to is e's own for every
//     plan estimate e finds plausible (the plan knows no better): after
//     EXPLAIN the model's estimate m, whose own uncertainty is sigmaAfter()
//     (called only when the interval straddles a bound),
//     routes by its ClassQuantile quantile m·exp(z·sigmaAfter); m is the
//     truth as e sees it times the model's error, e's interval widened to
//     √(σ² + sigmaAfter²). Under a cautious quantile (0.9) a query whose
//     interval straddles a bound but lies mostly above it goes to the
//     upper class whatever its plan says, and is not explained for nothing.
func (co *CascadeOptions) decides(e *estimate.Estimate, sigmaAfter func() float64) bool {
	switch co.Explain {
	case ExplainNever:
		return true
	case ExplainWhenUncertain:
	default:
		return false
	}
	cq := co.ClassQuantile
	if !(cq > 0 && cq < 1) {
		cq = 0.5 // zero: the median, as in estimate.Estimate.Quantile
	}
	z := estimate.NormalQuantile
	zlo, zhi := z(min(estimate.IntervalQuantile, 1-cq)), z(max(1-estimate.IntervalQuantile, cq))
	class := func(x float64) int { return estimate.Class(co.ClassBounds, x) }
	if class(e.CPUSeconds*math.Exp(zlo*e.Sigma)) == class(e.CPUSeconds*math.Exp(zhi*e.Sigma)) {
		return true
	}
	after := sigmaAfter()
	if !(after > 0) {
		return false
	}
	own := class(e.CPUSeconds * math.Exp(z(cq)*e.Sigma))
	wide, k := math.Hypot(e.Sigma, after), math.Exp(z(cq)*after)
	return class(e.CPUSeconds*math.Exp(zlo*wide)*k) == own && class(e.CPUSeconds*math.Exp(zhi*wide)*k) == own
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
func (s *Service) explainBehind(m *bundle.Model, planners []string, sql string, h http.Header, kind plan.StatementKind, key string, b *Basis) {
	planner, release := s.explainSlot(planners)
	if release == nil {
		s.bgSkipped.Add(1)
		return
	}
	if m != nil && !m.Acquire() {
		release()
		s.bgSkipped.Add(1)
		return
	}
	done := func() {
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
		r := s.runBehind(m, planner, sql, h, kind, key)
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
func (s *Service) runBehind(m *bundle.Model, planner, sql string, h http.Header, kind plan.StatementKind, key string) Background {
	r := Background{Planner: planner, lnModel: math.NaN(), lnCost: math.NaN()}
	ctx, cancel := context.WithTimeout(s.bgCtx, s.opts.ExplainTimeout)
	defer cancel()
	res, err := s.opts.Explain.Explain(ctx, planner, sql, h)
	if err != nil {
		r.Err = err
		return r
	}
	r.Plan, r.Explain = res.PlanJSON, res.Wall
	if c, err := plan.TotalCPUCost(res.PlanJSON); err == nil {
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
	if e.CPUSeconds > 0 {
		r.lnModel = math.Log(e.CPUSeconds)
	}
	return r
}

// Settle waits, at most until ctx ends, for the background EXPLAIN +
// model behind b (Basis.Pending), fills b's LnModel and LnCost from it and
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
	s.pending.mu.Lock()
	r := e.r
	s.pending.mu.Unlock()
	if !math.IsNaN(r.lnModel) {
		b.LnModel = r.lnModel
	}
	if !math.IsNaN(r.lnCost) {
		b.LnCost = r.lnCost
	}
	return r, true
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
