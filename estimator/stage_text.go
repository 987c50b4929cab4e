package estimator

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The text stage: before paying for an EXPLAIN, the
// bundle's text model (bundle.Model.TextQuantiles, ~0.1 ms) gives quantiles
// of the CPU time from the SQL text and session alone. When the
// deployment lets it (CascadeOptions.Explain) and, for
// ExplainWhenUncertain, when its interval lies inside one routing class
// (so no plan-based number could change the class), it answers at once
// with source text; the EXPLAIN and the model then run in the background
// (background.go), bounded by the same per-planner EXPLAIN bound (no free
// slot: skipped), and their result fills the estimate and plan caches
// and, through Basis.Pending, the query's history record (Observe,
// Settle) and its feedback record (Settle's Background.Plan).

// ExplainMode says when the cascade pays for an EXPLAIN on the hot path
// (estimator.explain).
type ExplainMode uint8

const (
	// ExplainAlways: every statement the history (or the estimate cache)
	// cannot answer is explained before it is sent; the text stage is not
	// consulted on the hot path.
	ExplainAlways ExplainMode = iota
	// ExplainWhenUncertain: the text stage answers when its interval lies
	// inside one class (CascadeOptions.ClassBounds) and, for every target
	// with decision bounds (CascadeOptions.Bounds), on one side of each;
	// when it straddles a bound, or does not predict a target with
	// bounds, EXPLAIN as ExplainAlways does.
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

// ParseExplainMode reads estimator.explain's value (config fills an absent
// one: empty is refused here, so that it has one meaning, config's).
func ParseExplainMode(s string) (ExplainMode, error) {
	for i, n := range explainModeNames {
		if n == s {
			return ExplainMode(i), nil
		}
	}
	return 0, fmt.Errorf("estimator: explain mode %q: want always, when-uncertain or never", s)
}

// textStage answers before the plan (CascadeOptions.Explain
// when-uncertain or never; under always it passes): from the statement's
// history too short to answer alone, else its shape's (standIn), or from
// the text model (textEstimate, corrected by what the history learned of
// it: correctText). The narrower of those that decides (under never, any;
// under when-uncertain, one whose class the plan could not change)
// answers (decides: every target with decision bounds, not the CPU time's
// class alone), and the EXPLAIN and the model run in the background
// (explainBehind). Otherwise it passes, leaving the text estimate
// (request.text) for the EXPLAIN's stand-in over the bound.
type textStage struct{}

func (textStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	co := &s.opts.Cascade
	if co.Explain == ExplainAlways {
		return nil, nil
	}
	if r.m != nil || s.textHook != nil {
		var lnRows float64
		if r.text, r.textFar, lnRows = s.textEstimate(r.m, r.kind, r.sql, r.h, r.planners, r.engine); r.text != nil {
			if r.b != nil {
				r.b.LnRows = lnRows
			}
			s.correctText(r.reads, r.text, r.b)
		}
	}
	// Before the plan: the statement's short history or its shape's
	// (other literals) and the text model; the narrower of those whose
	// class the plan could not change routes the query at once. After the
	// plan the model's estimate would carry the model's uncertainty on
	// this shape (correct), read from the history only when an interval
	// straddles a bound.
	var sigmaAfter [numTargets]float64
	after := func(t estimate.Target) float64 {
		if sigmaAfter[t] == 0 {
			v := s.modelPrior(r.manifest(), r.engine)
			if r.b != nil {
				var shaped bool
				_, v, shaped = s.offset(r.reads, targetKey(globalKey(keyModel, r.b.Engine), t), r.b.residualKeys(keyResidual, keyFamRes, t), v)
				// widened as the model stage's answer would be (calibrate); never narrowed (deciding)
				src := estimate.SourceModel
				if shaped {
					src = estimate.SourceModelResidual
				} else if t == estimate.TargetCPU {
					v *= novelty(r.b, r.manifest()) // a family the model was not trained on (widenNovel)
				}
				v *= max(coverScale(r.reads, src, r.engine, t), 1)
			}
			sigmaAfter[t] = v
			if v == 0 {
				sigmaAfter[t] = -1 // none: read once
			}
		}
		return sigmaAfter[t]
	}
	// Each candidate decides with its stage's factor when it widens the
	// interval (deciding); the answer is the candidate itself, which the
	// cascade then scales (calibrate).
	var pick, pickServed *estimate.Estimate
	for _, c := range []*estimate.Estimate{s.standIn(r.reads, r.kind, r.b, r.exact), r.text} {
		if c == nil {
			continue
		}
		served := deciding(r.reads, c, r.engine)
		if c == r.text && co.Explain == ExplainWhenUncertain && (r.textFar || co.TextMaxSeconds > 0 && textHigh(served) > co.TextMaxSeconds) {
			continue // the plan knows better, or its number is worth the EXPLAIN
		}
		if co.decides(served, after) && (pick == nil || served.Sigma < pickServed.Sigma) {
			pick, pickServed = c, served
		}
	}
	if pick == nil {
		return nil, nil
	}
	if r.b != nil {
		r.b.Source = pick.Source
	}
	s.explainBehind(r.m, r.planners, r.engine, r.sql, r.h, r.kind, r.key, r.b, r.reads)
	return pick, nil
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

// textHigh is the high end of e's 80% interval.
func textHigh(e *estimate.Estimate) float64 {
	_, hi := e.Interval()
	return hi
}

// TableStatsSource gives the text stage what the catalog says of the size
// of the tables a statement names (tablestats.Cache): at once, from what
// it holds (Known false for a table it does not know yet), fetching what
// it misses in the background on server, as the caller h.
type TableStatsSource interface {
	Lookup(server string, tables []plan.TableName, h http.Header) []featurize.TableStats
}

// engineTableStats is what a TableStatsSource that serves PrestoDB's
// coordinators too adds (tablestats.Cache): Lookup on a coordinator of
// the engine. A source without it is asked with Lookup for Trino only.
type engineTableStats interface {
	LookupOn(server string, engine dialect.Engine, tables []plan.TableName, h http.Header) []featurize.TableStats
}

// farLnRows is how far (in ln rows) beyond the largest table of its
// training a statement's table may be before the text stage defers to
// the plan: e^1, under three times larger.
const farLnRows = 1.0

// textEstimate runs the text model: nil without one (or when it fails).
// The estimate is the log-normal whose median is the model's middle
// quantile and whose Sigma is the wider of its two sides, so that the
// estimate's quantiles at the model's outer ones cover the model's
// interval. A model that reads table sizes gets those of the tables the
// statement names (ServiceOptions.TableStats, asked of the first planner);
// far reports that the statement is outside what it was trained on: a
// named table whose size is not known yet, or one larger than any of its
// training set by more than farLnRows. lnRows is ln(1+rows) of the
// largest named table when the sizes of all are known (Basis.LnRows), else 0.
func (s *Service) textEstimate(m *bundle.Model, kind plan.StatementKind, sql string, h http.Header, planners []string, engine dialect.Engine) (e *estimate.Estimate, far bool, lnRows float64) {
	var tp bundle.TextPrediction
	var stats []featurize.TableStats
	id := ""
	if s.textHook != nil {
		if s.textHookReads > 0 {
			stats, far = s.tableStats(sql, TextContext(h), h, planners, engine, s.textHookReads)
		}
		tp.Quantiles, tp.Values[estimate.TargetCPU] = s.textHook(sql)
	} else {
		if m == nil {
			return nil, false, 0
		}
		tc := TextContext(h)
		if reads, maxLnRows := m.TextReadsTables(); reads {
			tc.Tables, far = s.tableStats(sql, tc, h, planners, engine, maxLnRows)
			stats = tc.Tables
		}
		var ok bool
		var err error
		if tp, ok, err = m.TextPredict(sql, tc); !ok || err != nil {
			return nil, false, 0
		}
		id = m.ID()
	}
	qs := tp.Quantiles
	if len(qs) == 0 || len(qs) != len(tp.Values[estimate.TargetCPU]) {
		return nil, false, 0
	}
	if allKnown(stats) {
		lnRows = featurize.MaxLnRows(stats)
	}
	cpu := textQuantity(qs, tp.Values[estimate.TargetCPU], minSeconds)
	e = &estimate.Estimate{Estimated: true, Statement: kind.String(), Source: estimate.SourceText, Model: id,
		CPUSeconds: cpu.Median, Sigma: cpu.Sigma}
	// The text model's raw numbers of the targets beyond CPU, when its
	// bundle has them (the cascade corrects the CPU only).
	for _, t := range estimate.Targets {
		if vs := tp.Values[t]; t != estimate.TargetCPU && len(vs) == len(qs) {
			if q := textQuantity(qs, vs, 0); q.Known() {
				e.Set(t, q)
			}
		}
	}
	return e, far, lnRows
}

// allKnown reports whether the catalog's statistics know every table.
func allKnown(stats []featurize.TableStats) bool {
	for _, t := range stats {
		if !t.Known {
			return false
		}
	}
	return true
}

// textQuantity is the log-normal of a text model's quantiles qs of one
// target (its values vs at each): the median is the middle quantile's
// value (floor when it is not positive), the Sigma the wider of its two
// sides, at least sigmaFloor, so that the quantity's quantiles at the
// model's outer ones cover the model's interval.
func textQuantity(qs, vs []float64, floor float64) estimate.Quantity {
	mid := 0
	for i, q := range qs {
		if math.Abs(q-0.5) < math.Abs(qs[mid]-0.5) {
			mid = i
		}
	}
	med := vs[mid]
	if !(med > 0) {
		med = floor
	}
	if !(med > 0) {
		return estimate.Quantity{}
	}
	sigma := 0.0
	if lo := len(qs) - 1; lo > 0 {
		if qs[0] < 0.5 && vs[0] > 0 {
			sigma = math.Max(sigma, math.Log(med/vs[0])/-estimate.NormalQuantile(qs[0]))
		}
		if qs[lo] > 0.5 && vs[lo] > 0 {
			sigma = math.Max(sigma, math.Log(vs[lo]/med)/estimate.NormalQuantile(qs[lo]))
		}
	}
	return estimate.Quantity{Median: med, Sigma: max(sigma, sigmaFloor)}
}

// tableStats looks up the statistics of the tables sql names (resolved
// against the session in tc) and reports whether they put the statement
// far from the text model's training (see textEstimate).
func (s *Service) tableStats(sql string, tc featurize.TextContext, h http.Header, planners []string, engine dialect.Engine, maxLnRows float64) (stats []featurize.TableStats, far bool) {
	names, _ := plan.Tables(sql, tc.Catalog, tc.Schema)
	if len(names) == 0 {
		return nil, false
	}
	server := ""
	if len(planners) > 0 {
		server = planners[0]
	}
	es, perEngine := s.opts.TableStats.(engineTableStats)
	switch {
	case perEngine:
		stats = es.LookupOn(server, engine, names, h)
	case s.opts.TableStats != nil && engine != dialect.Presto:
		stats = s.opts.TableStats.Lookup(server, names, h)
	default:
		stats = make([]featurize.TableStats, len(names))
	}
	for _, t := range stats {
		if !t.Known {
			far = true
		}
	}
	if maxLnRows > 0 && featurize.MaxLnRows(stats) > maxLnRows+farLnRows {
		far = true
	}
	return stats, far
}

// correctText applies what the history learned about the text model on
// this deployment to its raw estimate e: the global offset, then the
// shape's residual (as correct does for the model), and records the raw
// median in b (when not nil) so that the query's outcome teaches both.
// Without the shape's residuals (or its family's) e keeps at least the
// model's own spread, and its CPU time is weighed with the size line's
// (sizeLine) by precision: the text model's error on a statement this
// deployment never ran is wide, and what the deployment's statements over
// tables of that size cost is evidence it does not have. The σ is the
// narrower of the two, not their combined one (the errors are not
// independent). The same corrections, without the size line, for each
// target beyond CPU the text model predicts (correctTargets).
func (s *Service) correctText(v *reads, e *estimate.Estimate, b *Basis) {
	if b == nil {
		return
	}
	s.correctTargets(v, e, b, keyText, keyTextRes, keyFamText, &b.TextBy, true)
	lnRaw, sigma0 := math.Log(e.CPUSeconds), e.Sigma
	b.LnText = lnRaw
	off, sigma, shaped := s.offset(v, globalKey(keyText, b.Engine), b.residualKeys(keyTextRes, keyFamText, estimate.TargetCPU), sigma0)
	ln := lnRaw + off
	if !shaped {
		sigma = max(sigma, sigma0)
		if ys, ss, ok := s.sizeLine(v, b); ok {
			wt, ws := 1/(sigma*sigma), 1/(ss*ss)
			ln, sigma = (wt*ln+ws*ys)/(wt+ws), min(sigma, ss)
		}
	}
	e.CPUSeconds, e.Sigma = math.Exp(ln), max(sigma, sigmaFloor)
}

// sizeLine is the size line's ln CPU seconds for b and the spread of a
// new statement around it (linePrediction): the least-squares line of ln CPU over ln(1+rows) of the
// largest table each statement named (Basis.LnRows), fitted on this
// deployment's completed statements of b's engine (as the optimizer
// calibration is, from MinCalibration of them on); ok is false without
// b's size or while the line is not fitted.
func (s *Service) sizeLine(v *reads, b *Basis) (ln, sigma float64, ok bool) {
	if !(b.LnRows > 0) || v == nil {
		return 0, 0, false
	}
	c, ok := v.get(globalKey(keySize, b.Engine))
	if !ok || c.Count < uint64(max(s.opts.Cascade.MinCalibration, 2)) {
		return 0, 0, false
	}
	ln, sd, ok := linePrediction(c, b.LnRows, s.opts.Cascade.Alpha)
	if !ok {
		return 0, 0, false
	}
	return ln, max(sd, sigmaFloor), true
}

// decides reports whether the estimate e, made before the plan, may route
// the query under the cascade's ExplainMode: always for ExplainNever; for
// ExplainWhenUncertain when the plan could not change a decision, that is
// for every target with decision bounds (CascadeOptions.bounded: the
// routing classes' for the CPU time, Bounds for any target) e predicts the
// target (one it does not predict is uncertain) and decidesOn the target.
func (co *CascadeOptions) decides(e *estimate.Estimate, sigmaAfter func(estimate.Target) float64) bool {
	switch co.Explain {
	case ExplainNever:
		return true
	case ExplainWhenUncertain:
	default:
		return false
	}
	for _, t := range estimate.Targets {
		if !co.bounded(t) {
			continue
		}
		q := e.Of(t)
		if t != estimate.TargetCPU && !q.Known() {
			return false
		}
		if !co.decidesOn(t, q, sigmaAfter) {
			return false
		}
	}
	return true
}

// decidesOn reports whether the plan could not move the prediction q of
// target t across one of its decision bounds, that is
//
//   - its interval — from the lower of its 10% and (1 − ClassQuantile)
//     quantiles to the higher of its 90% and ClassQuantile quantiles, so
//     that the quantile routing picks the class with lies inside it —
//     lies on one side of every bound (q knows the decision), or
//   - the side the plan's estimate would be routed to is q's own for every
//     plan estimate q finds plausible (the plan knows no better): after
//     EXPLAIN the model's estimate m, whose own uncertainty is
//     sigmaAfter(t) (called only when the interval straddles a bound),
//     routes by its ClassQuantile quantile m·exp(z·sigmaAfter); m is the
//     truth as q sees it times the model's error, q's interval widened to
//     √(σ² + sigmaAfter²). Under a cautious quantile (0.9) a query whose
//     interval straddles a bound but lies mostly above it goes to the
//     upper class whatever its plan says, and is not explained for nothing.
func (co *CascadeOptions) decidesOn(t estimate.Target, q estimate.Quantity, sigmaAfter func(estimate.Target) float64) bool {
	cq := co.ClassQuantile
	if !(cq > 0 && cq < 1) {
		cq = 0.5 // zero: the median, as in estimate.Estimate.Quantile
	}
	if math.IsNaN(q.Sigma) {
		return false
	}
	z := estimate.NormalQuantile
	zlo, zhi := z(min(estimate.IntervalQuantile, 1-cq)), z(max(1-estimate.IntervalQuantile, cq))
	side := func(x float64) int { return co.side(t, x) }
	if side(q.Median*math.Exp(zlo*q.Sigma)) == side(q.Median*math.Exp(zhi*q.Sigma)) {
		return true
	}
	after := sigmaAfter(t)
	if !(after > 0) {
		return false
	}
	own := side(q.Median * math.Exp(z(cq)*q.Sigma))
	wide, k := math.Hypot(q.Sigma, after), math.Exp(z(cq)*after)
	return side(q.Median*math.Exp(zlo*wide)*k) == own && side(q.Median*math.Exp(zhi*wide)*k) == own
}
