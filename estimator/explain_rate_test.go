package estimator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/estimate"
)

// EXPLAIN only when it teaches or decides: the fake planner counts every
// EXPLAIN round trip.

// learnCascade is the text cascade under when-uncertain with the
// learn-worthiness rule: a shape is explained in the background until it
// has minRuns explained runs with a residual spread at most 0.5.
func learnCascade(t *testing.T, minRuns int, drift float64) *Service {
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	co.LearnMinRuns, co.LearnMaxSpread, co.DriftSample = minRuns, 0.5, drift
	s := newCascade(t, co, constModel(0.1))
	s.textHook = textModel
	return s
}

// runOnce estimates sql (alice's session), lets its query complete in
// secs and waits until the history learned from it; it reports whether
// the text stage answered.
func runOnce(t *testing.T, s *Service, planners []string, sql string, secs float64) bool {
	t.Helper()
	n := s.HistoryStats().Observed
	e := estimateSQL(t, s, planners, sql)
	s.Observe(basisOf(e), estimate.Actual{CPUSeconds: secs})
	waitFor(t, "the observation", func() bool { return s.HistoryStats().Observed > n })
	return e.Source != estimate.SourceModel
}

func TestBackgroundExplainsOnlyWhatTeaches(t *testing.T) {
	// The text model decides every literal of this shape (inside one class).
	shape := func(i int) string {
		return fmt.Sprintf("SELECT count(*) FROM orders WHERE o_orderkey = %d -- text 0.05 0.1 0.2", i)
	}
	t.Run("a new shape gets background EXPLAINs until it has LearnMinRuns explained runs, a known one none", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := learnCascade(t, 3, 0)
		for i := range 8 {
			if !runOnce(t, s, []string{srv.URL}, shape(i), 0.1) {
				t.Fatalf("run %d was explained on the hot path", i)
			}
		}
		if n := f.explains.Load(); n != 3 {
			t.Errorf("%d background EXPLAINs of one shape over 8 statements, want 3 (LearnMinRuns)", n)
		}
		c := s.ExplainCounts()
		if c.Learn != 3 || c.SkippedKnown != 5 || c.Hot != 0 || c.Drift != 0 {
			t.Errorf("counts %+v, want 3 learn, 5 skipped_known", c)
		}
		// Another shape is new: it is explained.
		runOnce(t, s, []string{srv.URL}, "SELECT count(*) FROM part WHERE p_partkey = 1 -- text 0.05 0.1 0.2", 0.1)
		if n := f.explains.Load(); n != 4 {
			t.Errorf("a new shape: %d EXPLAINs in all, want 4", n)
		}
	})
	t.Run("a shape whose residuals spread wide keeps being explained", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := learnCascade(t, 3, 0)
		for i := range 8 {
			runOnce(t, s, []string{srv.URL}, shape(i), []float64{0.01, 1}[i%2]) // ln residuals ±2.3
		}
		if n := f.explains.Load(); n != 8 {
			t.Errorf("%d background EXPLAINs, want 8 (residual spread above LearnMaxSpread)", n)
		}
	})
	t.Run("without the rule every text answer is explained in the background, as before", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := learnCascade(t, 0, 0)
		for i := range 5 {
			runOnce(t, s, []string{srv.URL}, shape(i), 0.1)
		}
		if n := f.explains.Load(); n != 5 {
			t.Errorf("%d background EXPLAINs, want 5", n)
		}
	})
	t.Run("the drift sample explains that fraction of a known shape's statements", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := learnCascade(t, 2, 0.25)
		draws := []float64{0.9, 0.1, 0.5, 0.3, 0.2, 0.8} // below 0.25: the 2nd and the 5th
		s.drift = func() float64 { v := draws[0]; draws = draws[1:]; return v }
		for i := range 2 + 6 {
			runOnce(t, s, []string{srv.URL}, shape(i), 0.1)
		}
		if c := s.ExplainCounts(); c.Learn != 2 || c.Drift != 2 || c.SkippedKnown != 4 || f.explains.Load() != 4 {
			t.Errorf("counts %+v, %d EXPLAINs; want 2 learn, 2 drift, 4 skipped_known", c, f.explains.Load())
		}
		// The real draw: about DriftSample of many statements.
		s.drift = nil
		b := basisOf(estimateSQL(t, s, []string{srv.URL}, shape(100)))
		drift := 0
		const n = 4000
		for i := range n {
			bi := *b // another statement of the shape
			bi.Exact = b.Exact + strconv.Itoa(i)
			if s.learnReason(s.reads(), &bi) == reasonDrift {
				drift++
			}
		}
		// A repeat within the hour shares its first run's draw.
		for i := range 200 {
			bi := *b
			bi.Exact = b.Exact + strconv.Itoa(i)
			if first := s.learnReason(s.reads(), &bi); s.learnReason(s.reads(), &bi) != first {
				t.Fatalf("statement %d: a repeat drew otherwise than its first run (%v)", i, first)
			}
		}
		if p := float64(drift) / n; math.Abs(p-0.25) > 0.03 { // ±4.4 standard errors
			t.Errorf("drift sample %.3f of %d draws, want 0.25", p, n)
		}
	})
}

// sessionOf is alice's session as user as, with credentials of its own.
func sessionOf(user string) http.Header {
	h := alice.Clone()
	h.Set("X-Trino-User", user)
	h.Set("Authorization", basicAuth(user))
	return h
}

func basicAuth(user string) string { return "Basic " + user + "-credential" }

func cachedCascade(t *testing.T, co CascadeOptions) *Service {
	s := newCascade(t, co, constModel(0.5))
	ec, err := cache.NewTTL[estimate.Estimate](100, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ec.Close)
	s.opts.Cache, s.hookID = ec, "stand-in"
	return s
}

func TestRepeatByAnotherUserIsNotExplained(t *testing.T) {
	const q = "SELECT count(*) FROM lineitem WHERE l_orderkey = 4"
	wait := func(s *Service) { s.opts.Cache.(*cache.TTL[estimate.Estimate]).Wait() }
	t.Run("on the hot path", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := cachedCascade(t, defaults)
		e, err := s.EstimateOn(context.Background(), []string{srv.URL}, q, sessionOf("alice"))
		if err != nil || !e.Explained() || f.explains.Load() != 1 {
			t.Fatalf("alice: %+v %v, %d EXPLAINs", e, err, f.explains.Load())
		}
		wait(s)
		e, err = s.EstimateOn(context.Background(), []string{srv.URL}, q, sessionOf("bob"))
		if err != nil || !e.Cached || e.Explained() || f.explains.Load() != 1 {
			t.Fatalf("bob's repeat: %+v %v, %d EXPLAINs; want alice's cached estimate (not a proof of bob's credentials), no EXPLAIN", e, err, f.explains.Load())
		}
		if c := s.ExplainCounts(); c.Hot != 1 {
			t.Errorf("counts %+v, want 1 hot", c)
		}
		other := sessionOf("bob")
		other.Set("X-Trino-Schema", "sf1")
		if _, err := s.EstimateOn(context.Background(), []string{srv.URL}, q, other); err != nil || f.explains.Load() != 2 {
			t.Errorf("another schema: %v, %d EXPLAINs, want 2", err, f.explains.Load())
		}
	})
	t.Run("in the background", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		co := defaults
		co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
		s := cachedCascade(t, co)
		s.textHook = textModel
		tq := q + " -- text 0.05 0.1 0.2"
		e, err := s.EstimateOn(context.Background(), []string{srv.URL}, tq, sessionOf("alice"))
		if err != nil || e.Source != estimate.SourceText {
			t.Fatalf("alice: %+v %v", e, err)
		}
		waitFor(t, "alice's background EXPLAIN", func() bool { return s.BackgroundStats().Done == 1 })
		wait(s)
		if _, err := s.EstimateOn(context.Background(), []string{srv.URL}, tq, sessionOf("bob")); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond) // a background EXPLAIN would have started
		if n := f.explains.Load(); n != 1 {
			t.Errorf("bob's repeat: %d EXPLAINs in all, want alice's one", n)
		}
	})
	t.Run("while another user's background EXPLAIN runs", func(t *testing.T) {
		f := &fakePlanner{block: make(chan struct{}), started: make(chan struct{}, 4)}
		srv := httptest.NewServer(f)
		defer srv.Close()
		co := defaults
		co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
		s := cachedCascade(t, co)
		s.textHook = textModel
		tq := q + " -- text 0.05 0.1 0.2"
		if _, err := s.EstimateOn(context.Background(), []string{srv.URL}, tq, sessionOf("alice")); err != nil {
			t.Fatal(err)
		}
		<-f.started
		if _, err := s.EstimateOn(context.Background(), []string{srv.URL}, tq, sessionOf("bob")); err != nil {
			t.Fatal(err)
		}
		close(f.block)
		waitFor(t, "alice's background EXPLAIN", func() bool { return s.BackgroundStats().Done >= 1 })
		time.Sleep(50 * time.Millisecond) // a second one would have finished
		if n, c := f.explains.Load(), s.ExplainCounts(); n != 1 || c.SkippedKnown != 1 {
			t.Errorf("%d EXPLAINs, counts %+v; want 1, bob's skipped as known", n, c)
		}
	})
}

func TestExplainCeiling(t *testing.T) {
	t.Run("over the ceiling the hot path answers without the plan, counted", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		co := defaults
		co.ExplainRate, co.ExplainBurst = 0.001, 2
		s := newCascade(t, co, constModel(0.5))
		observe(s, "SELECT * FROM orders WHERE o_orderkey = 1", 3) // its shape's history stands in
		var busy, stood int
		for i := range 5 {
			e, err := s.EstimateOn(context.Background(), []string{srv.URL}, fmt.Sprintf("SELECT * FROM orders WHERE o_orderkey = %d", 10+i), alice)
			switch {
			case errors.Is(err, ErrExplainBusy):
				busy++
			case err != nil:
				t.Fatal(err)
			case e.ExplainSkipped:
				stood++
			}
		}
		if n := f.explains.Load(); n != 2 || stood != 3 {
			t.Errorf("%d EXPLAINs (burst 2), %d stand-ins, %d fail-opens; want 2, 3, 0", n, stood, busy)
		}
		if _, err := s.EstimateOn(context.Background(), []string{srv.URL}, "SELECT * FROM part", alice); !errors.Is(err, ErrExplainBusy) {
			t.Errorf("a new shape over the ceiling: %v, want ErrExplainBusy (fail open)", err)
		}
		if c := s.ExplainCounts(); c.Hot != 2 || c.SkippedCeiling != 4 {
			t.Errorf("counts %+v, want 2 hot, 4 skipped_ceiling", c)
		}
	})
	t.Run("the ceiling is per planner: the next one takes over", func(t *testing.T) {
		f1, f2 := &fakePlanner{}, &fakePlanner{}
		s1, s2 := httptest.NewServer(f1), httptest.NewServer(f2)
		defer s1.Close()
		defer s2.Close()
		co := defaults
		co.ExplainRate, co.ExplainBurst = 0.001, 1
		s := newCascade(t, co, constModel(0.5))
		for i := range 2 {
			estimateSQL(t, s, []string{s1.URL, s2.URL}, fmt.Sprintf("SELECT * FROM nation WHERE n_nationkey = %d", i))
		}
		if f1.explains.Load() != 1 || f2.explains.Load() != 1 {
			t.Errorf("EXPLAINs %d and %d, want one on each planner", f1.explains.Load(), f2.explains.Load())
		}
	})
	t.Run("a background EXPLAIN over the ceiling is dropped, counted", func(t *testing.T) {
		s, f, srv := textUnderCeiling(t, 1, 0.1)
		textAnswers(t, s, srv.URL, 3)
		waitFor(t, "the background EXPLAIN", func() bool { return s.BackgroundStats().Done == 1 })
		if c, bg := s.ExplainCounts(), s.BackgroundStats(); f.explains.Load() != 1 || c.Learn != 1 || c.SkippedCeiling != 2 || bg.Skipped != 2 {
			t.Errorf("%d EXPLAINs, counts %+v, background %+v; want 1, 1 learn, 2 skipped_ceiling", f.explains.Load(), c, bg)
		}
	})
	t.Run("a background EXPLAIN leaves the hot path half the bucket", func(t *testing.T) {
		s, f, srv := textUnderCeiling(t, 4, 0.1)
		// Text answers: the background takes a token while the bucket holds
		// 3 or more (1 + 4/2): two of four.
		textAnswers(t, s, srv.URL, 4)
		waitFor(t, "the background EXPLAINs", func() bool { return s.BackgroundStats().Done == 2 })
		// The hot path still has its two.
		for i := range 3 {
			e, err := s.EstimateOn(context.Background(), []string{srv.URL}, fmt.Sprintf("SELECT * FROM nation WHERE n_nationkey = %d -- text 0.5 1 2", i), alice)
			if i < 2 && (err != nil || !e.Explained()) {
				t.Errorf("hot %d: %+v %v, want explained", i, e, err)
			}
		}
		if c := s.ExplainCounts(); f.explains.Load() != 4 || c.Learn != 2 || c.Hot != 2 || c.SkippedCeiling != 3 {
			t.Errorf("%d EXPLAINs, counts %+v; want 4: 2 learn, 2 hot, 3 skipped_ceiling (2 background, 1 hot)", f.explains.Load(), c)
		}
	})
	t.Run("near the ceiling the hot path explains the statements likeliest to be placed wrong", func(t *testing.T) {
		s, _, srv := textUnderCeiling(t, 4, 0.5)
		s.opts.Cascade.ClassQuantile = 0.5 // routed by the median (at 0.9, below: misplaced)
		est := func(i int, text string) *estimate.Estimate {
			e, err := s.EstimateOn(context.Background(), []string{srv.URL}, fmt.Sprintf("SELECT * FROM nation WHERE n_nationkey = %d -- text %s", i, text), alice)
			if err != nil {
				t.Fatal(err)
			}
			return e
		}
		// Medians on the 1 s bound (p = ½) need 1 token: two of four taken.
		for i := range 2 {
			if e := est(i, "0.5 1 2"); !e.Explained() {
				t.Fatalf("%d: %+v, want explained", i, e)
			}
		}
		// An interval that only reaches the bound (median 0.5 s, σ 0.62:
		// routed below it, p = 0.13 it runs longer) needs 1 + 4/2·(1 − 0.26)
		// = 2.5 tokens: with 2 left it is placed by the text stage.
		if e := est(2, "0.25 0.5 1.1"); e.Explained() || !e.ExplainSkipped || e.Source != estimate.SourceText {
			t.Errorf("a statement far from the bound near the ceiling: %+v, want the text stage's, explain skipped", e)
		}
		// The next one on the bound still gets its plan.
		if e := est(3, "0.5 1 2"); !e.Explained() {
			t.Errorf("a median on the bound: %+v, want explained", e)
		}
		if c := s.ExplainCounts(); c.Hot != 3 || c.SkippedCeiling != 1 {
			t.Errorf("counts %+v, want 3 hot, 1 skipped_ceiling", c)
		}
	})
}

// textAnswers estimates n statements of one shape that the text stage
// answers (their background EXPLAINs are the ceiling's to allow).
func textAnswers(t *testing.T, s *Service, planner string, n int) {
	t.Helper()
	for i := range n {
		if e := estimateSQL(t, s, []string{planner}, fmt.Sprintf("SELECT * FROM region WHERE r_regionkey = %d -- text 0.05 0.1 0.2", i)); e.Source != estimate.SourceText {
			t.Fatalf("%d: source %s", i, e.Source)
		}
	}
}

// textUnderCeiling is the text cascade under when-uncertain (the model's
// number model) with a ceiling of burst EXPLAINs and no refill to speak
// of, in front of a fake planner that counts them (srv its server).
func textUnderCeiling(t *testing.T, burst int, model float64) (*Service, *fakePlanner, *httptest.Server) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	co.ExplainRate, co.ExplainBurst = 0.001, burst
	s := newCascade(t, co, constModel(model))
	s.textHook = textModel
	return s, f, srv
}

// The chance that the text estimate's class is wrong is judged where the
// router places it: by its ClassQuantile quantile.
func TestMisplaced(t *testing.T) {
	co := defaults
	co.ClassBounds = classes // 1 s, 10 s, unbounded
	sigma := math.Log(1.1/0.5) / estimate.NormalQuantile(0.9)
	for _, c := range []struct {
		name          string
		median, cq    float64
		want, epsilon float64
	}{
		{"the median on a bound: either side", 1, 0.5, 0.5, 1e-9},
		{"by the median, 0.5 s: 13% it runs past 1 s", 0.5, 0.5, 0.13, 0.01},
		{"by the 90% quantile, 0.5 s is routed above 1 s: 87% it stays below", 0.5, 0.9, 0.87, 0.01},
		{"between two bounds: outside either", 3.16, 0.5, 1 - (0.5*math.Erfc(-math.Log(10/3.16)/sigma/math.Sqrt2) - 0.5*math.Erfc(-math.Log(1/3.16)/sigma/math.Sqrt2)), 1e-9},
	} {
		co.ClassQuantile = c.cq
		if p := co.misplaced(&estimate.Estimate{CPUSeconds: c.median, Sigma: sigma}); math.Abs(p-c.want) > c.epsilon {
			t.Errorf("%s: %.4f, want %.4f", c.name, p, c.want)
		}
	}
	if n := hotNeed(nil, false, &co)(10); n != 1 {
		t.Errorf("no text estimate: %v tokens, want 1", n)
	}
	if n := hotNeed(&estimate.Estimate{CPUSeconds: 0.01, Sigma: 0.1}, false, &co)(10); math.Abs(n-6) > 1e-6 {
		t.Errorf("surely right: %v tokens, want 6 (backgroundNeed's)", n)
	}
	for burst := 1; burst <= 5; burst++ { // never more than the bucket, nor than a background EXPLAIN
		if n := hotNeed(&estimate.Estimate{CPUSeconds: 0.01, Sigma: 0.1}, false, &co)(burst); n > backgroundNeed(burst) || n > float64(burst) {
			t.Errorf("burst %d: %v tokens, more than the bucket or backgroundNeed's %v", burst, n, backgroundNeed(burst))
		}
	}
	if n := hotNeed(&estimate.Estimate{CPUSeconds: 0.01, Sigma: 0.1}, true, &co)(10); n != 1 {
		t.Errorf("far from the text model's training: %v tokens, want 1", n)
	}
}
