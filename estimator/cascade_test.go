package estimator

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// The cascade's unit tests: a fake Trino answers EXPLAINs (its plan's
// cpuCost is the number in the statement's "cost N" comment), and a
// stand-in for the model (scoreHook) returns what each test wants. The
// cascade against a real Trino and the real model: testing/e2e/cascade.

type fakePlanner struct {
	explains atomic.Int32
	block    chan struct{} // when set, EXPLAINs wait on it
	started  chan struct{} // when set, gets one value per EXPLAIN started
	fail     bool
}

var costComment = regexp.MustCompile(`cost ([0-9.e+]+)`)

func (f *fakePlanner) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	page := func(v any) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(v)
		zw.Close()
	}
	if r.Method != http.MethodPost {
		page(map[string]any{"id": "q1", "stats": map[string]any{"state": "FINISHED"}})
		return
	}
	f.explains.Add(1)
	if f.started != nil {
		f.started <- struct{}{}
	}
	if f.block != nil {
		<-f.block
	}
	body, _ := io.ReadAll(r.Body)
	if f.fail {
		page(map[string]any{"id": "q1", "error": map[string]any{"errorName": "SYNTAX_ERROR", "errorType": "USER_ERROR", "message": "no"}})
		return
	}
	cost := "100"
	if m := costComment.FindSubmatch(body); m != nil {
		cost = string(m[1])
	}
	planJSON := `{"0":{"id":"1","name":"TableScan","descriptor":{},"outputs":[],"details":[],"estimates":[{"outputRowCount":10,"outputSizeInBytes":100,"cpuCost":` + cost + `,"memoryCost":0,"networkCost":0}],"children":[]}}`
	page(map[string]any{"id": "q1", "data": [][]string{{planJSON}}, "stats": map[string]any{"state": "FINISHED"}})
}

// newCascade serves a cascade over a memory history with the given model
// stand-in (nil: the model fails).
func newCascade(t *testing.T, co CascadeOptions, model func(planJSON []byte) (*estimate.Estimate, error)) *Service {
	t.Helper()
	s := NewService(nil, ServiceOptions{Workers: 1, History: history.NewMemory(1000), Cascade: co})
	if model == nil {
		model = func([]byte) (*estimate.Estimate, error) { return nil, errors.New("model failed") }
	}
	s.scoreHook = model
	t.Cleanup(s.Close)
	return s
}

func constModel(sec float64) func([]byte) (*estimate.Estimate, error) {
	return func([]byte) (*estimate.Estimate, error) {
		return &estimate.Estimate{Estimated: true, CPUSeconds: sec, Model: "stand-in"}, nil
	}
}

var alice = http.Header{"X-Trino-User": {"alice"}, "X-Trino-Catalog": {"tpch"}, "X-Trino-Schema": {"tiny"}}

func estimateSQL(t *testing.T, s *Service, planners []string, sql string) *estimate.Estimate {
	t.Helper()
	e, err := s.EstimateOn(context.Background(), planners, sql, alice)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return e
}

// basisOf is what e hands Observe, as the proxy hands it back.
func basisOf(e *estimate.Estimate) *Basis { return UnmarshalBasis(e.Learn) }

var defaults = CascadeOptions{CheapCPUSeconds: 0.01, MinCount: 2, MaxSpread: 0.5, Alpha: 0.2, Shrink: 1, ModelSigma: 1, RepeatSigma: 0.25, MinCalibration: 5}

func TestCascadeExactRepeatSkipsExplain(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newCascade(t, defaults, constModel(2))
	const q = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	for i, want := range []estimate.Source{estimate.SourceModel, estimate.SourceModelResidual} {
		e := estimateSQL(t, s, []string{srv.URL}, q)
		if e.Source != want || basisOf(e) == nil {
			t.Fatalf("run %d: source %s, want %s", i+1, e.Source, want)
		}
		s.Observe(basisOf(e), estimate.Actual{CPUSeconds: 8})
		s.Flush()
	}
	before := f.explains.Load()
	e := estimateSQL(t, s, []string{srv.URL}, "select count(*)  from orders where o_orderkey = 7 -- again")
	if e.Source != estimate.SourceHistory || math.Abs(e.CPUSeconds-8) > 1e-9 || e.Sigma <= 0 {
		t.Fatalf("third run: %s %.4gs σ %.3g; want history, 8s, an interval", e.Source, e.CPUSeconds, e.Sigma)
	}
	if n := f.explains.Load() - before; n != 0 {
		t.Fatalf("an exact repeat with a confident history ran %d EXPLAINs", n)
	}
	// New literals: the same shape, explained, corrected by its residual.
	e = estimateSQL(t, s, []string{srv.URL}, "SELECT count(*) FROM orders WHERE o_orderkey = 8")
	if e.Source != estimate.SourceModelResidual || f.explains.Load() == before || !(e.CPUSeconds > 2) {
		t.Fatalf("new literals: %s %.4gs; want model+residual above the raw 2s", e.Source, e.CPUSeconds)
	}
	// Another session is another statement.
	h := alice.Clone()
	h.Set("X-Trino-Session", "join_distribution_type=BROADCAST")
	e, err := s.EstimateOn(context.Background(), []string{srv.URL}, q, h)
	if err != nil || e.Source == estimate.SourceHistory {
		t.Fatalf("another session: %v %v; want no history", e, err)
	}
}

func TestCascadeNoisyHistoryIsNotTrusted(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newCascade(t, defaults, constModel(2))
	const q = "SELECT * FROM lineitem WHERE l_orderkey = 1"
	for _, actual := range []float64{1, 20, 1, 20} { // spread of ln CPU ~1.5
		s.Observe(basisOf(estimateSQL(t, s, []string{srv.URL}, q)), estimate.Actual{CPUSeconds: actual})
		s.Flush()
	}
	if e := estimateSQL(t, s, []string{srv.URL}, q); e.Source != estimate.SourceModelResidual {
		t.Fatalf("a statement whose history spreads over 20x: source %s; want the model (with the residual)", e.Source)
	}
}

func TestCascadeCheapStatementsAreNeverExplained(t *testing.T) {
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newCascade(t, defaults, constModel(2))
	for _, q := range []string{"SHOW TABLES", "SELECT * FROM system.runtime.queries", "VALUES 1", "DESCRIBE nation"} {
		e := estimateSQL(t, s, []string{srv.URL}, q)
		if e.Source != estimate.SourceCheap || !e.Estimated || e.CPUSeconds != 0.01 || basisOf(e) != nil {
			t.Errorf("%s: %+v; want the cheap constant", q, e)
		}
	}
	if n := f.explains.Load(); n != 0 {
		t.Fatalf("%d EXPLAINs for cheap statements", n)
	}
}

// A model trained on another machine is off by a constant factor here;
// the global offset (new shapes) and the shapes' residuals (new literals)
// learn it from feedback.
func TestResidualConvergesOnSyntheticOffset(t *testing.T) {
	const offset = 5.0 // this cluster is 5x slower than the model thinks
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	for _, c := range []struct {
		name string
		sql  func(i int) string
		want estimate.Source
		// q-error ≤ 1.25 from this many queries on: the global offset is
		// shrunk toward 0 (n/(n+Shrink) of it after n queries: 5^(1/8) =
		// 1.22 at the 8th), a shape's residual toward the global offset.
		limit int
	}{
		{"new shapes: the global offset", func(i int) string { return fmt.Sprintf("SELECT * FROM t%d", i) }, estimate.SourceModel, 7},
		{"one shape, new literals: the residual", func(i int) string { return fmt.Sprintf("SELECT * FROM t WHERE k = %d", i) }, estimate.SourceModelResidual, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			var truth float64
			model := func([]byte) (*estimate.Estimate, error) {
				return &estimate.Estimate{Estimated: true, CPUSeconds: truth / offset}, nil
			}
			s := newCascade(t, defaults, model)
			converged := -1
			for i := range 30 {
				truth = 1 + float64(i%7) // the model ranks queries right, only the scale is off
				e := estimateSQL(t, s, []string{srv.URL}, c.sql(i))
				q := math.Max(e.CPUSeconds/truth, truth/e.CPUSeconds)
				if i == 0 && math.Abs(q-offset) > 1e-9 {
					t.Fatalf("first query: q-error %.3g; want the raw offset %g", q, offset)
				}
				if q <= 1.25 && converged < 0 {
					converged = i
				}
				if converged >= 0 && q > 1.25 {
					t.Fatalf("query %d: q-error %.3g after converging at %d", i, q, converged)
				}
				if i > 0 && e.Source != c.want {
					t.Fatalf("query %d: source %s, want %s", i, e.Source, c.want)
				}
				s.Observe(basisOf(e), estimate.Actual{CPUSeconds: truth})
				s.Flush()
			}
			if converged < 0 || converged > c.limit {
				t.Fatalf("q-error ≤ 1.25 from query %d; want by query %d", converged, c.limit)
			}
			t.Logf("q-error ≤ 1.25 from query %d on (offset %gx, shrink %g)", converged, offset, defaults.Shrink)
		})
	}
}

// A model trained on this cluster is right on average: its new-shape
// residuals are noise around 0, and the global offset must not follow
// them (every new shape would pay for that noise).
func TestGlobalOffsetIgnoresNoise(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	var raw float64
	s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) {
		return &estimate.Estimate{Estimated: true, CPUSeconds: raw}, nil
	})
	for i := range 40 {
		raw = math.Exp(0.5 * float64(1-2*(i%2))) // 1.65 s, 0.61 s, ...: the truth is 1 s
		e := estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d", i))
		if e.Source != estimate.SourceModel || math.Abs(e.CPUSeconds-raw) > 1e-12 {
			t.Fatalf("new shape %d: %s %.4f s; want the model's own %.4f s (no offset learned from noise)", i, e.Source, e.CPUSeconds, raw)
		}
		s.Observe(basisOf(e), estimate.Actual{CPUSeconds: 1})
		s.Flush()
	}
}

func TestCascadeFallsThroughEachStage(t *testing.T) {
	t.Run("a failing model falls to the calibrated optimizer", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		working := true
		s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) {
			if working {
				return &estimate.Estimate{Estimated: true, CPUSeconds: 1}, nil
			}
			return nil, errors.New("model failed")
		})
		// Calibration data: actual seconds = cost/1000 (log-linear, slope 1).
		for i := range 8 {
			cost := math.Pow(10, 3+float64(i%4))
			e := estimateSQL(t, s, []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d /* cost %g */", i, cost))
			s.Observe(basisOf(e), estimate.Actual{CPUSeconds: cost / 1000})
		}
		s.Flush()
		if e := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM other /* cost 50000 */"); e.Source != estimate.SourceModel || math.Abs(e.OptimizerCPUSeconds/50-1) > 0.05 {
			t.Fatalf("a working model: %s, optimizer %.4gs; want the model's estimate with the calibrated optimizer's ≈ 50s beside it", e.Source, e.OptimizerCPUSeconds)
		}
		working = false
		e := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM fresh /* cost 50000 */")
		if e.Source != estimate.SourceOptimizer || math.Abs(e.CPUSeconds/50-1) > 0.05 || e.Sigma <= 0 || len(e.Plan) == 0 {
			t.Fatalf("got %s %.4gs σ %.3g; want optimizer ≈ 50s with an interval and the plan", e.Source, e.CPUSeconds, e.Sigma)
		}
	})
	t.Run("a failing model with no calibration fails open", func(t *testing.T) {
		srv := httptest.NewServer(&fakePlanner{})
		defer srv.Close()
		s := newCascade(t, defaults, nil)
		if e, err := s.EstimateOn(context.Background(), []string{srv.URL}, "SELECT * FROM t", alice); err == nil {
			t.Fatalf("got %+v, want the model's error", e)
		}
	})
	t.Run("with no model at all, failed-open queries teach the calibration", func(t *testing.T) {
		srv := httptest.NewServer(&fakePlanner{})
		defer srv.Close()
		s := NewService(nil, ServiceOptions{Workers: 1, History: history.NewMemory(1000), Cascade: defaults})
		defer s.Close()
		for i := range defaults.MinCalibration {
			cost := math.Pow(10, 3+float64(i%4))
			_, err := s.EstimateOn(context.Background(), []string{srv.URL}, fmt.Sprintf("SELECT * FROM t%d /* cost %g */", i, cost), alice)
			var ue *UnplacedError
			if !errors.As(err, &ue) || ue.Basis == nil {
				t.Fatalf("query %d with no model and no calibration: %v; want an UnplacedError with a basis", i, err)
			}
			s.Observe(ue.Basis, estimate.Actual{CPUSeconds: cost / 1000})
		}
		s.Flush()
		e, err := s.EstimateOn(context.Background(), []string{srv.URL}, "SELECT * FROM fresh /* cost 50000 */", alice)
		if err != nil || e.Source != estimate.SourceOptimizer || math.Abs(e.CPUSeconds/50-1) > 0.05 {
			t.Fatalf("after %d runs: %+v %v; want the optimizer's ≈ 50s", defaults.MinCalibration, e, err)
		}
	})
	t.Run("a failing EXPLAIN fails open", func(t *testing.T) {
		srv := httptest.NewServer(&fakePlanner{fail: true})
		defer srv.Close()
		s := newCascade(t, defaults, constModel(1))
		if e, err := s.EstimateOn(context.Background(), []string{srv.URL}, "SELECT * FROM t", alice); err == nil {
			t.Fatalf("got %+v, want the EXPLAIN's error", e)
		}
	})
}

func TestCascadeBoundsExplainsPerPlanner(t *testing.T) {
	f1 := &fakePlanner{started: make(chan struct{}, 8)}
	f2 := &fakePlanner{block: make(chan struct{}), started: make(chan struct{}, 8)}
	p1, p2 := httptest.NewServer(f1), httptest.NewServer(f2)
	defer p1.Close()
	defer p2.Close()
	co := defaults
	co.ExplainLimit = 1
	s := newCascade(t, co, constModel(3))
	planners := []string{p1.URL, p2.URL}

	// A shape seen before (its history stands in when the bound is reached).
	open1 := make(chan struct{})
	close(open1)
	f1.block = open1
	s.Observe(basisOf(estimateSQL(t, s, planners, "SELECT * FROM known WHERE k = 1")), estimate.Actual{CPUSeconds: 4})
	s.Flush()
	<-f1.started
	f1.block = make(chan struct{})
	unblock := sync.OnceFunc(func() { close(f1.block); close(f2.block) })
	defer unblock()

	var wg sync.WaitGroup
	got := make([]*estimate.Estimate, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = s.EstimateOn(context.Background(), planners, fmt.Sprintf("SELECT * FROM busy%d", i), alice)
		}()
		// The first takes planner 1, the second the idle planner 2.
		select {
		case <-f1.started:
		case <-f2.started:
		}
	}
	if f1.explains.Load() != 2 || f2.explains.Load() != 1 {
		t.Fatalf("EXPLAINs on planners: %d, %d; want them spread (2 with the earlier one, 1)", f1.explains.Load(), f2.explains.Load())
	}
	// Both planners are at the bound: no waiting.
	e, err := s.EstimateOn(context.Background(), planners, "SELECT * FROM known WHERE k = 2", alice)
	if err != nil || e.Source != estimate.SourceHistory || !e.ExplainSkipped || e.CPUSeconds != 4 || e.Sigma < co.ModelSigma {
		t.Fatalf("a known shape over the bound: %+v %v; want its history, skipped, with the model's uncertainty", e, err)
	}
	if _, err := s.EstimateOn(context.Background(), planners, "SELECT * FROM never_seen", alice); !errors.Is(err, ErrExplainBusy) {
		t.Fatalf("a new shape over the bound: %v; want ErrExplainBusy", err)
	}
	unblock()
	wg.Wait()
	for i, e := range got {
		if e == nil || e.Planner != planners[i] {
			t.Fatalf("estimate %d planned on %v; want %s", i, e, planners[i])
		}
	}
	if n := f1.explains.Load() + f2.explains.Load(); n != 3 {
		t.Fatalf("%d EXPLAINs in all; want 3 (none for the refused ones)", n)
	}
}

// BenchmarkCascadeExactRepeat is the hot path of a recurring statement:
// classify, the cheap check, the history keys and one history read; no
// EXPLAIN, no model.
func BenchmarkCascadeExactRepeat(b *testing.B) {
	const q = "SELECT l_returnflag, sum(l_extendedprice * (1 - l_discount)) FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' GROUP BY l_returnflag ORDER BY l_returnflag"
	for _, st := range []struct {
		name string
		open func(b *testing.B) history.Store
	}{
		{"memory", func(*testing.B) history.Store { return history.NewMemory(1000) }},
		{"bolt", func(b *testing.B) history.Store {
			s, err := history.OpenBolt(b.TempDir()+"/h.db", 1000)
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	} {
		b.Run(st.name, func(b *testing.B) {
			s := NewService(nil, ServiceOptions{Workers: 1, History: st.open(b), Cascade: defaults})
			defer s.Close()
			exact, shape := HistoryKeys(q, alice)
			for range 3 {
				s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}, estimate.Actual{CPUSeconds: 2})
			}
			s.Flush()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				e, err := s.EstimateOn(ctx, []string{"http://127.0.0.1:1"}, q, alice)
				if err != nil || e.Source != estimate.SourceHistory {
					b.Fatalf("%v %v", e, err)
				}
			}
		})
	}
}
