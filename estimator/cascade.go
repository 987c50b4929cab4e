package estimator

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The estimate cascade (docs/design.md §5.1): where each number comes from.
//
//	cheap           SHOW, DESCRIBE, queries of system.* / information_schema / VALUES: a constant, no EXPLAIN
//	history         the same statement (normalized text, catalog, schema, session) ran before with a
//	                confident record (at least MinCount runs, spread at most MaxSpread): its
//	                recency-weighted CPU, no EXPLAIN
//	history, text   (estimator.explain when-uncertain or never) before the plan: the statement's
//	                history too short to answer alone, else its shape's (other literals), with
//	                an interval shrunk toward a prior (standIn), and the text model's quantiles
//	                from the SQL text and session alone; the narrower of those whose interval
//	                lies in one class (any, under never) answers: no EXPLAIN on the hot path,
//	                the EXPLAIN + model run in the background for the history and the feedback
//	                record (stage_text.go, background.go)
//	model+residual  the same shape (literal-insensitive fingerprint): EXPLAIN + the model, corrected by
//	                the shape's observed log residual, shrunk toward the global offset with few runs
//	model           a new shape: EXPLAIN + the model, corrected by the deployment's global offset
//	                (the scale of this cluster against the model's training machine), shrunk toward 0
//	optimizer       the model missing or failing: Trino's summed cpuCost mapped to seconds by a
//	                log-linear fit on this deployment's history
//	none            fail open (the error)
//
// Every stage above predicts the CPU time; those that predict the peak
// memory and the elapsed time too (the history, the text and plan models)
// get each target calibrated, tempered and checked against its decision
// bounds as the CPU time is (targets.go, CascadeOptions.Bounds).
//
// A statement that ran before but did not satisfy the history stage gets
// the answer of a stage after it (text, model+residual, model, optimizer)
// combined with its own runs (temper, repeats.go).
//
// Over the EXPLAIN bound (CascadeOptions.ExplainLimit on every planner)
// or the EXPLAIN ceiling (ExplainRate, explain_rate.go) the cascade never waits: it answers from the statement's or its shape's
// history (source history, with the model's uncertainty), else from the
// text stage whatever its interval, or fails with ErrExplainBusy. Every
// estimate carries its Source and Sigma.
//
// Each stage is a file (stage_*.go) and one value in stages, run in that
// order by EstimateOn: it reads what the stages before it left in the
// request and answers (an estimate, or an error: the cascade ends there)
// or passes to the next, leaving in the request what the stages after it
// need. The table's rows map onto them: cheap (cheapStage), history
// (historyStage), a cached model estimate (cacheStage), history and text
// before the plan (textStage), the EXPLAIN and, over the bound, its
// stand-ins (explainStage), model+residual and model (modelStage),
// optimizer and none (optimizerStage).
var stages = []stage{cheapStage{}, historyStage{}, cacheStage{}, textStage{}, explainStage{}, modelStage{}, optimizerStage{}}

// A stage is one step of the cascade. run answers with an estimate or an
// error, either of which ends the cascade, or passes with (nil, nil).
type stage interface {
	run(s *Service, r *request) (*estimate.Estimate, error)
}

// request is one statement on its way through the cascade: what
// EstimateOn was given, read only, and what each stage leaves for the
// stages after it. It lives for one EstimateOn call: nothing keeps it
// after, but for the Basis of an UnplacedError (which points into it).
type request struct {
	ctx      context.Context
	planners []string
	engine   dialect.Engine // the planners' engine: the EXPLAIN's dialect and a part of every key
	sql      string
	h        http.Header // read only; its X-Trino-* headers and Authorization go to the EXPLAIN

	// kind is the statement's kind (cheapStage).
	kind plan.StatementKind
	// fp is the statement's Fingerprint, "" until fingerprint computes it.
	fp string
	// cfp is the estimate cache's part of the statement (cacheFP).
	cfp string
	// b is what the history learns from the query's outcome (historyStage;
	// it points at basis): nil without a history, or for EXECUTE, whose
	// text does not say what runs. exact is the statement's own history
	// per target, read once (Count 0: none).
	b     *Basis
	basis Basis
	exact runs
	// reads are the statement's history reads, batched (reads.go): set
	// with b.
	reads *reads
	// m is the model, held until the cascade ends (cacheStage): nil when
	// the scoreHook stands in for it (tests), or with merr saying why.
	// merr is also the model's failure on the plan (modelStage).
	m    *bundle.Model
	merr error
	// mf stands in for m's manifest in tests (manifest).
	mf *bundle.Manifest
	// key is the estimate cache's key (cacheStage; "" without a cache or
	// a model).
	key string
	// text is the text model's estimate (textStage; nil: none, or not
	// consulted).
	text *estimate.Estimate
	// textFar is set by textStage when the statement is far from what the
	// text model was trained on (a named table's size unknown, or larger
	// than any in its training): its estimate may stand in over the
	// EXPLAIN bound but never decides the class.
	textFar bool
	// planner ran the hot-path EXPLAIN whose result is res (explainStage).
	planner string
	res     *plan.ExplainResult
}

// fingerprint is the statement's Fingerprint, computed once: the
// history's shape key and the estimate cache's key.
func (r *request) fingerprint() string {
	if r.fp == "" {
		r.fp = Fingerprint(r.sql)
	}
	return r.fp
}

// cacheFP is the statement's part of the estimate cache's key (and the
// plan cache's): its fingerprint with its range literals
// (cacheFingerprint), computed once.
func (r *request) cacheFP(s *Service) string {
	if r.cfp == "" {
		r.cfp = cacheFingerprint(r.sql, r.fingerprint(), s.opts.CacheShapeOnly)
	}
	return r.cfp
}

// explained stamps e with the hot-path EXPLAIN it was made from.
func (r *request) explained(e *estimate.Estimate) *estimate.Estimate {
	e.Statement, e.Planner = r.kind.String(), r.planner
	e.Explain, e.ExplainQueryID = r.res.Wall, r.res.QueryID
	return e
}

// manifest is the held model's manifest (or the tests' stand-in for the
// scoreHook's, mf); nil without one.
func (r *request) manifest() *bundle.Manifest {
	if r.m == nil {
		return r.mf
	}
	return r.m.Manifest()
}

// release gives back the model cacheStage took.
func (r *request) release() {
	if r.m != nil {
		r.m.Release()
	}
}

// EstimateOn runs the cascade for sql in the caller's session h, planning
// (when an EXPLAIN is needed) on the least busy of planners (ties: the
// first) below CascadeOptions.ExplainLimit. Statements that are not safe to
// explain (plan.StatementKind.SafeToExplain) and not cheap get a
// not-estimated result with the reason and a nil error, without contacting
// Trino. An estimate the history can learn from carries its Basis in Learn
// (MarshalBasis) for Observe once the query completes. It runs the stages
// in order until one answers.
func (s *Service) EstimateOn(ctx context.Context, planners []string, sql string, h http.Header) (*estimate.Estimate, error) {
	return s.EstimateFor(ctx, dialect.Trino, planners, sql, h)
}

// EstimateFor is EstimateOn for planners of the given engine (all of one
// engine). h is the caller's session in the canonical form (X-Trino-*
// names, package dialect) whatever the engine: the EXPLAIN renames it for
// the coordinator (plan.ExplainClient.ExplainOn). On PrestoDB every stage
// runs as on Trino, with the engine a part of the history's and the
// estimate cache's keys and of the global calibrations' (globalKey), and
// the optimizer stage reading row counts where Trino's plans give cpuCost
// (planCost). Unknown is Trino.
func (s *Service) EstimateFor(ctx context.Context, engine dialect.Engine, planners []string, sql string, h http.Header) (*estimate.Estimate, error) {
	r := &request{ctx: ctx, planners: planners, engine: engine, sql: sql, h: h}
	defer r.release()
	return s.cascade(r, stages)
}

// cascade runs the stages in order on r until one answers; the answer is
// tempered by the statement's own runs (temper) and carries r's Basis in
// Learn.
func (s *Service) cascade(r *request, stages []stage) (*estimate.Estimate, error) {
	for _, st := range stages {
		e, err := st.run(s, r)
		switch {
		case err != nil:
			return nil, err
		case e != nil:
			s.temper(e, r)
			calibrate(r.reads, e, r.b)
			e.Learn = MarshalBasis(r.b)
			return e, nil
		}
	}
	return nil, errNoAnswer
}

// errNoAnswer would mean that no stage answered; the optimizer stage, the
// last, always does.
var errNoAnswer = errors.New("estimator: no stage of the cascade answered")

// CascadeOptions tune the cascade. The zero value is usable; each field's
// zero meaning is given (config/defaults.go holds the served defaults).
type CascadeOptions struct {
	// CheapCPUSeconds is the estimate of statements cheap by nature. Zero
	// means 0 s.
	CheapCPUSeconds float64
	// MinCount is how many runs make a statement's history usable. Zero
	// means 1.
	MinCount int
	// MaxSpread is the largest standard deviation of ln CPU for which a
	// statement's history is trusted without EXPLAIN. Zero means only
	// histories without spread.
	MaxSpread float64
	// Alpha is the recency weight of a new observation (history.Stats).
	// Zero means a plain mean.
	Alpha float64
	// Shrink is the prior weight, in observations, that pulls a shape's
	// residual toward the global offset and the global offset toward 0.
	// Zero means no shrinkage.
	Shrink float64
	// ModelSigma is the prior standard deviation of ln CPU around a model
	// estimate (before the deployment's own residual spread is known). Zero
	// means none: model estimates carry no interval until learned.
	ModelSigma float64
	// RepeatSigma is the prior of the run-to-run noise (standard deviation
	// of ln CPU between runs of one statement: load, JIT warmth) until the
	// deployment's own repeats teach it (repeats.go); it floors the
	// history's intervals. Each target learns its own from this prior. Zero means no prior: the floor is what the
	// repeats taught (shrunk toward 0 by Shrink runs), sigmaFloor before.
	RepeatSigma float64
	// MinCalibration is how many queries the optimizer calibration needs
	// before the optimizer stage serves. Zero means as soon as a line fits.
	MinCalibration int
	// ExplainLimit bounds the concurrent EXPLAINs per planner. Zero means
	// unbounded.
	ExplainLimit int
	// QueueSize bounds the observations waiting to be written. Zero means
	// 4096; past it, observations are dropped (and counted).
	QueueSize int
	// Explain says when an EXPLAIN runs on the hot path (estimator.explain,
	// stage_text.go). Zero means ExplainAlways.
	Explain ExplainMode
	// ClassBounds are the routing classes' upper bounds in CPU seconds,
	// one per class in increasing order, 0 for an unbounded last class (as
	// routing.ClassFor reads them: the class of an estimate is the one
	// routing picks): under ExplainWhenUncertain the text stage answers
	// only when its interval lies in one class. Empty means no routing by
	// cost: the text stage always answers.
	ClassBounds []float64
	// ClassQuantile is the quantile of an estimate that picks its class
	// (routing.class_quantile), which the text stage's interval must
	// cover. Zero means the median, as for every class quantile in code
	// (package estimate); config fills routing.class_quantile's default.
	ClassQuantile float64
	// Bounds are, per target, the values at which a decision made from an
	// estimate changes, beside the routing classes' (ClassBounds): the
	// ranges the deployment's resource groups select on, guardrail
	// limits, budgets. Under ExplainWhenUncertain a pre-plan estimate
	// decides only when, for every target with bounds (ClassBounds count
	// as CPU bounds), it predicts the target and its interval (as for
	// ClassBounds: covering ClassQuantile) lies on one side of each bound
	// — or the plan could not move it across one (decides). Bounds are
	// the target's unit (seconds, bytes); an estimate at a bound is on its
	// lower side, as routing.ClassFor places it. Nil means the classes' alone;
	// MergeBounds joins lists from several places.
	Bounds Bounds
	// TextMaxSeconds bounds the statements the text model decides under
	// ExplainWhenUncertain: the high end of its 80% interval at most this
	// many CPU seconds (larger ones are explained: the plan-based number
	// is worth its EXPLAIN there). Zero means no bound.
	TextMaxSeconds float64
	// ExplainRate is the ceiling on EXPLAINs per second on each planner
	// (a token bucket of ExplainBurst), hot path and background together:
	// over it the hot path answers as over ExplainLimit (the history, the
	// text stage, else ErrExplainBusy) and a background EXPLAIN is dropped,
	// each counted (ExplainCounts.SkippedCeiling). Zero means no ceiling.
	ExplainRate float64
	// ExplainBurst is the bucket's size. Zero means ExplainRate rounded
	// up, at least 1. How full it must be for an EXPLAIN to take a token
	// says who gets them near the ceiling (hotNeed, backgroundNeed).
	ExplainBurst int
	// LearnMinRuns and LearnMaxSpread say which shapes a background
	// EXPLAIN (the text stage or the history answered before the plan)
	// teaches: a shape with fewer than LearnMinRuns explained runs (runs
	// whose model number the history learned: its residual count), or
	// whose residual spread (the standard deviation of ln actual − ln
	// model) is above LearnMaxSpread. Other shapes, which the model
	// already knows well, are explained only as DriftSample of them.
	// Zero LearnMinRuns means every background EXPLAIN runs (as before
	// the rule); zero LearnMaxSpread means no spread rule.
	LearnMinRuns   int
	LearnMaxSpread float64
	// DriftSample is the fraction of the statements of well-known shapes
	// whose background EXPLAIN still runs, so that the residuals follow a
	// drifting cluster or data. Zero means none.
	DriftSample float64
}

// ErrExplainBusy means every planner was at its EXPLAIN bound and no
// history could stand in: the caller fails open, it never waits.
var ErrExplainBusy = errors.New("estimator: every planner is at its EXPLAIN bound")

// sigmaFloor keeps history intervals from collapsing to a point.
const sigmaFloor = 0.05

// minSeconds is the smallest CPU time learned from (ln 0 is not a number;
// Trino reports 0 ms for the smallest queries).
const minSeconds = 0.001

// Basis is what the cascade learns from once the query completes: its
// history keys and the model's and the optimizer's numbers (NaN when they
// were not computed).
type Basis struct {
	Exact, Shape string
	// Family is the shape's key without the session properties (the
	// same statement with other literals in any session): what the
	// residuals of a shape never seen in this session fall back to.
	// Empty in a Basis from before it (Unmarshal of an older replica's).
	Family string
	// LnModel is ln of the model's raw prediction; LnCost ln(1+Σ cpuCost);
	// LnText ln of the text stage's raw median (of the CPU time).
	LnModel, LnCost, LnText float64
	// LnRows is ln(1+rows) of the largest table the statement names, as
	// the text stage's table statistics knew it (0 or NaN: not every
	// named table's size was known, or the text stage did not run): the
	// x of the size line (keySize).
	LnRows float64
	// ModelBy and TextBy are the model's and the text stage's raw medians
	// of the targets beyond the CPU time (peak memory, elapsed; indexed by
	// estimate.Target, the TargetCPU slot unused: LnModel and LnText hold
	// the CPU time's), not their logs: 0 when the stage did not predict
	// the target, so that the zero Basis predicts none.
	ModelBy, TextBy [numTargets]float64
	// Blend is the model's corrected number and the calibrated
	// optimizer's that the model stage combined for a statement without
	// residuals of its own (nil: none): what the blend line (keyBlend)
	// learns from once the statement's CPU time is known.
	Blend  *BlendPoint
	Source estimate.Source
	// Engine is the engine of the coordinators the statement was
	// estimated for (the global calibrations are per engine: globalKey).
	Engine dialect.Engine
	// Served are the intervals the cascade served, per target (indexed by
	// estimate.Target: the median, its σ after the stage's factor:
	// cover.go), which the outcome judges; Sigma 0 where none was served.
	Served [numTargets]estimate.Quantity
	// Pending names the background EXPLAIN + model of an estimate the text
	// stage made (background.go): Observe (or Settle) fills LnModel and
	// LnCost from it when it is done. Empty when none runs; only the
	// replica that made the estimate knows it.
	Pending string
}

// History keys: a prefix byte and a SHA-256 digest, or a global name.
// The comments name the CPU time's statistic; each target beyond it has
// its own under the same key plus "/" and its label (targetKey): the
// statement's ln peak memory under "x:…/peak_memory", the model's global
// offset on the elapsed time under "g:model/elapsed". The optimizer's
// calibration is the CPU time's alone.
const (
	keyExact     = "x:" // a statement's ln CPU
	keyShape     = "s:" // a shape's ln CPU
	keyResidual  = "r:" // a shape's ln actual − ln model
	keyTextRes   = "t:" // a shape's ln actual − ln text median
	keyFamily    = "f:" // a family's ln CPU: the shape in any session (historyKeys)
	keyFamRes    = "R:" // a family's ln actual − ln model
	keyFamText   = "T:" // a family's ln actual − ln text median
	keyModel     = "g:model"
	keyText      = "g:text"
	keyOptimizer = "g:optimizer" // (ln(1+cpuCost), ln CPU); PrestoDB's: (ln(1+Σ rows), ln CPU) (planCost)
	keySize      = "g:size"      // (ln(1+rows) of the largest named table, ln CPU): the size line (sizeLine)
	keyRepeat    = "g:repeat"    // a repeat's |ln actual − the statement's corrected mean before it|, scaled (repeats.go)
	keyCold      = "g:cold"      // a statement's second run's ln CPU − its first's: the first run's drift (repeats.go)
	keyBlend     = "g:blend"     // (ln optimizer − ln model, ln actual − ln model) of statements without residuals: the blend line (blendOptimizer, blendLine)
)

// HistoryKeys are the history keys of sql run in the session h: the exact
// statement (Normalize) and its shape (Fingerprint), each with the catalog,
// schema and every session property (any may change the plan). The user is
// not part of them: the same statement costs the same whoever runs it.
func HistoryKeys(sql string, h http.Header) (exact, shape string) {
	exact, shape, _ = historyKeys(sql, dialect.Trino, Fingerprint(sql), h)
	return exact, shape
}

// historyKeys is HistoryKeys of a statement whose Fingerprint is fp, run
// on a coordinator of the engine: a PrestoDB statement's digest input
// starts with the engine's mark (engineMark), so that it never shares a
// history with the same text on Trino; Trino's keys are unchanged. family
// is the shape's key without the session properties (Basis.Family): its
// digest input is the shape's with a leading familyMark, so that it
// differs from the shape's key even when the session sets none.
func historyKeys(sql string, engine dialect.Engine, fp string, h http.Header) (exact, shape, family string) {
	ctx := []string{h.Get("X-Trino-Catalog"), h.Get("X-Trino-Schema")}
	var props []string
	for _, v := range h.Values("X-Trino-Session") {
		for _, kv := range strings.Split(v, ",") {
			if kv = strings.TrimSpace(kv); kv != "" {
				props = append(props, kv)
			}
		}
	}
	slices.Sort(props)
	norm := Normalize(sql)
	// One buffer holds each digest's input: the text, then each of ctx
	// and props after a 0 byte.
	buf := make([]byte, 0, max(len(norm), len(fp))+64)
	mark := engineMark(engine)
	key := func(prefix, text string, session bool) string {
		buf = append(buf[:0], mark...)
		if mark != "" {
			buf = append(buf, 0)
		}
		if !session {
			buf = append(buf, familyMark...)
		}
		buf = append(buf, text...)
		for _, s := range ctx {
			buf = append(append(buf, 0), s...)
		}
		if session {
			for _, s := range props {
				buf = append(append(buf, 0), s...)
			}
		}
		sum := sha256.Sum256(buf)
		return prefix + string(sum[:])
	}
	return key(keyExact, norm, true), key(keyShape, fp, true), key(keyFamily, fp, false)
}

// familyMark starts the digest input of a family key (historyKeys).
const familyMark = "family\x00"

// UnplacedError is the cascade's failure when the model is unavailable or
// failed and the optimizer calibration is not fitted yet: the caller fails
// open, and hands Basis to Observe once the query completes so that the
// calibration learns from it.
type UnplacedError struct {
	Err   error
	Basis *Basis
}

func (e *UnplacedError) Error() string {
	return "estimator: no estimate (the optimizer calibration is still learning): " + e.Err.Error()
}

func (e *UnplacedError) Unwrap() error { return e.Err }

// modelOffset is offset for the plan model's estimates of b's shape.
func (s *Service) modelOffset(v *reads, b *Basis, sigma0 float64) (off, sigma float64, shaped bool) {
	return s.offset(v, globalKey(keyModel, b.Engine), b.residualKeys(keyResidual, keyFamRes, estimate.TargetCPU), sigma0)
}

// shapeKey is the history key of a shape (its keyShape key) under
// another per-shape prefix (keyResidual, keyTextRes).
func shapeKey(prefix, shape string) string { return prefix + shape[len(keyShape):] }

// familyKey is the history key of a family (its keyFamily key) under
// another per-family prefix (keyFamRes, keyFamText).
func familyKey(prefix, family string) string { return prefix + family[len(keyFamily):] }

// residualKeys are the keys of the residuals of target t that a stage's
// estimate for b is corrected by (offset): the shape's under prefix
// shape, then the family's under prefix family (none when b has no
// family).
func (b *Basis) residualKeys(shape, family string, t estimate.Target) residualKeys {
	k := residualKeys{shape: targetKey(shapeKey(shape, b.Shape), t)}
	if b.Family != "" {
		k.family = targetKey(familyKey(family, b.Family), t)
	}
	return k
}

// residualKeys name a shape's residuals and its family's (empty: none).
type residualKeys struct{ shape, family string }

// offset is the learned correction of a stage's ln estimate: the global
// offset under key global (shrunk toward 0, and 0 while it is within two
// standard errors of 0), then the shape's residual under
// local.shape (shrunk toward the global offset) — or, while the shape has
// none (a statement first seen in this session: other session
// properties), its family's under local.family, the same statement's
// residuals in the sessions it ran in — with the standard deviation
// of each around it (prior: sigma0); shaped reports whether the shape or
// its family had residuals. The family is a fallback, not a level the
// shape is shrunk toward: a shape's own runs are also its family's, and
// would count twice. It reads the history through v.
//
// Each level's sigma is the spread of the residuals around the offset it
// applies (pooledSpread), not around their own mean: an offset held at 0
// or shrunk toward the level above leaves the residuals' mean partly
// uncorrected, and the served interval must cover that too. At a shape's
// level after one run (Shrink 1), with shapes spread around the global
// offset as much as runs around their shape's (each half of the global
// spread σ²), the next run's residual is off the shrunk offset by ¾σ² in
// expectation; the spread around the shape's mean alone gave ½σ², the
// pooled spread ½σ² plus a quarter of the squared distance between the
// shape's residual and the global offset, ¾σ² on average.
func (s *Service) offset(v *reads, global string, local residualKeys, sigma0 float64) (off, sigma float64, shaped bool) {
	k := s.opts.Cascade.Shrink
	sigma2 := sigma0 * sigma0
	if g, ok := v.get(global); ok {
		n := float64(g.Count)
		spread2 := (n*max(g.Var, 0) + k*sigma2) / (n + k)
		// The global offset corrects every new shape, so it applies only
		// once it stands out of its own noise: its mean beyond two
		// standard errors (the spread shrunk toward sigma0, times the
		// variance factor of the recency-weighted mean: 1/n for a plain
		// mean, globalAlpha). A model trained on this cluster then stays
		// the plain model rather than following the residuals' noise; a
		// real offset of another machine passes at once.
		if math.Abs(g.Mean) > 2*math.Sqrt(spread2*meanVariance(g.Count, globalAlpha(s.opts.Cascade.Alpha))) {
			off = n * g.Mean / (n + k)
		}
		sigma2 = pooledSpread(n, g.Mean, g.Var, k, 0, sigma2, off)
	}
	r, ok := v.get(local.shape)
	if !ok && local.family != "" {
		r, ok = v.get(local.family)
	}
	if ok {
		n := float64(r.Count)
		o := (n*r.Mean + k*off) / (n + k)
		sigma2 = pooledSpread(n, r.Mean, r.Var, k, off, sigma2, o)
		off, shaped = o, true
	}
	return off, math.Sqrt(sigma2), shaped
}

// pooledSpread is the mean square around off of n residuals (mean m,
// variance v) pooled with k pseudo-residuals of the prior (mean pm,
// variance pv): each group's variance plus its mean's squared distance
// from off, weighted by its count. With off their pooled mean (the shrunk
// offset) it is the variance of the pooled sample; with off held at 0
// while the residuals' mean is not, it grows by that mean's square.
func pooledSpread(n, m, v, k, pm, pv, off float64) float64 {
	if n+k <= 0 {
		return pv
	}
	return (n*(max(v, 0)+(m-off)*(m-off)) + k*(pv+(pm-off)*(pm-off))) / (n + k)
}

// globalAlpha is the recency weight of the global offsets (keyModel,
// keyText): like the optimizer calibration and the repeats they describe
// the deployment, not one statement, and are fed by every statement
// (slowAlpha). At the history's own alpha the global offset and its
// spread would rest on the last ~9 statements explained, whichever scale
// they ran at, and every new shape's number and interval would move with
// their luck.
func globalAlpha(alpha float64) float64 { return slowAlpha(alpha) }

// Observe learns from a completed query: for each target whose actual
// value a is known (the CPU time always; peak memory and elapsed time
// when positive) its statement's and shape's history, the shape's
// residuals and the global offsets of the stages that predicted it, and,
// when the statement ran before, the target's run-to-run noise
// (repeats.go); the optimizer calibration from the CPU time. It never
// blocks: the write happens on the learner's goroutine (dropped when its
// queue is full). A nil Basis, or a CPU time that is negative or NaN, is
// ignored. When the text stage answered and its background EXPLAIN + model
// is still running (Basis.Pending), the observation waits for it on
// another goroutine (at most the EXPLAIN timeout), so that the model's
// numbers still teach the residuals.
func (s *Service) Observe(b *Basis, a estimate.Actual) {
	if b == nil || s.learn == nil || math.IsNaN(a.CPUSeconds) || a.CPUSeconds < 0 {
		return
	}
	o := observation{b: *b, at: time.Now()}
	o.y[estimate.TargetCPU] = math.Log(max(a.CPUSeconds, minSeconds))
	for _, t := range beyondCPU {
		o.y[t] = lnOrNaN(a.Of(t))
	}
	if o.b.Pending != "" && s.pending.has(o.b.Pending) && s.goBackground(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.settleTimeout())
		defer cancel()
		s.Settle(ctx, &o.b)
		s.learn.enqueue(o)
	}) {
		return
	}
	o.b.Pending = ""
	s.learn.enqueue(o)
}

// HistoryStats are the learner's counters.
type HistoryStats struct {
	Entries           int
	Observed, Dropped uint64
	WriteErrors       uint64
}

// HasHistory reports whether the service learns from completed queries.
func (s *Service) HasHistory() bool { return s.learn != nil }

// HistoryStats reports the history's size and the learner's counters (zero
// without History).
func (s *Service) HistoryStats() HistoryStats {
	if s.learn == nil {
		return HistoryStats{}
	}
	return HistoryStats{Entries: s.learn.store.Len(), Observed: s.learn.observed.Load(),
		Dropped: s.learn.dropped.Load(), WriteErrors: s.learn.errors.Load()}
}

// Flush waits until every observation enqueued so far is written (for
// tests). After Close it returns at once.
func (s *Service) Flush() {
	if s.learn == nil {
		return
	}
	done := make(chan struct{})
	s.learn.mu.RLock()
	if s.learn.closed {
		s.learn.mu.RUnlock()
		return
	}
	s.learn.q <- observation{flush: done}
	s.learn.mu.RUnlock()
	<-done
}

type observation struct {
	b Basis
	// y is ln of the actual value per target (estimate.Target); NaN where
	// not known.
	y     [numTargets]float64
	at    time.Time
	flush chan struct{}
}

// learner writes observations to the store from one goroutine, batching
// what queued up into one Update (one transaction on disk).
type learner struct {
	store                     history.Store
	opts                      CascadeOptions
	log                       *slog.Logger
	mu                        sync.RWMutex // closed and q's closing
	closed                    bool
	q                         chan observation
	done                      chan struct{}
	observed, dropped, errors atomic.Uint64
	// floor caches the run-to-run noise of each target read from its
	// keyRepeat (repeatSigma); floorGen counts this learner's writes to
	// keyRepeat (any target's), which make them stale at once (another
	// replica's, within floorTTL).
	floor    [numTargets]atomic.Pointer[cachedFloor]
	floorGen atomic.Uint64
	// direct makes a statement's reads one store call each, unbatched,
	// as before reads.go (tests compare both).
	direct bool
}

func newLearner(st history.Store, o CascadeOptions, log *slog.Logger) *learner {
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	l := &learner{store: st, opts: o, log: log, q: make(chan observation, o.QueueSize), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *learner) get(key string) (history.Stats, bool) { return l.store.Get(key) }

// drifts are the targets' first-run drifts as the learner's writes see
// them (coldDrift), read from the store in one call (a batch's writes
// move them; the next batch reads them again).
func (l *learner) drifts() (d [numTargets]float64) {
	var keys [numTargets]string
	for _, t := range estimate.Targets {
		keys[t] = targetKey(keyCold, t)
	}
	st, ok := history.GetMany(l.store, keys[:]...)
	for _, t := range estimate.Targets {
		d[t] = coldDrift(st[t], ok[t], max(l.opts.Shrink, 1), l.opts.Alpha, l.opts.RepeatSigma)
	}
	return d
}

func (l *learner) enqueue(o observation) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		l.dropped.Add(1)
		return
	}
	select {
	case l.q <- o:
	default:
		l.dropped.Add(1)
	}
}

func (l *learner) run() {
	defer close(l.done)
	for o := range l.q {
		batch := []observation{o}
	more:
		for len(batch) < 256 {
			select {
			case o, ok := <-l.q:
				if !ok {
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		l.write(batch)
	}
}

func (l *learner) write(batch []observation) {
	var ups []history.Update
	var flushes []chan struct{}
	a := l.opts.Alpha
	// The statements' histories (per target key) as this batch leaves
	// them, for the prediction error of each repeat (a statement may run
	// twice in one batch).
	exact := map[string]history.Stats{}
	repeats := false
	var drifts *[numTargets]float64 // the first-run drifts, read at the batch's first repeat
	var n uint64                    // observations in the batch
	for _, o := range batch {
		if o.flush != nil {
			flushes = append(flushes, o.flush)
			continue
		}
		b, at := o.b, o.at
		add := func(key string, v float64) {
			ups = append(ups, history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats { return s.Add(v, a, at) }})
		}
		addGlobal := func(key string, v float64) {
			ga := globalAlpha(a)
			ups = append(ups, history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats { return s.Add(v, ga, at) }})
		}
		var stored *runs // the statement's history per target, read once (one MGET on Redis)
		for _, t := range estimate.Targets {
			y := o.y[t]
			if math.IsNaN(y) {
				continue
			}
			xk := targetKey(b.Exact, t)
			if b.Exact != "" {
				st, ok := exact[xk]
				if !ok {
					if stored == nil {
						rs := l.readRuns(b.Exact)
						stored = &rs
					}
					st = stored[t]
				}
				if st.Count > 0 {
					if drifts == nil {
						d := l.drifts()
						drifts = &d
					}
					z := repeatError(st, y, a, drifts[t])
					ra := slowAlpha(a)
					ups = append(ups, history.Update{Key: targetKey(keyRepeat, t), Apply: func(s history.Stats, _ bool) history.Stats { return s.Add(z, ra, at) }})
					if st.Count == 1 { // the statement's second run: what its first cost beyond it
						d := y - st.Mean
						ups = append(ups, history.Update{Key: targetKey(keyCold, t), Apply: func(s history.Stats, _ bool) history.Stats { return s.Add(d, ra, at) }})
					}
					repeats = true
				}
				exact[xk] = st.Add(y, a, at)
			}
			add(xk, y)
			add(targetKey(b.Shape, t), y)
			fam := b.Family != ""
			if fam {
				add(targetKey(b.Family, t), y)
			}
			if lm := b.lnModel(t); !math.IsNaN(lm) {
				add(targetKey(shapeKey(keyResidual, b.Shape), t), y-lm)
				if fam {
					add(targetKey(familyKey(keyFamRes, b.Family), t), y-lm)
				}
				addGlobal(targetKey(globalKey(keyModel, b.Engine), t), y-lm)
			}
			if lt := b.lnText(t); !math.IsNaN(lt) {
				add(targetKey(shapeKey(keyTextRes, b.Shape), t), y-lt)
				if fam {
					add(targetKey(familyKey(keyFamText, b.Family), t), y-lt)
				}
				addGlobal(targetKey(globalKey(keyText, b.Engine), t), y-lt)
			}
		}
		if y := o.y[estimate.TargetCPU]; !math.IsNaN(b.LnCost) {
			x, ca, key := b.LnCost, slowAlpha(a), globalKey(keyOptimizer, b.Engine)
			ups = append(ups, history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats { return s.AddXY(x, y, ca, at) }})
		}
		if y := o.y[estimate.TargetCPU]; b.Blend != nil {
			x, dy, ca, key := b.Blend.LnOptimizer-b.Blend.LnModel, y-b.Blend.LnModel, slowAlpha(a), globalKey(keyBlend, b.Engine)
			ups = append(ups, history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats { return s.AddXY(x, dy, ca, at) }})
		}
		ups = coverUpdates(ups, &b, &o.y, at)
		if y := o.y[estimate.TargetCPU]; b.LnRows > 0 {
			x, ca, key := b.LnRows, slowAlpha(a), globalKey(keySize, b.Engine)
			ups = append(ups, history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats { return s.AddXY(x, y, ca, at) }})
		}
		n++
	}
	if len(ups) > 0 {
		if err := l.store.Update(ups...); err != nil {
			l.errors.Add(1)
			l.log.Warn("estimator: history write failed", "error", err)
		}
		if repeats {
			l.floorGen.Add(1)
		}
	}
	// Counted once written: a reader that saw the count sees the history.
	l.observed.Add(n)
	for _, f := range flushes {
		close(f)
	}
}

func (l *learner) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	close(l.q)
	l.mu.Unlock()
	<-l.done
	if err := l.store.Close(); err != nil {
		l.log.Warn("estimator: history close", "error", err)
	}
}
