package estimator

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/testing/redistest"
)

// countingStore counts the store calls a statement's estimate makes: one
// per Get, one per GetMany (as one MGET on Redis).
type countingStore struct {
	history.Store
	calls atomic.Int64
}

func (c *countingStore) Get(key string) (history.Stats, bool) {
	c.calls.Add(1)
	return c.Store.Get(key)
}

func (c *countingStore) GetMany(keys ...string) ([]history.Stats, []bool) {
	c.calls.Add(1)
	return history.GetMany(c.Store, keys...)
}

// The batched reads give every estimate the unbatched reads gave, on a
// history populated with statements of several shapes in two sessions
// (exact repeats, shapes with other literals, families, the global
// offsets), each path's estimate compared number for number; and they read
// the store once for a repeat the history answers, twice for any other
// answer (the unbatched reads took up to 6 calls for a text-stage answer
// and 18 for an explained one here: every target's offsets).
// readsFleet is a service with a when-uncertain text stage, a plan model
// that predicts the CPU time and the peak memory, the learn rule, and a
// history on st populated with statements of several shapes in two
// sessions (readsNarrow: the text stage decides them; readsWide:
// explained on the hot path), each observed; its background EXPLAINs are
// stopped, so that nothing is written between two estimates. est
// estimates a statement in a session.
func readsFleet(tb testing.TB, st history.Store) (s *Service, est func(sql string, h http.Header) *estimate.Estimate) {
	tb.Helper()
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	tb.Cleanup(srv.Close)
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	co.LearnMinRuns, co.LearnMaxSpread, co.DriftSample = 3, 0.5, 0.1
	s = NewService(nil, ServiceOptions{Workers: 1, History: st, Cascade: co})
	s.scoreHook = targetModel(0.4, 3e8, 0.3)
	s.textHook = textModel
	tb.Cleanup(s.Close)
	planners := []string{srv.URL}
	est = func(sql string, h http.Header) *estimate.Estimate {
		tb.Helper()
		e, err := s.EstimateOn(context.Background(), planners, sql, h)
		if err != nil {
			tb.Fatalf("%s: %v", sql, err)
		}
		return e
	}
	bob := inSession("join_distribution_type=BROADCAST")
	for i := range 60 {
		shape, lit, h := i%5, i%7, alice
		if i%3 == 0 {
			h = bob
		}
		for _, sql := range []string{readsNarrow(shape, lit), readsWide(shape, lit)} {
			e := est(sql, h)
			secs := 0.05 * float64(shape+1) * (1 + 0.1*float64(lit))
			if sql == readsWide(shape, lit) {
				secs *= 3 // the plan model's residual
			}
			s.Observe(basisOf(e), estimate.Actual{CPUSeconds: secs, PeakMemoryBytes: 1e8 * secs, ElapsedSeconds: secs / 2})
			s.Flush()
		}
	}
	// An observation whose background EXPLAIN was pending is learned
	// once that finishes, after Flush: wait for all 120, or the learner's
	// reads (the statement's runs, the drifts) land in a probe's count.
	for deadline := time.Now().Add(10 * time.Second); s.HistoryStats().Observed < 120; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("%d of 120 observations learned after 10 s", s.HistoryStats().Observed)
		}
	}
	s.Flush()
	s.stopBackground()
	return s, est
}

// readsNarrow is a statement whose text interval lies in one class;
// readsWide one whose interval straddles the bound (explained).
func readsNarrow(shape, lit int) string {
	return fmt.Sprintf("SELECT count(*) FROM t%d WHERE k = %d -- text 0.05 0.1 0.2", shape, lit)
}

func readsWide(shape, lit int) string {
	return fmt.Sprintf("SELECT sum(v) FROM w%d WHERE k = %d -- text 0.05 2 40 cost %d", shape, lit, 1000*(shape+1))
}

// The batched reads give every estimate the unbatched reads gave, on a
// history populated with statements of several shapes in two sessions
// (exact repeats, shapes with other literals, families, the global
// offsets), each path's estimate compared number for number, on each
// store (Redis: a real redis-server, one MGET a call); and they read the
// store once for a repeat the history answers, twice for any other answer
// (the unbatched reads took up to 6 calls for a text-stage answer and 18
// for an explained one here: every target's offsets).
func TestBatchedReadsGiveTheSameEstimates(t *testing.T) {
	for _, sc := range storeKinds {
		t.Run(sc.name, func(t *testing.T) { testBatchedReads(t, sc.open(t)) })
	}
}

func testBatchedReads(t *testing.T, store history.Store) {
	st := &countingStore{Store: store}
	s, est := readsFleet(t, st)
	narrow, wide := readsNarrow, readsWide
	probes := []struct {
		name string
		sql  string
		h    http.Header
		// calls is the most store calls the batched reads may take.
		calls int64
		// always runs the probe under explain: always.
		always bool
	}{
		// narrow(2, 2) and wide(2, 2) ran twice in alice's session (i = 2, 37).
		{"history repeat", narrow(2, 2), alice, 1, false},
		{"history repeat of an explained shape", wide(2, 2), alice, 1, false},
		{"before the plan, the shape's runs", narrow(2, 99), alice, 2, false},
		{"text, a new shape", narrow(50, 1), alice, 2, false},
		{"text, the family in another session", narrow(3, 98), inSession("a=b"), 2, false},
		{"before the plan, an explained shape's runs", wide(1, 97), alice, 2, false},
		{"explain always, the shape's other literal", wide(1, 95), alice, 2, true},
		{"explain always, a new shape", narrow(70, 1), alice, 2, true},
		{"explained, a new shape", wide(60, 1), alice, 2, false},
		{"explained, the family in another session", wide(4, 96), inSession("a=b"), 2, false},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			run := func(direct bool) (*estimate.Estimate, int64) {
				s.learn.direct = direct
				if p.always {
					s.opts.Cascade.Explain = ExplainAlways
				}
				defer func() { s.learn.direct, s.opts.Cascade.Explain = false, ExplainWhenUncertain }()
				s.learn.floorGen.Add(1) // the run-to-run noise read again, by both
				n := st.calls.Load()
				e := est(p.sql, p.h)
				return e, st.calls.Load() - n
			}
			old, oldCalls := run(true)
			got, calls := run(false)
			if got.Source != old.Source || got.CPUSeconds != old.CPUSeconds || got.Sigma != old.Sigma {
				t.Fatalf("batched %s %.6g s σ %.6g; unbatched %s %.6g s σ %.6g", got.Source, got.CPUSeconds, got.Sigma, old.Source, old.CPUSeconds, old.Sigma)
			}
			for _, tg := range estimate.Targets {
				if a, b := got.Of(tg), old.Of(tg); a != b && !(math.IsNaN(a.Median) && math.IsNaN(b.Median)) {
					t.Errorf("%s: batched %+v, unbatched %+v", tg, a, b)
				}
			}
			if calls > p.calls {
				t.Errorf("%s answered with %d store calls, want at most %d", got.Source, calls, p.calls)
			}
			if calls > oldCalls {
				t.Errorf("%d store calls, more than the unbatched %d", calls, oldCalls)
			}
			t.Logf("%s: %d store calls (unbatched %d)", got.Source, calls, oldCalls)
		})
	}
}

// BenchmarkDecisionRedis is the cascade's decision on a history in a real
// redis-server (over TCP on this host), per path, with the batched reads
// and the unbatched ones (as before them; each path's two run one after
// the other, so that -count interleaves them): an exact repeat the history
// answers, a new shape the text stage answers, the same shape with new
// literals in a new session (its family's residuals), and a new shape
// explained on the hot path (a local stand-in planner, no Trino). It
// reports the store calls per statement.
func BenchmarkDecisionRedis(b *testing.B) {
	rs := redistest.Start(b)
	r, err := history.OpenRedis(history.RedisOptions{URL: "redis://" + rs.Addr, Prefix: "bench:", Timeout: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	st := &countingStore{Store: r}
	s, est := readsFleet(b, st)
	paths := []struct {
		name string
		sql  func(i int) (string, http.Header)
	}{
		{"history_repeat", func(int) (string, http.Header) { return readsNarrow(2, 2), alice }},
		{"text_new_shape", func(i int) (string, http.Header) { return readsNarrow(1000+i, 1), alice }},
		{"text_family_new_session", func(i int) (string, http.Header) {
			return readsNarrow(3, 5000+i), inSession(fmt.Sprintf("p=%d", i))
		}},
		{"explain_new_shape", func(i int) (string, http.Header) { return readsWide(1000+i, 1), alice }},
	}
	for _, p := range paths {
		for _, mode := range []string{"batched", "unbatched"} {
			b.Run(p.name+"/"+mode, func(b *testing.B) {
				s.learn.direct = mode == "unbatched"
				defer func() { s.learn.direct = false }()
				b.ReportAllocs()
				n := st.calls.Load()
				for i := 0; b.Loop(); i++ {
					est(p.sql(i))
				}
				b.ReportMetric(float64(st.calls.Load()-n)/float64(b.N), "calls/op")
			})
		}
	}
}
