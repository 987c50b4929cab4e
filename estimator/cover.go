package estimator

import (
	"math"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Interval calibration: each stage's 80% interval of the CPU time is
// widened or narrowed by a factor the deployment learns from its own
// outcomes, so that the intervals it serves cover what they say.
//
// A stage's σ is the best it knows — the text model's quantiles, the
// residuals' spread, the run-to-run noise — but each rests on
// assumptions the deployment may not meet: the text model's quantiles
// came from other data (they covered 89% on Parquet), the residuals'
// spread is shrunk toward a prior, the errors are not log-normal. The
// cascade therefore serves σ·c, with c per stage (estimate.Source) and
// engine, tracked online from whether each served interval held the
// statement's CPU time: after every statement the stage answered,
//
//	ln c ← ln c + η·(miss − 0.2)
//
// (adaptive conformal inference, Gibbs and Candès 2021, on the interval's
// scale: a miss widens by 0.8η, a hit narrows by 0.2η, so that c settles
// where one statement in five falls outside). The step η is
// 1/(n+coverStepN) for the stage's n-th statement, at least coverStep:
// about a running mean over the first twenty, then a recency-weighted one
// that follows the deployment's drift with a σ of ln c near 0.07 (about
// ±3 points of coverage). Not faster: a stage's errors come in runs (one
// template's variants, one scale), and steps of 3/(n+5) chased them:
// thirteen recorded served runs replayed (models/results/cover), the text
// stage's intervals then held 74% of the held-out statements, against 81%
// with these (87% as computed). The miss is judged against the
// interval actually served (the factor of its time included), so the
// long-run share of misses is 20% whatever the stage's σ does meanwhile.
//
// The text stage decides with its calibrated interval when c widens it,
// with its own when c narrows it (deciding); routing's class quantile reads
// the calibrated σ of every stage.

// keyCover is a stage's ln c (Stats.Mean; Count its observations), one
// per source and engine (coverKey).
const keyCover = "g:cover:"

// coverSources are the stages whose CPU interval is calibrated: those with
// a σ of their own. The cheap stage's constant has none.
var coverSources = [...]estimate.Source{estimate.SourceHistory, estimate.SourceText,
	estimate.SourceModel, estimate.SourceModelResidual, estimate.SourceOptimizer}

const (
	coverStep  = 0.03 // the step's floor: its long-run value
	coverStepN = 10.0 // the first steps: 1/(n+coverStepN)
	// maxLnCover bounds |ln c|: a factor beyond 4 would mean the stage's
	// σ is wrong by more than calibration should hide.
	maxLnCover = math.Ln2 * 2
)

// coverTarget is the share of served intervals that should hold the CPU
// time: the interval's two tails (estimate.IntervalQuantile each).
const coverTarget = 1 - 2*estimate.IntervalQuantile

// coverKey is src's key on engine's statements (built once: the hot path
// reads several per statement); "" for a stage not calibrated.
func coverKey(src estimate.Source, engine dialect.Engine) string {
	keys := &coverKeysTrino
	if engine == dialect.Presto {
		keys = &coverKeysPresto
	}
	if int(src) >= len(keys) {
		return ""
	}
	return keys[src]
}

// coverKeysTrino and coverKeysPresto are coverKey's keys by source.
var coverKeysTrino, coverKeysPresto = coverKeysOf(dialect.Trino), coverKeysOf(dialect.Presto)

func coverKeysOf(engine dialect.Engine) (keys [estimate.SourceText + 1]string) {
	for _, src := range coverSources {
		keys[src] = globalKey(keyCover+src.String(), engine)
	}
	return keys
}

// coverScale is c for src's intervals as the reads v see it: 1 without a
// history, for a stage not calibrated, or before its first outcome.
func coverScale(v *reads, src estimate.Source, engine dialect.Engine) float64 {
	k := coverKey(src, engine)
	if v == nil || k == "" {
		return 1
	}
	return factorOf(v.get(k))
}

// factorOf is the factor c a stage's key st (ok: recorded) holds: 1
// before its first outcome.
func factorOf(st history.Stats, ok bool) float64 {
	if !ok || st.Count == 0 {
		return 1
	}
	return math.Exp(max(min(st.Mean, maxLnCover), -maxLnCover))
}

// deciding is e as the text stage decides with it: its CPU σ times src's
// c when c widens it (a copy; e itself unchanged), else e. A stage whose
// intervals over-cover is served narrower intervals, but decides no more
// boldly than its own σ says: c was learned on the statements it chose to
// answer, and a narrower interval would have it answer statements nearer a
// bound than any of those (on Parquet, 0.4 s text answers of statements
// that took 1.1–1.9 s, which the plan model had placed near 1–2 s).
func deciding(v *reads, e *estimate.Estimate, engine dialect.Engine) *estimate.Estimate {
	c := coverScale(v, e.Source, engine)
	if c <= 1 {
		return e
	}
	cp := *e
	cp.Sigma *= c
	return &cp
}

// calibrate scales the σ of the answer e by its stage's c and records the
// served interval in b (LnServed, SigmaServed), which Observe judges.
func calibrate(v *reads, e *estimate.Estimate, b *Basis) {
	if b == nil || coverKey(e.Source, b.Engine) == "" || !(e.CPUSeconds > 0) || !(e.Sigma > 0) {
		return
	}
	e.Sigma *= coverScale(v, e.Source, b.Engine)
	b.LnServed, b.SigmaServed = math.Log(e.CPUSeconds), e.Sigma
}

// coverUpdate is the step of src's c after a statement whose CPU time's
// log y fell inside (hit) or outside the interval b served; ok is false
// when b served none.
func coverUpdate(b *Basis, y float64, at time.Time) (history.Update, bool) {
	key := coverKey(b.Source, b.Engine)
	if key == "" || !(b.SigmaServed > 0) || math.IsNaN(b.LnServed) || math.IsNaN(y) {
		return history.Update{}, false
	}
	z := estimate.NormalQuantile(1 - estimate.IntervalQuantile)
	miss := 0.0
	if math.Abs(y-b.LnServed) > z*b.SigmaServed {
		miss = 1
	}
	return history.Update{Key: key, Apply: func(s history.Stats, _ bool) history.Stats {
		return coverStepped(s, miss, at)
	}}, true
}

// coverStepped is s after one more outcome (miss 1 or 0).
func coverStepped(s history.Stats, miss float64, at time.Time) history.Stats {
	s.Count++
	eta := max(coverStep, 1/(float64(s.Count)+coverStepN))
	s.Mean = max(min(s.Mean+eta*(miss-(1-coverTarget)), maxLnCover), -maxLnCover)
	s.Last = at
	return s
}

// CoverScales are the interval factors c the history holds, per engine
// (Trino, PrestoDB) and stage, with the count of outcomes each learned
// from (/metrics shows them), read in one store call; nil without a
// history.
func (s *Service) CoverScales() []estimate.IntervalStats {
	if s.learn == nil {
		return nil
	}
	engines := [...]dialect.Engine{dialect.Trino, dialect.Presto}
	keys := make([]string, 0, len(engines)*len(coverSources))
	for _, eng := range engines {
		for _, src := range coverSources {
			keys = append(keys, coverKey(src, eng))
		}
	}
	st, ok := history.GetMany(s.learn.store, keys...)
	out := make([]estimate.IntervalStats, 0, len(keys))
	for i, eng := range engines {
		for j, src := range coverSources {
			k := i*len(coverSources) + j
			out = append(out, estimate.IntervalStats{Engine: string(eng), Source: src.String(), Factor: factorOf(st[k], ok[k]), Outcomes: st[k].Count})
		}
	}
	return out
}
