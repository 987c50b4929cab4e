package estimator

import (
	"math"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// Repeats: what a statement's own runs say of its next one.
//
// Two runs of one statement differ by the load and the JIT's warmth: the
// run-to-run noise σ, one per deployment, learned from its repeats. Each
// time a statement that ran before completes, the learner folds the error
// of its history's prediction, ln actual − the statement's mean before
// this run, into keyRepeat, scaled by 1/√(1+v) (repeatError): the mean of n
// runs is itself off by σ²·v (v = 1/n for a plain mean), so the scaled
// errors' RMS is σ whatever the counts. repeatSigma shrinks that RMS
// toward CascadeOptions.RepeatSigma by Shrink repeats.
//
// A statement's first run is often its costliest: new literals compile
// new code, and its data is read cold. The first run's excess is the
// deployment's too, learned from its repeats: each time a statement that
// ran once completes, the learner folds ln second run − ln first run into
// keyCold (signed; firstRunDrift). A statement's runs then predict its
// next one from their mean corrected by the first run's share of it
// (runsMean): after one run, the first run plus the drift; after many,
// nearly their mean. The run-to-run noise is measured around that
// corrected mean. On a deployment whose first runs cost what later ones
// do the drift stays 0 (it applies only beyond two standard errors).
//
// A statement's next run is then predicted from its mean with variance
// u + r (runNoise): r the noise of one run, the statement's own spread
// shrunk toward σ² and at least σ², and u = r·v that of the mean. The
// history's intervals are √(u+r) (historyEstimate, standIn, busyEstimate),
// and temper weighs a later stage's number against the statement's mean by
// precision.

// floorTTL is how long the run-to-run noise read from the history is
// reused: another replica's repeats reach this one within it (this
// replica's own at once, floorGen). The history stage then reads one key,
// not two, on the hot path.
const floorTTL = time.Second

type cachedFloor struct {
	sigma, drift float64
	gen          uint64
	until        time.Time
}

// slowAlpha is the recency weight of the deployment-wide statistics that
// many statements feed — a repeat's error in keyRepeat, the optimizer
// calibration's line in keyOptimizer: 0.01 (the last ~200 observations
// weigh most), or alpha when lower (0: a plain mean). They describe the
// deployment, not one statement: at the history's own 0.2 the repeats'
// RMS would rest on the last ~9 repeats and every interval's width would
// move by ±25% with their luck, and the calibration's slope would follow
// the sizes of the last few statements explained.
func slowAlpha(alpha float64) float64 { return min(alpha, 0.01) }

// meanVariance is the variance of the history's mean of n runs, in units
// of one run's: the weights max(alpha, 1/k) of history.Stats give the
// plain mean's 1/n up to n = 1/alpha, then a variance tending to
// alpha/(2−alpha) (the EWMA's). +Inf for n = 0.
func meanVariance(n uint64, alpha float64) float64 {
	if n == 0 {
		return math.Inf(1)
	}
	if !(alpha > 0) || float64(n)*alpha <= 1 {
		return 1 / float64(n)
	}
	if alpha >= 1 {
		return 1
	}
	// Up to k0 = ⌊1/alpha⌋ runs the weight is 1/k; after, each run gives
	// v ← (1−alpha)²·v + alpha², whose fixed point is alpha/(2−alpha).
	k0 := math.Floor(1 / alpha)
	fix := alpha / (2 - alpha)
	return fix + math.Pow(1-alpha, 2*(float64(n)-k0))*(1/k0-fix)
}

// repeatError is the scaled error of a statement's history st (Count > 0)
// on a run of ln CPU y: |y − runsMean|/√(1+v) (drift: the learned
// first-run drift), whose mean is the run-to-run noise's mean absolute
// deviation.
func repeatError(st history.Stats, y, alpha, drift float64) float64 {
	return math.Abs(y-runsMean(st, alpha, drift)) / math.Sqrt(1+meanVariance(st.Count, alpha))
}

// firstWeight is the weight of a statement's first run in the mean of its
// n runs (history.Stats: weights max(alpha, 1/k)): 1/n up to n = 1/alpha,
// then shrinking by 1 − alpha a run. 0 for n = 0.
func firstWeight(n uint64, alpha float64) float64 {
	if n == 0 {
		return 0
	}
	if !(alpha > 0) || float64(n)*alpha <= 1 {
		return 1 / float64(n)
	}
	if alpha >= 1 {
		return 0
	}
	k0 := math.Floor(1 / alpha)
	return math.Pow(1-alpha, float64(n)-k0) / k0
}

// runsMean is what a statement's own runs st (Count > 0) predict of its
// next run's log: their mean, less the first run's excess over later
// runs (−drift, the learned first-run drift) in the share the first run
// holds of the mean (firstWeight).
func runsMean(st history.Stats, alpha, drift float64) float64 {
	return st.Mean + firstWeight(st.Count, alpha)*drift
}

// coldDrift is the first-run drift that the statistics g of keyCold
// (ok: present) teach: their mean (ln second run − ln first run) once it
// stands beyond two standard errors of 0 (as the global offsets, offset:
// their spread shrunk by shrink toward that of the difference of two runs
// with the prior run-to-run noise prior, √2·prior), shrunk toward 0 by
// shrink repeats; 0 before.
func coldDrift(g history.Stats, ok bool, shrink, alpha, prior float64) float64 {
	if !ok || g.Count == 0 {
		return 0
	}
	n := float64(g.Count)
	spread2 := (n*max(g.Var, 0) + shrink*2*prior*prior) / (n + shrink)
	if math.Abs(g.Mean) <= 2*math.Sqrt(spread2*meanVariance(g.Count, slowAlpha(alpha))) {
		return 0
	}
	return n * g.Mean / (n + shrink)
}

// repeatSigma is the run-to-run noise of target t: √(π/2) times the mean
// absolute scaled error of the target's repeats (a normal's σ from its
// mean absolute deviation), shrunk toward CascadeOptions.RepeatSigma by
// Shrink repeats (at least one). Each target learns its own (the elapsed
// time, which queueing and load move, more than the CPU time; the peak
// memory less) from the one prior. Read from the history at most once per
// floorTTL. Not their RMS: a statement's first run after a pause (cold
// caches, JIT) can cost four times its next, and a few such squares would
// widen every history interval past the 80% it means (an 80% interval
// covered 98% of the next runs on Parquet with the RMS; the mean absolute
// error weighs an outlier by its size, not its square).
func (s *Service) repeatSigma(t estimate.Target) float64 { return s.repeatSigmaOf(nil, t) }

// repeatSigmaOf is repeatSigma for a statement whose reads are v (nil:
// none): when the cached value is stale, the values v read (at the
// statement's stage boundary: reads.go) stand in for a read of its own,
// without refreshing the cache.
func (s *Service) repeatSigmaOf(v *reads, t estimate.Target) float64 {
	sigma, _ := s.repeats(v, t)
	return sigma
}

// firstRunDrift is target t's learned first-run drift (coldDrift), read
// with the run-to-run noise (repeats) through v (nil: none).
func (s *Service) firstRunDrift(v *reads, t estimate.Target) float64 {
	_, drift := s.repeats(v, t)
	return drift
}

// repeats reads target t's run-to-run noise (repeatSigma) and first-run
// drift (firstRunDrift) in one store call, at most once per floorTTL;
// with v (a statement's reads) a stale cache is answered from v's values
// (fetch refreshes the cache when it reads them).
func (s *Service) repeats(v *reads, t estimate.Target) (sigma, drift float64) {
	l := s.learn
	gen, now := l.floorGen.Load(), time.Now()
	if c := l.floor[t].Load(); c != nil && c.gen == gen && now.Before(c.until) {
		return c.sigma, c.drift
	}
	if v != nil && !l.direct {
		g, ok := v.get(targetKey(keyRepeat, t))
		c, okc := v.get(targetKey(keyCold, t))
		return floorOf(&s.opts.Cascade, g, ok), driftOf(&s.opts.Cascade, c, okc)
	}
	st, ok := history.GetMany(l.store, targetKey(keyRepeat, t), targetKey(keyCold, t))
	sigma, drift = floorOf(&s.opts.Cascade, st[0], ok[0]), driftOf(&s.opts.Cascade, st[1], ok[1])
	l.floor[t].Store(&cachedFloor{sigma: sigma, drift: drift, gen: gen, until: now.Add(floorTTL)})
	return sigma, drift
}

// driftOf is the first-run drift that a target's keyCold statistics g
// (ok: recorded) give under co (coldDrift).
func driftOf(co *CascadeOptions, g history.Stats, ok bool) float64 {
	return coldDrift(g, ok, max(co.Shrink, 1), co.Alpha, co.RepeatSigma)
}

// floorOf is the run-to-run noise that a target's keyRepeat statistics g
// (ok: recorded) give under co (repeatSigma).
func floorOf(co *CascadeOptions, g history.Stats, ok bool) float64 {
	sigma := co.RepeatSigma
	if ok && g.Count > 0 {
		n, k := float64(g.Count), max(co.Shrink, 1)
		mad := math.Sqrt(math.Pi/2) * g.Mean // the EWMA of the absolute errors
		sigma = (n*mad + k*co.RepeatSigma) / (n + k)
	}
	return sigma
}

// runNoise is what a statement's (or a shape's) runs st (Count > 0) of
// target t predict of its next run, as variances of the target's log: u
// of their mean about its true value, r of one run about it. r is the
// runs' spread shrunk toward the target's run-to-run noise σ² by Shrink
// runs (at least one) and at least σ² (and sigmaFloor²); u is r times the
// mean's variance factor (meanVariance), raised so that u + r is at least
// the spread shrunk toward prior² (standIn's priors; 0: none).
func (s *Service) runNoise(v *reads, t estimate.Target, st history.Stats, prior float64) (u, r float64) {
	co := &s.opts.Cascade
	f := max(s.repeatSigmaOf(v, t), sigmaFloor)
	n, k := float64(st.Count), max(co.Shrink, 1)
	r = max(f*f, (n*max(st.Var, 0)+k*f*f)/(n+k))
	u = r * meanVariance(st.Count, co.Alpha)
	if prior > 0 {
		u = max(u, (n*max(st.Var, 0)+k*prior*prior)/(n+k)-r)
	}
	return u, r
}

// temper combines e, the answer of a stage after the history, with the
// statement's own runs (request.exact) when it ran before, per target:
// for each target the stage set (a known Quantity; for the CPU time a
// positive CPUSeconds) whose runs the history holds, in the target's log,
// the stage's learned offset is first held between its raw number and the
// runs' mean m (an offset learned from other statements or shapes may
// move the number toward m, never away from it nor past it), then the
// number x and m are weighted by precision, x with the stage's σ², m with
// u (runNoise, as standIn's for reruns). The served σ is that of the
// combined mean plus one run's noise r: √(u·σ²/(u+σ²) + r), never below
// the run-to-run noise. The stage's σ is its spread against whole runs,
// so it weighs x a little less than an error of x alone would; the
// statement's runs, the better evidence, gain by it. A target beyond the
// CPU time that the stage does not predict is served from the runs alone
// (their mean, √(u+r)), as the history stage would. Source stays the
// stage's; the history's answers, the cheap stage's and the CPU time of
// estimates without a positive number are left alone.
func (s *Service) temper(e *estimate.Estimate, r *request) {
	if r.b == nil {
		return
	}
	switch e.Source {
	case estimate.SourceModel, estimate.SourceModelResidual, estimate.SourceText, estimate.SourceOptimizer:
	default:
		return
	}
	for _, t := range estimate.Targets {
		st := r.exact[t]
		if st.Count == 0 {
			continue
		}
		q := e.Of(t)
		if t == estimate.TargetCPU && !(q.Median > 0) {
			continue
		}
		if t != estimate.TargetCPU && !q.Known() {
			u, noise := s.runNoise(r.reads, t, st, 0)
			e.Set(t, estimate.Quantity{Median: math.Exp(runsMean(st, s.opts.Cascade.Alpha, s.firstRunDrift(r.reads, t))), Sigma: math.Sqrt(u + noise)})
			continue
		}
		raw := math.NaN() // the stage's number before its learned offset
		switch e.Source {
		case estimate.SourceModel, estimate.SourceModelResidual:
			if t == estimate.TargetCPU {
				if e.ModelCPUSeconds > 0 {
					raw = math.Log(e.ModelCPUSeconds)
				}
			} else {
				raw = r.b.lnModel(t)
			}
		case estimate.SourceText:
			raw = r.b.lnText(t)
		case estimate.SourceOptimizer: // its fit is its calibration: no offset
		}
		m, x := runsMean(st, s.opts.Cascade.Alpha, s.firstRunDrift(r.reads, t)), math.Log(q.Median)
		if !math.IsNaN(raw) {
			x = min(max(x, min(raw, m)), max(raw, m))
		}
		u, noise := s.runNoise(r.reads, t, st, 0)
		vs := max(q.Sigma*q.Sigma, sigmaFloor*sigmaFloor)
		w := vs / (vs + u) // m's weight
		e.Set(t, estimate.Quantity{Median: math.Exp(w*m + (1-w)*x), Sigma: math.Sqrt(u*vs/(u+vs) + noise)})
	}
}
