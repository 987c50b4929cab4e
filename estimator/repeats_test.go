package estimator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

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
							s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}, run(x))
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
			f := s.repeatSigma()
			t.Logf("run-to-run noise learned from %d repeats: %.3f (true %.2f, prior %.2f)", g.Count, f, sigma, defaults.RepeatSigma)
			if g.Count < 700 || math.Abs(f/sigma-1) > 0.2 {
				t.Fatalf("learned noise %.3f from %d repeats; want %.2f ± 20%% from ~800", f, g.Count, sigma)
			}

			// 2000 new statements with 1–4 runs: the history's interval
			// (the history stage's, or before min_count the stand-in's)
			// against the next run.
			fresh := stmts("next", 2000, 1, 4)
			teach(fresh)
			t.Logf("noise after them: %.3f", s.repeatSigma())
			var in, all [5]int
			for _, x := range fresh {
				r := newRequest(nil, x.sql)
				e, err := historyStage{}.run(s, r)
				if err != nil {
					t.Fatal(err)
				}
				if e == nil {
					e = s.standIn(r.kind, r.b, r.exact)
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
	if f := s.repeatSigma(); f != defaults.RepeatSigma {
		t.Fatalf("no repeat yet: noise %.3g, want the prior %.3g", f, defaults.RepeatSigma)
	}
	const q = "SELECT * FROM orders WHERE o_orderkey = 1"
	observe(s, q, 1) // a first run predicts nothing
	if g, ok := s.learn.get(keyRepeat); ok {
		t.Fatalf("a first run taught the noise: %+v", g)
	}
	observe(s, q, math.E) // mean before: ln 1 = 0; one run: scaled by 1/√2
	observe(s, q, 1)      // two runs in a batch of its own: mean before 1/2, scaled by 1/√1.5
	g, _ := s.learn.get(keyRepeat)
	z1, z2 := 1/math.Sqrt2, -0.5/math.Sqrt(1.5)
	if ms := g.Mean*g.Mean + g.Var; g.Count != 2 || math.Abs(ms-(z1*z1+z2*z2)/2) > 1e-12 {
		t.Fatalf("repeats %+v: mean square %.6g, want %.6g", g, ms, (z1*z1+z2*z2)/2)
	}
	// Two runs of another statement in one batch: the second's error is
	// against the first, as the batch left it.
	exact, shape := HistoryKeys("SELECT 2 FROM t", alice)
	b := &Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}
	s.Observe(b, 1)
	s.Observe(b, math.Exp(2))
	s.Flush()
	if g, _ := s.learn.get(keyRepeat); g.Count != 3 {
		t.Fatalf("%d repeats, want 3 (the batch's second run of a statement is one)", g.Count)
	}
}
