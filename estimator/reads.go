package estimator

import (
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// A statement's history reads, batched: the keys its estimate needs are
// read in as few store calls as possible (history.GetMany: one MGET on
// Redis, one transaction on disk), one per stage boundary:
//
//   - the history stage reads the statement's own runs (every target's),
//     with the run-to-run noise of the targets whose cached floor is stale
//     (repeatSigma): a repeat the history answers costs one call;
//   - the first read after it (the estimate cache's, the text stage's, the
//     model's or the optimizer's, whichever runs first) reads in one call
//     every key the stages after the history may need (pending, planned
//     by the history stage): the global offsets, the shape's and the
//     family's residuals of the text and plan models, the size line, the
//     optimizer calibration, the shape's runs when the statement has none,
//     the run-to-run noise.
//
// A key outside those (the family's runs of busyEstimate, over the EXPLAIN
// bound) is read when asked, and kept. Reading a key once per statement
// gives the numbers the stages' own reads gave, but for writes landing
// between the batch and the read they replace (another replica's, or an
// observation of this one: the estimate is made from the history as it
// stood at the boundary).
type reads struct {
	l   *learner
	co  *CascadeOptions
	got map[string]read
	// pending are the keys the next miss reads with it (nil: none).
	pending []string
	// calls counts the store calls made (tests, BenchmarkDecisionRedis).
	calls int
}

// read is one key's value as the store answered it.
type read struct {
	st history.Stats
	ok bool
}

// reads starts the reads of one statement (nil without a history).
func (s *Service) reads() *reads {
	if s.learn == nil {
		return nil
	}
	return &reads{l: s.learn, co: &s.opts.Cascade, got: make(map[string]read, 32)}
}

// fetch reads keys (those not read yet) in one store call, and refreshes
// the cached run-to-run noise and first-run drift of the targets whose
// keyRepeat key it read (as repeats would from the same values; a
// target's keyCold key is read with its keyRepeat key).
func (v *reads) fetch(keys ...string) {
	want := keys[:0:0]
	for _, k := range keys {
		if _, done := v.got[k]; !done && k != "" && !contains(want, k) {
			want = append(want, k)
		}
	}
	if len(want) == 0 {
		return
	}
	for _, k := range want { // a target's noise and first-run drift are read and cached together
		if t, isFloor := floorTarget(k); isFloor {
			if c := targetKey(keyCold, t); !contains(want, c) {
				if _, done := v.got[c]; !done {
					want = append(want, c)
				}
			}
		}
	}
	gen := v.l.floorGen.Load()
	st, ok := history.GetMany(v.l.store, want...)
	v.calls++
	now := time.Now()
	for i, k := range want {
		v.got[k] = read{st[i], ok[i]}
	}
	for i, k := range want {
		if t, isFloor := floorTarget(k); isFloor {
			c := v.got[targetKey(keyCold, t)]
			v.l.floor[t].Store(&cachedFloor{sigma: floorOf(v.co, st[i], ok[i]), drift: driftOf(v.co, c.st, c.ok), gen: gen, until: now.Add(floorTTL)})
		}
	}
}

// floorTarget is the target whose run-to-run noise key is k.
func floorTarget(k string) (estimate.Target, bool) {
	for _, t := range estimate.Targets {
		if k == targetKey(keyRepeat, t) {
			return t, true
		}
	}
	return 0, false
}

func contains(ks []string, k string) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// get is key's statistics: read already, else read now with the pending
// keys. With the learner's direct set (tests), the store's Get, as before
// the batching.
func (v *reads) get(key string) (history.Stats, bool) {
	if v.l.direct {
		v.calls++
		return v.l.store.Get(key)
	}
	if r, done := v.got[key]; done {
		return r.st, r.ok
	}
	keys := append(v.pending, key)
	v.pending = nil
	v.fetch(keys...)
	r := v.got[key]
	return r.st, r.ok
}

// runs is key's statistics for every target (learner.readRuns), read as
// get reads.
func (v *reads) runs(key string) (rs runs) {
	if v.l.direct {
		v.calls++
		return v.l.readRuns(key)
	}
	var keys [numTargets]string
	for _, t := range estimate.Targets {
		keys[t] = targetKey(key, t)
	}
	v.fetch(append(v.pending, keys[:]...)...)
	v.pending = nil
	for _, t := range estimate.Targets {
		if r := v.got[keys[t]]; r.ok {
			rs[t] = r.st
		}
	}
	return rs
}

// staleFloors are the keyRepeat and keyCold keys of the targets whose
// cached run-to-run noise is stale (repeatSigma reads them on its next call).
func (l *learner) staleFloors(now time.Time) []string {
	var ks []string
	gen := l.floorGen.Load()
	for _, t := range estimate.Targets {
		if c := l.floor[t].Load(); c == nil || c.gen != gen || !now.Before(c.until) {
			ks = append(ks, targetKey(keyRepeat, t), targetKey(keyCold, t))
		}
	}
	return ks
}

// planAfterHistory sets the keys the stages after the history stage may
// read for r (its Basis set), read together at the first of those reads:
// the plan model's global offset and residuals (the estimate cache, the
// model stage, the text stage's σ after the plan, learnReason's residual
// count), the optimizer calibration and the blend line, and, when the text stage runs, its
// offsets and residuals, the size line and the shape's runs (standIn,
// when the statement has none of its own); and the run-to-run noise of
// every target (repeatSigmaOf).
func (s *Service) planAfterHistory(r *request) {
	v, b := r.reads, r.b
	if v == nil || b == nil {
		return
	}
	ks := make([]string, 0, 32)
	residuals := func(global, shape, family string) {
		for _, t := range estimate.Targets {
			rk := b.residualKeys(shape, family, t)
			ks = append(ks, targetKey(globalKey(global, b.Engine), t), rk.shape)
			if rk.family != "" {
				ks = append(ks, rk.family)
			}
		}
	}
	residuals(keyModel, keyResidual, keyFamRes)
	ks = append(ks, globalKey(keyOptimizer, b.Engine), globalKey(keyBlend, b.Engine))
	if s.opts.Cascade.Explain != ExplainAlways {
		residuals(keyText, keyTextRes, keyFamText)
		ks = append(ks, globalKey(keySize, b.Engine))
		if r.exact[estimate.TargetCPU].Count == 0 {
			for _, t := range estimate.Targets {
				ks = append(ks, targetKey(b.Shape, t))
			}
		}
	}
	// calibrate's factors (and the text stage's decision)
	ks = append(ks, coverKeysOf(b.Engine).all...)
	for _, t := range estimate.Targets { // temper's, after an EXPLAIN may outlast the cached ones
		ks = append(ks, targetKey(keyRepeat, t), targetKey(keyCold, t))
	}
	v.pending = ks
}
