package estimator

import (
	"math"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Interval calibration: each stage's 80% interval of each target (the CPU
// time, the peak memory, the elapsed time) is widened or narrowed by a
// factor the deployment learns from its own outcomes, so that the
// intervals it serves cover what they say.
//
// A stage's σ is the best it knows — the text model's quantiles, the
// residuals' spread, the run-to-run noise — but each rests on
// assumptions the deployment may not meet: the text model's quantiles
// came from other data (they covered 89% on Parquet), the residuals'
// spread is shrunk toward a prior, the errors are not log-normal. The
// cascade therefore serves σ·c, with c per stage (estimate.Source),
// target and engine, tracked online from whether each served interval held
// what the statement took: after every statement the stage answered, per
// target the query reported,
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
// The two stages that answer from the statement's own past — history (its
// runs' spread) and model+residual (its shape's residuals' spread) — also
// share a factor: c = c_stage · c_local, each stepped by the same miss.
// Their σ is a spread of the deployment's own errors, and what a spread
// says of an 80% interval depends on the errors' tails, not on the stage:
// log-errors with heavy tails (most runs close, a few far) put the 80%
// quantile inside 1.28 spreads, and both stages' intervals over-covered
// alike (history 85%, model+residual 87% as computed). The shared factor
// learns that from both stages' outcomes, about twice model+residual's
// own; each stage's own factor the rest. Replayed on the thirteen runs,
// model+residual's intervals held 83% against 85.5% with its own factor
// alone, history's 79.5% against 81%; the text stage and the model, whose
// σ come from trained quantiles and from new shapes, keep their own
// (grouped with them, the text stage's fell to 76.5%).
//
// Each target has its factors: a stage's σ of the peak memory rests on
// other assumptions than its σ of the CPU time (the memory's runs vary
// less, the elapsed time's with the cluster's load), and guardrails and
// memory-bounded classes read those intervals.
//
// The text stage decides with its calibrated interval when c widens it,
// with its own when c narrows it (deciding), per target; routing's class
// quantile and the guardrails read the calibrated σ of every stage.

// keyCover is a stage's ln c (Stats.Mean; Count its observations), one
// per source, engine and target (coverKey).
const keyCover = "g:cover:"

// coverSources are the stages whose intervals are calibrated: those with
// a σ of their own. The cheap stage's constant has none.
var coverSources = [...]estimate.Source{estimate.SourceHistory, estimate.SourceText,
	estimate.SourceModel, estimate.SourceModelResidual, estimate.SourceOptimizer}

// coverLocal are the stages whose factor is shared (c_local): those whose
// σ is a spread of the statement's own runs or its shape's residuals.
var coverLocal = [...]estimate.Source{estimate.SourceHistory, estimate.SourceModelResidual}

const (
	coverStep  = 0.03 // the step's floor: its long-run value
	coverStepN = 10.0 // the first steps: 1/(n+coverStepN)
	// maxLnCover bounds |ln c|: a factor beyond 4 would mean the stage's
	// σ is wrong by more than calibration should hide.
	maxLnCover = math.Ln2 * 2
)

// coverKey is src's key of target t on engine's statements (built once:
// the hot path reads several per statement); "" for a stage not
// calibrated.
func coverKey(src estimate.Source, engine dialect.Engine, t estimate.Target) string {
	keys := coverKeysOf(engine)
	if int(src) >= len(keys.own[t]) {
		return ""
	}
	return keys.own[t][src]
}

// coverLocalKey is the key of c_local of target t on engine's statements
// when src shares it, else "".
func coverLocalKey(src estimate.Source, engine dialect.Engine, t estimate.Target) string {
	for _, l := range coverLocal {
		if src == l {
			return coverKeysOf(engine).shared[t]
		}
	}
	return ""
}

// coverKeys are an engine's factor keys: each stage's own by target and
// source, c_local's by target, and those read together.
type coverKeys struct {
	own    [numTargets][estimate.SourceText + 1]string
	shared [numTargets]string
	all    []string // every key: what the stages after the history read
	// history are the history stage's own and the shared ones, per
	// target: what its first read batches.
	history []string
}

var coverKeysTrino, coverKeysPresto = newCoverKeys(dialect.Trino), newCoverKeys(dialect.Presto)

func coverKeysOf(engine dialect.Engine) *coverKeys {
	if engine == dialect.Presto {
		return &coverKeysPresto
	}
	return &coverKeysTrino
}

func newCoverKeys(engine dialect.Engine) (k coverKeys) {
	for _, t := range estimate.Targets {
		for _, src := range coverSources {
			k.own[t][src] = targetKey(globalKey(keyCover+src.String(), engine), t)
			k.all = append(k.all, k.own[t][src])
		}
		k.shared[t] = targetKey(globalKey(keyCover+"local", engine), t)
		k.all = append(k.all, k.shared[t])
		k.history = append(k.history, k.own[t][estimate.SourceHistory], k.shared[t])
	}
	return k
}

// coverScale is c for src's intervals of target t as the reads v see it:
// 1 without a history, for a stage not calibrated, or before its first
// outcome.
func coverScale(v *reads, src estimate.Source, engine dialect.Engine, t estimate.Target) float64 {
	k := coverKey(src, engine, t)
	if v == nil || k == "" {
		return 1
	}
	ln := lnFactorOf(v.get(k))
	if kl := coverLocalKey(src, engine, t); kl != "" {
		ln += lnFactorOf(v.get(kl))
	}
	return factorOf(ln)
}

// lnFactorOf is the ln c a factor's key st (ok: recorded) holds: 0 before
// its first outcome.
func lnFactorOf(st history.Stats, ok bool) float64 {
	if !ok || st.Count == 0 {
		return 0
	}
	return st.Mean
}

// factorOf is the factor of a stage whose keys hold ln c ln in all,
// bounded as each key is.
func factorOf(ln float64) float64 { return math.Exp(max(min(ln, maxLnCover), -maxLnCover)) }

// deciding is e as the text stage decides with it: each target's σ times
// src's c for it when c widens it (a copy; e itself unchanged), else e. A
// stage whose intervals over-cover is served narrower intervals, but
// decides no more boldly than its own σ says: c was learned on the
// statements it chose to answer, and a narrower interval would have it
// answer statements nearer a bound than any of those (on Parquet, 0.4 s
// text answers of statements that took 1.1–1.9 s, which the plan model
// had placed near 1–2 s).
func deciding(v *reads, e *estimate.Estimate, engine dialect.Engine) *estimate.Estimate {
	var cp *estimate.Estimate
	for _, t := range estimate.Targets {
		q := e.Of(t)
		if !(q.Sigma > 0) {
			continue
		}
		if c := coverScale(v, e.Source, engine, t); c > 1 {
			if cp == nil {
				x := *e
				cp = &x
			}
			q.Sigma *= c
			cp.Set(t, q)
		}
	}
	if cp == nil {
		return e
	}
	return cp
}

// calibrate scales the σ of each target of the answer e by its stage's c
// and records the served intervals in b (Served), which Observe judges.
func calibrate(v *reads, e *estimate.Estimate, b *Basis) {
	if b == nil || coverKey(e.Source, b.Engine, estimate.TargetCPU) == "" {
		return
	}
	for _, t := range estimate.Targets {
		q := e.Of(t)
		if !q.Known() || !(q.Sigma > 0) {
			continue
		}
		q.Sigma *= coverScale(v, e.Source, b.Engine, t)
		e.Set(t, q)
		b.Served[t] = q
	}
}

// coverUpdates appends to ups the steps of the factors of b's stage (its
// own, and c_local when it shares it), per target whose log y the query
// reported (NaN: not), after the value fell inside (hit) or outside the
// interval b served; none for a target b served none of.
func coverUpdates(ups []history.Update, b *Basis, y *[numTargets]float64, at time.Time) []history.Update {
	z := estimate.NormalQuantile(1 - estimate.IntervalQuantile)
	for _, t := range estimate.Targets {
		key, q := coverKey(b.Source, b.Engine, t), b.Served[t]
		if key == "" || !q.Known() || !(q.Sigma > 0) || math.IsNaN(y[t]) {
			continue
		}
		miss := 0.0
		if math.Abs(y[t]-math.Log(q.Median)) > z*q.Sigma {
			miss = 1
		}
		step := func(s history.Stats, _ bool) history.Stats { return coverStepped(s, miss, at) }
		ups = append(ups, history.Update{Key: key, Apply: step})
		if kl := coverLocalKey(b.Source, b.Engine, t); kl != "" {
			ups = append(ups, history.Update{Key: kl, Apply: step})
		}
	}
	return ups
}

// coverStepped is s after one more outcome (miss 1 or 0).
func coverStepped(s history.Stats, miss float64, at time.Time) history.Stats {
	s.Count++
	eta := max(coverStep, 1/(float64(s.Count)+coverStepN))
	s.Mean = max(min(s.Mean+eta*(miss-(1-estimate.IntervalCoverage)), maxLnCover), -maxLnCover)
	s.Last = at
	return s
}

// CoverScales are the interval factors c the history holds, per engine
// (Trino, PrestoDB), target and stage (c_local included where the stage
// shares it), with the count of outcomes each stage learned from (/metrics
// shows them), read in one store call; nil without a history.
func (s *Service) CoverScales() []estimate.IntervalStats {
	if s.learn == nil {
		return nil
	}
	engines := [...]dialect.Engine{dialect.Trino, dialect.Presto}
	var keys []string
	for _, eng := range engines {
		keys = append(keys, coverKeysOf(eng).all...)
	}
	st, ok := history.GetMany(s.learn.store, keys...)
	got := make(map[string]int, len(keys))
	for i, k := range keys {
		got[k] = i
	}
	ln := func(k string) (float64, uint64) {
		i := got[k]
		return lnFactorOf(st[i], ok[i]), st[i].Count
	}
	out := make([]estimate.IntervalStats, 0, len(engines)*numTargets*len(coverSources))
	for _, eng := range engines {
		for _, t := range estimate.Targets {
			for _, src := range coverSources {
				own, n := ln(coverKey(src, eng, t))
				if kl := coverLocalKey(src, eng, t); kl != "" {
					shared, _ := ln(kl)
					own += shared
				}
				out = append(out, estimate.IntervalStats{Engine: string(eng), Target: t.String(), Source: src.String(), Factor: factorOf(own), Outcomes: n})
			}
		}
	}
	return out
}
