package estimator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/testing/redistest"
)

// meanVariance against history.Stats' own weights, max(alpha, 1/k).
func TestMeanVarianceFollowsTheHistoryWeights(t *testing.T) {
	for _, alpha := range []float64{0, 0.07, 0.2, 0.3, 0.5, 1} {
		v := 0.0
		for n := uint64(1); n <= 80; n++ {
			a := max(alpha, 1/float64(n))
			v = (1-a)*(1-a)*v + a*a
			if got := meanVariance(n, alpha); math.Abs(got-v) > 1e-12 {
				t.Fatalf("alpha %g, %d runs: %.15g, want %.15g", alpha, n, got, v)
			}
		}
	}
}

// The run-to-run noise is learned from the deployment's repeats: statements
// whose runs scatter log-normally by σ = 0.3 around their own cost teach a
// noise of 0.3, and the history's 80% intervals then hold 80% of the next
// runs, whatever the statement's count. Every store, since the noise is
// one more key.
func TestRepeatsTeachTheRunToRunNoise(t *testing.T) {
	const sigma = 0.3
	for _, st := range []struct {
		name string
		open func(t *testing.T) history.Store
	}{
		{"memory", func(*testing.T) history.Store { return history.NewMemory(0) }},
		{"bolt", func(t *testing.T) history.Store {
			b, err := history.OpenBolt(t.TempDir()+"/h.db", 0)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"redis", func(t *testing.T) history.Store {
			rs := redistest.Start(t)
			r, err := history.OpenRedis(history.RedisOptions{URL: "redis://" + rs.Addr, Prefix: "repeats:", Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			return r
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			s := NewService(nil, ServiceOptions{Workers: 1, History: st.open(t), Cascade: defaults})
			defer s.Close()
			rng := rand.New(rand.NewPCG(7, 11))
			type stmt struct {
				sql       string
				mu        float64 // its true ln CPU
				runs, ran int
			}
			stmts := func(prefix string, n, minRuns, maxRuns int) []*stmt {
				out := make([]*stmt, n)
				for i := range out {
					out[i] = &stmt{sql: fmt.Sprintf("SELECT * FROM %s WHERE k = %d", prefix, i), mu: -3 + 7*rng.Float64(),
						runs: minRuns + rng.IntN(maxRuns-minRuns+1)}
				}
				return out
			}
			run := func(x *stmt) float64 { return math.Exp(x.mu + sigma*rng.NormFloat64()) }
			// Runs go in rounds, one flush a round: a round's observations
			// are few batches (few transactions on disk).
			teach := func(all []*stmt) {
				for round := 0; ; round++ {
					more := false
					for _, x := range all {
						if x.ran < x.runs {
							exact, shape := HistoryKeys(x.sql, alice)
							s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}, estimate.Actual{CPUSeconds: run(x)})
							x.ran++
							more = true
						}
					}
					s.Flush()
					if !more {
						return
					}
				}
			}

			// 400 statements, 2–4 runs each: ~800 repeats.
			teach(stmts("learn", 400, 2, 4))
			g, _ := s.learn.get(keyRepeat)
			f := s.repeatSigma(estimate.TargetCPU)
			t.Logf("run-to-run noise learned from %d repeats: %.3f (true %.2f, prior %.2f)", g.Count, f, sigma, defaults.RepeatSigma)
			if g.Count < 700 || math.Abs(f/sigma-1) > 0.2 {
				t.Fatalf("learned noise %.3f from %d repeats; want %.2f ± 20%% from ~800", f, g.Count, sigma)
			}

			// 2000 new statements with 1–4 runs: the history's interval
			// (the history stage's, or before min_count the stand-in's)
			// against the next run.
			fresh := stmts("next", 2000, 1, 4)
			teach(fresh)
			t.Logf("noise after them: %.3f", s.repeatSigma(estimate.TargetCPU))
			var in, all [5]int
			for _, x := range fresh {
				r := newRequest(nil, x.sql)
				e, err := historyStage{}.run(s, r)
				if err != nil {
					t.Fatal(err)
				}
				if e == nil {
					e = s.standIn(r.reads, r.kind, r.b, r.exact)
				}
				lo, hi := e.CPUSeconds*math.Exp(-1.2816*e.Sigma), e.CPUSeconds*math.Exp(1.2816*e.Sigma)
				if y := run(x); lo <= y && y <= hi {
					in[x.runs]++
				}
				all[x.runs]++
			}
			total, covered := 0, 0
			for n := 1; n <= 4; n++ {
				total, covered = total+all[n], covered+in[n]
				cov := float64(in[n]) / float64(all[n])
				t.Logf("after %d runs: %d/%d next runs inside the 80%% interval (%.1f%%)", n, in[n], all[n], 100*cov)
				if cov < 0.72 || cov > 0.88 {
					t.Errorf("after %d runs: the 80%% interval holds %.1f%% of the next runs; want ~80%%", n, 100*cov)
				}
			}
			if cov := float64(covered) / float64(total); cov < 0.75 || cov > 0.85 {
				t.Errorf("the 80%% interval holds %.1f%% of the next runs; want 75–85%%", 100*cov)
			}
		})
	}
}

// Before any repeat the noise is the prior; a repeat is learned only from a
// statement that ran before, and its history's mean before this run.
func TestRepeatErrorIsTheHistorysPredictionError(t *testing.T) {
	s := newCascade(t, defaults, nil)
	if f := s.repeatSigma(estimate.TargetCPU); f != defaults.RepeatSigma {
		t.Fatalf("no repeat yet: noise %.3g, want the prior %.3g", f, defaults.RepeatSigma)
	}
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	observe(s, q, 1) // a first run predicts nothing
	if g, ok := s.learn.get(keyRepeat); ok {
		t.Fatalf("a first run taught the noise: %+v", g)
	}
	observe(s, q, math.E) // mean before: ln 1 = 0; one run: scaled by 1/√2
	// The second run taught the first-run drift (ln e − ln 1 = 1, past two
	// standard errors of the prior's √2·0.25, shrunk by half): the third
	// run, in a batch of its own, is against the runs' mean 1/2 plus half
	// (the first run's share) of the drift 1/2, scaled by 1/√1.5.
	if d := s.firstRunDrift(nil, estimate.TargetCPU); math.Abs(d-0.5) > 1e-12 {
		t.Fatalf("first-run drift %.4g after one repeat 1 above its first run; want 0.5", d)
	}
	observe(s, q, 1)
	g, _ := s.learn.get(keyRepeat)
	z1, z2 := 1/math.Sqrt2, -0.75/math.Sqrt(1.5)
	if ms := g.Mean*g.Mean + g.Var; g.Count != 2 || math.Abs(ms-(z1*z1+z2*z2)/2) > 1e-12 {
		t.Fatalf("repeats %+v: mean square %.6g, want %.6g", g, ms, (z1*z1+z2*z2)/2)
	}
	// Two runs of another statement in one batch: the second's error is
	// against the first, as the batch left it.
	exact, shape := HistoryKeys("SELECT 2 FROM t", alice)
	b := &Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}
	s.Observe(b, estimate.Actual{CPUSeconds: 1})
	s.Observe(b, estimate.Actual{CPUSeconds: math.Exp(2)})
	s.Flush()
	if g, _ := s.learn.get(keyRepeat); g.Count != 3 {
		t.Fatalf("%d repeats, want 3 (the batch's second run of a statement is one)", g.Count)
	}
}

// The statement's own runs and a later stage's number: the served number
// lies between them in ln CPU (between the statement's mean and the stage's
// raw number when the stage's learned offset pointed away from the mean or
// past it), nearer the better known, and its σ is never below one run's
// noise.
func TestTemperLiesBetweenTheStageAndTheStatementsRuns(t *testing.T) {
	s := newCascade(t, defaults, nil)
	const floor = 0.25 // defaults.RepeatSigma, nothing learned
	for i, c := range []struct {
		name        string
		runs        []float64 // the statement's, seconds
		source      estimate.Source
		raw, stage  float64 // the stage's number before and after its offset
		sigma       float64 // the stage's
		lo, hi      float64 // the served number
		sigLo, sigH float64 // its σ
	}{
		// One run at 0.2 s; the model's 2 s corrected to 1 s, σ 1: the run
		// weighs 1/u = 16 (u = 0.25²) against 1, and σ² = u·1/(u+1) + 0.25².
		{"one run, a model σ of 1: near the run", []float64{0.2}, estimate.SourceModelResidual, 2, 1, 1,
			0.2 * math.Pow(5, 1.0/17) * 0.999, 0.2 * math.Pow(5, 1.0/17) * 1.001, 0.3483, 0.3484},
		{"a confident stage: near the stage, σ at the noise", []float64{0.2}, estimate.SourceModel, 2, 1, 0.05,
			0.9, 1, floor, 0.26},
		{"an offset away from the run counts for nothing", []float64{0.2}, estimate.SourceModelResidual, 1, 3, 1,
			0.2, 0.2 * math.Pow(5, 1.0/17) * 1.001, floor, 0.35},
		{"an offset past the run stops at it", []float64{4}, estimate.SourceModelResidual, 1, 9, 1,
			4 * 0.999, 4 * 1.001, floor, 0.35},
		{"text, likewise", []float64{0.2}, estimate.SourceText, 1, 3, 0.5,
			0.2, 1, floor, 0.35},
		{"the optimizer has no offset to hold", []float64{0.2}, estimate.SourceOptimizer, math.NaN(), 5, 1,
			0.2, 5, floor, 0.35},
		// (Its two repeats, predicted exactly, also lower the learned
		// noise to 0.25/3: a mean absolute error of 0 over two repeats,
		// shrunk toward the prior by one.)
		{"three runs weigh more than one", []float64{0.2, 0.2, 0.2}, estimate.SourceModel, 2, 2, 1,
			0.2, 0.2 * math.Pow(10, 1.0/17), floor / 3, 0.3},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := fmt.Sprintf("SELECT * FROM t%d", i)
			observe(s, q, c.runs...)
			r := newRequest(nil, q)
			historyStage{}.run(s, r)
			e := &estimate.Estimate{Estimated: true, Source: c.source, CPUSeconds: c.stage, Sigma: c.sigma}
			switch c.source {
			case estimate.SourceModel, estimate.SourceModelResidual:
				e.ModelCPUSeconds = c.raw
			case estimate.SourceText:
				r.b.LnText = math.Log(c.raw)
			}
			s.temper(e, r)
			m := math.Exp(r.exact[estimate.TargetCPU].Mean)
			if e.CPUSeconds < min(m, c.stage)*(1-1e-12) || e.CPUSeconds > max(m, c.stage)*(1+1e-12) ||
				e.CPUSeconds < c.lo || e.CPUSeconds > c.hi || e.Sigma < c.sigLo || e.Sigma > c.sigH || e.Sigma < s.repeatSigma(estimate.TargetCPU) || e.Source != c.source {
				t.Fatalf("served %s %.4g s σ %.4f; want %.4g–%.4g s (runs' mean %.4g s, stage %.4g s), σ %.4f–%.4f",
					e.Source, e.CPUSeconds, e.Sigma, c.lo, c.hi, m, c.stage, c.sigLo, c.sigH)
			}
		})
	}
	t.Run("a statement that never ran is left alone", func(t *testing.T) {
		r := newRequest(nil, "SELECT * FROM never_ran")
		historyStage{}.run(s, r)
		e := &estimate.Estimate{Estimated: true, Source: estimate.SourceModel, CPUSeconds: 2, ModelCPUSeconds: 1, Sigma: 1}
		if s.temper(e, r); e.CPUSeconds != 2 || e.Sigma != 1 {
			t.Fatalf("got %.4g s σ %.4g; want the stage's 2 s σ 1", e.CPUSeconds, e.Sigma)
		}
	})
}

// The case seen through the proxy: the deployment's global offset, learned
// from other shapes' cold first runs, is 3×; a statement runs far below
// the model's number. Its second run was served by model+residual at half
// the shape's evidence and half the global offset, 5× what it had just
// cost; now the statement's own run decides.
func TestSecondRunIsServedNearTheFirst(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	s := newCascade(t, defaults, constModel(2))
	// Other shapes run at 1× and 9× the model's number (3× on average, a
	// spread of ln 3), ten before the statement's first run, ten between
	// its first and its second.
	others := func(from int) {
		for i := from; i < from+10; i++ {
			e := estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM other%d", i))
			s.Observe(basisOf(e), estimate.Actual{CPUSeconds: 2 * math.Pow(9, float64(i%2))})
			s.Flush()
		}
	}
	others(0)
	const q = "SELECT * FROM lineitem WHERE l_orderkey = 42"
	first := estimateSQL(t, s, []string{srv.URL}, q)
	const actual = 0.2
	if first.Source != estimate.SourceModel || first.CPUSeconds < 4 {
		t.Fatalf("first run: %s %.3g s; want the model with the global offset, ≥ 4 s", first.Source, first.CPUSeconds)
	}
	s.Observe(basisOf(first), estimate.Actual{CPUSeconds: actual})
	s.Flush()
	others(10)
	second := estimateSQL(t, s, []string{srv.URL}, q)
	t.Logf("first run: served %.3g s, ran %.3g s; second: served %s %.3g s σ %.3f", first.CPUSeconds, actual, second.Source, second.CPUSeconds, second.Sigma)
	if second.Source != estimate.SourceModelResidual || second.CPUSeconds < actual || second.CPUSeconds > 1.3*actual {
		t.Fatalf("second run: %s %.3g s; want model+residual within 1.3× of the first run's %.3g s, never below it", second.Source, second.CPUSeconds, actual)
	}
	if second.Sigma < defaults.RepeatSigma {
		t.Fatalf("second run: σ %.3f below the run-to-run noise %.2f", second.Sigma, defaults.RepeatSigma)
	}
	// Other literals of the same shape are not the statement: the shape's
	// residual, shrunk toward the global offset, lies between the plain
	// model's number (the global offset alone) and the shape's own
	// residual's.
	other := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM lineitem WHERE l_orderkey = 43")
	plain := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM brand_new")
	t.Logf("other literals: %s %.3g s; a new shape: %s %.3g s", other.Source, other.CPUSeconds, plain.Source, plain.CPUSeconds)
	if other.Source != estimate.SourceModelResidual || other.CPUSeconds < actual || other.CPUSeconds > plain.CPUSeconds {
		t.Fatalf("other literals: %s %.3g s; want model+residual between the shape's %.3g s and the plain model's %.3g s",
			other.Source, other.CPUSeconds, actual, plain.CPUSeconds)
	}
}

// A deployment whose statements' first runs cost 1.4x their later ones
// (new literals compile new code; data read cold): the repeats teach the
// first-run drift, and a statement that ran once is predicted at its warm
// cost, its 80% interval holding the next runs, rather than at its first
// run's (the history's interval would then be centred 1.4x high).
func TestFirstRunDriftCentresTheNextRun(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	co := defaults
	co.MinCount = 1 // the history stage answers from one run
	s := newCascade(t, co, nil)
	const cold = 1.4
	in, all := 0, 0
	var last float64
	for i := range 60 {
		q := fmt.Sprintf("SELECT * FROM orders WHERE o_orderkey = %d", i)
		warm := 1 + float64(i%7)
		noise := math.Exp(0.15 * float64(i%3-1)) // the second run's own noise: ×0.86, 1, 1.16
		observe(s, q, cold*warm)
		e := estimateSQL(t, s, []string{srv.URL}, q)
		if e.Source != estimate.SourceHistory {
			t.Fatalf("statement %d: source %s, want history", i, e.Source)
		}
		last = e.CPUSeconds / warm
		if i >= 20 {
			if lo, hi := e.Interval(); lo <= warm*noise && warm*noise <= hi {
				in++
			}
			all++
		}
		observe(s, q, warm*noise)
	}
	if math.Abs(math.Log(last)) > math.Log(1.1) {
		t.Fatalf("a statement run once is predicted at %.3gx its warm cost; want within 1.1x (its first run: %gx)", last, cold)
	}
	if cov := float64(in) / float64(all); cov < 0.75 {
		t.Fatalf("the next runs inside the 80%% interval: %d of %d; want at least 75%%", in, all)
	}
	if d := s.firstRunDrift(nil, estimate.TargetCPU); math.Abs(d+math.Log(cold)) > 0.05 {
		t.Fatalf("first-run drift %.3f; want about −ln %g = %.3f", d, cold, -math.Log(cold))
	}
}
