package estimator

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

// The text stage's unit tests: the fake planner of cascade_test.go, the
// model stand-in, and a stand-in for the text model (textHook) whose
// quantiles are the numbers in the statement's "text LO MID HI" comment.
// The real text model behind the real binary: testing/e2e/cascade.

var textComment = regexp.MustCompile(`text ([0-9.e+-]+) ([0-9.e+-]+) ([0-9.e+-]+)`)

func textModel(sql string) (qs, secs []float64) {
	m := textComment.FindStringSubmatch(sql)
	if m == nil {
		return nil, nil
	}
	for _, s := range m[1:] {
		v, _ := strconv.ParseFloat(s, 64)
		secs = append(secs, v)
	}
	return []float64{0.1, 0.5, 0.9}, secs
}

// classes: small up to 1 s, medium up to 10 s, large above.
var classes = []float64{1, 10, 0}

func newTextCascade(t *testing.T, mode ExplainMode, model float64) *Service {
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = mode, classes, 0.9
	s := newCascade(t, co, constModel(model))
	s.textHook = textModel
	return s
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestTextStageChoosesByModeAndInterval(t *testing.T) {
	const (
		inside    = "SELECT count(*) FROM orders WHERE o_orderkey = 1 -- text 0.05 0.1 0.2"
		straddles = "SELECT count(*) FROM lineitem WHERE l_orderkey = 2 -- text 0.3 2 9"
		noText    = "SELECT count(*) FROM part WHERE p_partkey = 3"
	)
	for _, c := range []struct {
		mode ExplainMode
		sql  string
		want estimate.Source
	}{
		{ExplainAlways, inside, estimate.SourceModel},
		{ExplainAlways, straddles, estimate.SourceModel},
		{ExplainWhenUncertain, inside, estimate.SourceText},
		{ExplainWhenUncertain, straddles, estimate.SourceModel},
		{ExplainWhenUncertain, noText, estimate.SourceModel},
		{ExplainNever, inside, estimate.SourceText},
		{ExplainNever, straddles, estimate.SourceText},
		{ExplainNever, noText, estimate.SourceModel},
	} {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		s := newTextCascade(t, c.mode, 0.5)
		e := estimateSQL(t, s, []string{srv.URL}, c.sql)
		if e.Source != c.want {
			t.Errorf("%s, %q: source %s, want %s", c.mode, c.sql, e.Source, c.want)
		}
		// The model's estimate carries the text stage's number beside its
		// own (under always the text stage does not run).
		want := textNumber(c.sql)
		if c.mode == ExplainAlways {
			want = 0
		}
		if c.want == estimate.SourceModel && e.TextCPUSeconds != want {
			t.Errorf("%s, %q: text number %v beside the model's, want %v", c.mode, c.sql, e.TextCPUSeconds, want)
		}
		hot := e.Planner != ""
		if wantHot := c.want != estimate.SourceText; hot != wantHot {
			t.Errorf("%s, %q: EXPLAIN on the hot path %v, want %v", c.mode, c.sql, hot, wantHot)
		}
		if c.want == estimate.SourceText {
			lo, hi := e.CPUSeconds*math.Exp(-1.2816*e.Sigma), e.CPUSeconds*math.Exp(1.2816*e.Sigma)
			if math.Abs(e.CPUSeconds-textMid(c.sql)) > 1e-9 || lo > textLo(c.sql)+1e-9 || hi < textHi(c.sql)-1e-9 {
				t.Errorf("%s, %q: text estimate %.3g [%.3g, %.3g] does not carry the model's quantiles", c.mode, c.sql, e.CPUSeconds, lo, hi)
			}
			if basisOf(e) == nil || basisOf(e).Pending == "" || basisOf(e).Source != estimate.SourceText {
				t.Errorf("%s: a text estimate must carry its background EXPLAIN's token: %+v", c.mode, basisOf(e))
			}
			// The EXPLAIN still runs, off the hot path.
			waitFor(t, "the background EXPLAIN", func() bool { return f.explains.Load() == 1 })
			waitFor(t, "the background EXPLAIN's count", func() bool { return s.BackgroundStats().Done == 1 })
		} else if n := f.explains.Load(); n != 1 {
			t.Errorf("%s, %q: %d EXPLAINs, want 1", c.mode, c.sql, n)
		}
		srv.Close()
	}
}

func textQ(sql string, i int) float64 { _, secs := textModel(sql); return secs[i] }

func textLo(sql string) float64  { return textQ(sql, 0) }
func textMid(sql string) float64 { return textQ(sql, 1) }
func textHi(sql string) float64  { return textQ(sql, 2) }

// textNumber is the text model's median for sql, 0 when it has none.
func textNumber(sql string) float64 {
	if _, secs := textModel(sql); secs != nil {
		return secs[1]
	}
	return 0
}

// sigma is a constant model uncertainty for decides.
func sigma(v float64) func(estimate.Target) float64 {
	return func(estimate.Target) float64 { return v }
}

// An interval that straddles a bound is not explained when the plan could
// not change its class: after EXPLAIN the model's estimate (with its own
// uncertainty) would be routed by its 0.9 quantile to the same class for
// every value the interval finds plausible.
func TestTextStageSkipsAPlanThatCannotChangeTheClass(t *testing.T) {
	co := CascadeOptions{Explain: ExplainWhenUncertain, ClassBounds: []float64{1, 0}, ClassQuantile: 0.9}
	for _, c := range []struct {
		secs, sigma, after float64
		want               bool
	}{
		{1.6, 0.5, 0.3, true},  // 10–90%: 0.84–3.0 s; the plan's 0.9 quantile ≥ 1.1 s at the low end: the large class either way
		{1.6, 0.5, 0, false},   // no model uncertainty known: the interval straddles, explain
		{1.1, 0.5, 0.3, false}, // the plan could place it small
		{0.7, 0.5, 0.3, false}, // routed large by its own 0.9 quantile (1.33 s), but the plan could place it small
		{0.5, 0.5, 0.3, true},  // 0.26–0.95 s: in the small class
		{8, 2, 0.3, false},     // too wide: 0.6–103 s
	} {
		e := &estimate.Estimate{CPUSeconds: c.secs, Sigma: c.sigma}
		if got := co.decides(e, sigma(c.after)); got != c.want {
			t.Errorf("%.1f s, σ %.1f, σ after %.1f: decides = %v, want %v", c.secs, c.sigma, c.after, got, c.want)
		}
	}
	// An interval inside one class decides without the model's
	// uncertainty: the history is not read for it.
	if !co.decides(&estimate.Estimate{CPUSeconds: 0.5, Sigma: 0.5}, func(estimate.Target) float64 { t.Fatal("sigmaAfter read"); return 0 }) {
		t.Error("0.26–0.95 s lies in the small class")
	}
	co.ClassQuantile = 0.5 // routed by the median: the plan's estimate is not lifted, so it could go small
	if co.decides(&estimate.Estimate{CPUSeconds: 1.6, Sigma: 0.5}, sigma(0.3)) {
		t.Error("at the 0.5 quantile the plan could place 1.6 s (σ 0.5) small: it must be explained")
	}
}

// The class quantile widens the interval that must lie in one class: at
// 0.99 an interval whose 90% end is inside the small class but whose 99%
// end is not is explained.
func TestTextStageCoversTheClassQuantile(t *testing.T) {
	co := CascadeOptions{Explain: ExplainWhenUncertain, ClassBounds: classes, ClassQuantile: 0.9}
	e := &estimate.Estimate{CPUSeconds: 0.3, Sigma: math.Log(0.9/0.3) / 1.2816} // 90%: 0.9 s, 99%: 1.6 s
	if !co.decides(e, sigma(0)) {
		t.Fatal("at the 0.9 quantile the interval lies in the small class")
	}
	co.ClassQuantile = 0.99
	if co.decides(e, sigma(0)) {
		t.Fatal("at the 0.99 quantile the interval reaches the medium class: it must be explained")
	}
	co.ClassBounds = nil
	if !co.decides(e, sigma(0)) {
		t.Fatal("without classes every interval lies in one class")
	}
}

// The model's number of a query the text stage routed reaches the history
// although the query completes before its background EXPLAIN: Observe
// waits for it off the hot path; and when the EXPLAIN is done first,
// Settle hands its plan to the feedback record.
func TestBackgroundExplainReachesObserve(t *testing.T) {
	for _, finishFirst := range []bool{false, true} {
		f := &fakePlanner{block: make(chan struct{})}
		srv := httptest.NewServer(f)
		s := newTextCascade(t, ExplainWhenUncertain, 0.5)
		const q = "SELECT sum(o_totalprice) FROM orders WHERE o_custkey = 4 -- text 0.05 0.1 0.2 cost 1000"
		e := estimateSQL(t, s, []string{srv.URL}, q) // answered while the EXPLAIN is blocked: not waiting for it
		if e.Source != estimate.SourceText || basisOf(e) == nil || basisOf(e).Pending == "" {
			t.Fatalf("source %s, basis %+v: want text with a pending background EXPLAIN", e.Source, basisOf(e))
		}
		learn := basisOf(e) // as it crosses the proxy
		const actual = 2.0
		if finishFirst {
			close(f.block)
			bg, ok := s.Settle(context.Background(), learn)
			if !ok || bg.Err != nil || len(bg.Plan) == 0 || bg.ModelCPUSeconds != 0.5 || bg.Planner != srv.URL {
				t.Fatalf("Settle: %+v %v; want the plan and the model's 0.5 s", bg, ok)
			}
			if math.Abs(learn.LnModel-math.Log(0.5)) > 1e-9 || math.IsNaN(learn.LnCost) {
				t.Fatalf("Settle left the basis without the model's numbers: %+v", learn)
			}
		}
		s.Observe(learn, estimate.Actual{CPUSeconds: actual})
		if !finishFirst {
			time.Sleep(20 * time.Millisecond) // the query completed; its EXPLAIN has not
			close(f.block)
		}
		resKey := keyResidual + learn.Shape[len(keyShape):]
		waitFor(t, "the residual", func() bool { _, ok := s.learn.get(resKey); return ok })
		r, _ := s.learn.get(resKey)
		if want := math.Log(actual) - math.Log(0.5); math.Abs(r.Mean-want) > 1e-9 {
			t.Fatalf("finish first %v: residual %.4f, want ln actual − ln model = %.4f", finishFirst, r.Mean, want)
		}
		if c, ok := s.learn.get(keyOptimizer); !ok || c.Count != 1 {
			t.Fatalf("finish first %v: the plan's cost did not teach the optimizer calibration: %+v", finishFirst, c)
		}
		if tr, ok := s.learn.get(keyText); !ok || math.Abs(tr.Mean-(math.Log(actual)-math.Log(0.1))) > 1e-9 {
			t.Fatalf("finish first %v: text offset %+v, want ln actual − ln text median", finishFirst, tr)
		}
		// The statement's next estimate moves toward 2 s: the text model's
		// number corrected by what its shape taught, or (as narrow) the
		// shape's run itself.
		s.opts.Cascade.MinCount = 9           // keep the history from answering
		s.opts.Cascade.Explain = ExplainNever // the corrected interval may straddle 1 s
		e = estimateSQL(t, s, []string{srv.URL}, "SELECT sum(o_totalprice) FROM orders WHERE o_custkey = 5 -- text 0.05 0.1 0.2")
		if (e.Source != estimate.SourceText && e.Source != estimate.SourceHistory) || e.CPUSeconds <= 0.1 {
			t.Fatalf("finish first %v: next run %s %.3g s; want text or the shape's history, toward 2 s", finishFirst, e.Source, e.CPUSeconds)
		}
		text := &estimate.Estimate{CPUSeconds: 0.1, Sigma: math.Log(2) / 1.2816}
		if s.correctText(s.reads(), text, basisOf(e)); text.CPUSeconds <= 0.1 {
			t.Fatalf("finish first %v: the text model's 0.1 s corrected to %.3g s; want upward toward 2 s", finishFirst, text.CPUSeconds)
		}
		srv.Close()
	}
}

// Over the EXPLAIN bound, a straddling text estimate stands in rather than
// failing open; and a text answer with no free slot skips its background
// EXPLAIN (counted) instead of queueing it.
func TestTextStageOverTheExplainBound(t *testing.T) {
	f := &fakePlanner{block: make(chan struct{}), started: make(chan struct{}, 4)}
	srv := httptest.NewServer(f)
	defer srv.Close()
	co := defaults
	co.Explain, co.ClassBounds, co.ExplainLimit = ExplainWhenUncertain, classes, 1
	s := newCascade(t, co, constModel(0.5))
	s.textHook = textModel
	go s.EstimateOn(context.Background(), []string{srv.URL}, "SELECT 1 FROM nation -- text 0.3 2 9", alice)
	<-f.started // the one slot is taken
	e := estimateSQL(t, s, []string{srv.URL}, "SELECT 2 FROM region -- text 0.3 2 9")
	if e.Source != estimate.SourceText || !e.ExplainSkipped {
		t.Fatalf("over the bound: %s skipped=%v; want text, explain-skipped", e.Source, e.ExplainSkipped)
	}
	e = estimateSQL(t, s, []string{srv.URL}, "SELECT 3 FROM region -- text 0.05 0.1 0.2")
	if e.Source != estimate.SourceText || basisOf(e).Pending != "" || s.BackgroundStats().Skipped != 1 {
		t.Fatalf("no slot for the background EXPLAIN: %s pending %q stats %+v; want skipped", e.Source, basisOf(e).Pending, s.BackgroundStats())
	}
	close(f.block)
}

func TestParseExplainMode(t *testing.T) {
	for s, want := range map[string]ExplainMode{"always": ExplainAlways, "when-uncertain": ExplainWhenUncertain, "never": ExplainNever} {
		if got, err := ParseExplainMode(s); err != nil || got != want {
			t.Errorf("%q: %v %v", s, got, err)
		}
	}
	for _, s := range []string{"sometimes", ""} {
		if _, err := ParseExplainMode(s); err == nil {
			t.Errorf("%q must be refused", s)
		}
	}
}

// Before the plan, a statement's short history (one run: too few to answer
// alone) or its shape's (other literals) routes at once when its interval
// lies in one class, where the text stage's straddles; near a class bound
// it does not, and the EXPLAIN runs on the hot path.
func TestHistoryStandsInBeforeThePlan(t *testing.T) {
	const (
		first    = "SELECT count(*) FROM lineitem WHERE l_orderkey = 2 -- text 0.3 2 9"
		literals = "SELECT count(*) FROM lineitem WHERE l_orderkey = 3 -- text 0.3 2 9"
		near     = "SELECT count(*) FROM orders WHERE o_orderkey = 4 -- text 0.3 2 9"
		nearLit  = "SELECT count(*) FROM orders WHERE o_orderkey = 5 -- text 0.3 2 9"
	)
	for _, mode := range []ExplainMode{ExplainAlways, ExplainWhenUncertain} {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		s := newTextCascade(t, mode, 0.5)
		run := func(sql string, actual float64) *estimate.Estimate {
			t.Helper()
			e := estimateSQL(t, s, []string{srv.URL}, sql)
			s.Observe(basisOf(e), estimate.Actual{CPUSeconds: actual})
			s.Flush()
			waitFor(t, "the observation", func() bool {
				st, ok := s.learn.get(basisOf(e).Exact)
				return ok && st.Count > 0
			})
			return e
		}
		for _, sql := range []string{first, near} {
			if e := run(sql, map[string]float64{first: 0.2, near: 0.8}[sql]); e.Source != estimate.SourceModel || e.Planner == "" {
				t.Fatalf("%s: first run %s (planner %q); want the model after a hot EXPLAIN", mode, e.Source, e.Planner)
			}
		}
		for _, c := range []struct {
			sql       string
			standsIn  bool
			wantSigma float64
		}{
			// One run of the statement: sigma² = (0 + 1·0.5²)/2.
			{first, true, 0.3536},
			// Its shape, one run at 0.2 s: sigma² = (0 + 1·1²)/2.
			{literals, true, 0.7071},
			// 0.8 s: the 90% end passes the 1 s bound, so the plan decides.
			{near, false, 0},
			{nearLit, false, 0},
		} {
			before := f.explains.Load()
			e := estimateSQL(t, s, []string{srv.URL}, c.sql)
			if mode == ExplainAlways || !c.standsIn {
				if e.Source == estimate.SourceHistory || e.Planner == "" || f.explains.Load() != before+1 {
					t.Errorf("%s, %q: source %s planner %q; want the EXPLAIN on the hot path", mode, c.sql, e.Source, e.Planner)
				}
				continue
			}
			if e.Source != estimate.SourceHistory || e.Planner != "" || basisOf(e) == nil || basisOf(e).Pending == "" || basisOf(e).Source != estimate.SourceHistory {
				t.Errorf("%s, %q: source %s planner %q basis %+v; want history, no hot EXPLAIN, a background one", mode, c.sql, e.Source, e.Planner, basisOf(e))
				continue
			}
			if math.Abs(e.CPUSeconds-0.2) > 1e-9 || math.Abs(e.Sigma-c.wantSigma) > 1e-3 {
				t.Errorf("%s, %q: %.4g s sigma %.4f; want 0.2 s sigma %.4f", mode, c.sql, e.CPUSeconds, e.Sigma, c.wantSigma)
			}
			waitFor(t, "the background EXPLAIN", func() bool { return f.explains.Load() == before+1 })
		}
		srv.Close()
	}
}

// withPlanner estimates sql with s, a fake planner of its own behind it.
func withPlanner(t *testing.T, s *Service, sql string) *estimate.Estimate {
	t.Helper()
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	return estimateSQL(t, s, []string{srv.URL}, sql)
}

// sizes is a TableStatsSource that knows some tables' row counts.
type sizes map[string]float64

func (z sizes) Lookup(server string, tables []plan.TableName, h http.Header) []featurize.TableStats {
	out := make([]featurize.TableStats, len(tables))
	for i, t := range tables {
		if rows, ok := z[t.String()]; ok {
			out[i] = featurize.TableStats{Rows: rows, Known: true}
		}
	}
	return out
}

// A text model that reads table sizes decides under when-uncertain only
// for statements whose tables' sizes are known and within its training
// (ln rows up to 10 here, ~22k rows, plus e×); under never it answers
// whatever it knows.
func TestTextStageDefersWhenTableSizesAreUnknownOrBeyondTraining(t *testing.T) {
	const (
		known   = "SELECT count(*) FROM orders -- text 0.05 0.1 0.2"
		unknown = "SELECT count(*) FROM lineitem -- text 0.05 0.1 0.2"
		huge    = "SELECT count(*) FROM huge -- text 0.05 0.1 0.2"
		noTable = "SELECT count(*) FROM TABLE(sequence(start => 1, stop => 10)) -- text 0.05 0.1 0.2"
	)
	z := sizes{"tpch.tiny.orders": 15000, "tpch.tiny.huge": 1e9}
	for _, c := range []struct {
		mode ExplainMode
		sql  string
		want estimate.Source
	}{
		{ExplainWhenUncertain, known, estimate.SourceText},
		{ExplainWhenUncertain, unknown, estimate.SourceModel},
		{ExplainWhenUncertain, huge, estimate.SourceModel},
		{ExplainWhenUncertain, noTable, estimate.SourceText},
		{ExplainNever, unknown, estimate.SourceText},
		{ExplainNever, huge, estimate.SourceText},
	} {
		s := newTextCascade(t, c.mode, 0.5)
		s.textHookReads = 10
		s.opts.TableStats = z
		e := withPlanner(t, s, c.sql)
		if e.Source != c.want {
			t.Errorf("%s, %q: source %s, want %s", c.mode, c.sql, e.Source, c.want)
		}
		// A text number far from the text model's training is not shown beside the model's.
		if c.want == estimate.SourceModel && e.TextCPUSeconds != 0 {
			t.Errorf("%s, %q: text number %v beside the model's, want none (far)", c.mode, c.sql, e.TextCPUSeconds)
		}
	}
}

// Under when-uncertain a statement the text model finds may cost more
// than TextMaxSeconds is explained even when its interval lies inside one
// class; without the bound the class alone decides.
func TestTextStageExplainsStatementsThatMayBeLarge(t *testing.T) {
	const (
		small  = "SELECT count(*) FROM orders WHERE o_orderkey = 1 -- text 0.05 0.1 0.2"
		medium = "SELECT count(*) FROM lineitem WHERE l_orderkey = 2 -- text 2 3 5"
		noText = "SELECT count(*) FROM part WHERE p_partkey = 3"
	)
	for _, c := range []struct {
		max  float64
		sql  string
		want estimate.Source
	}{
		{1, small, estimate.SourceText},
		{1, medium, estimate.SourceModel},
		{0, medium, estimate.SourceText},
		{10, medium, estimate.SourceText},
		{1, noText, estimate.SourceModel}, // no text estimate: nothing to bound
	} {
		s := newTextCascade(t, ExplainWhenUncertain, 3)
		s.opts.Cascade.TextMaxSeconds = c.max
		if got := withPlanner(t, s, c.sql).Source; got != c.want {
			t.Errorf("text_max_seconds %v, %q: source %s, want %s", c.max, c.sql, got, c.want)
		}
	}
}

// With DropPlans (no sink records plans) a background result keeps the
// model's numbers but not the plan: a result waits up to an hour for an
// outcome that another replica may have received.
func TestBackgroundResultDropsItsPlanWhenNobodyRecordsIt(t *testing.T) {
	f := &fakePlanner{block: make(chan struct{})}
	close(f.block)
	srv := httptest.NewServer(f)
	defer srv.Close()
	s := newTextCascade(t, ExplainWhenUncertain, 0.5)
	s.DropPlans(true)
	const q = "SELECT sum(o_totalprice) FROM orders WHERE o_custkey = 5 -- text 0.05 0.1 0.2 cost 1000"
	e := estimateSQL(t, s, []string{srv.URL}, q)
	if basisOf(e) == nil || basisOf(e).Pending == "" {
		t.Fatalf("source %s, basis %+v: want a pending background EXPLAIN", e.Source, basisOf(e))
	}
	bg, ok := s.Settle(context.Background(), basisOf(e))
	if !ok || bg.Err != nil || bg.Plan != nil || bg.ModelCPUSeconds != 0.5 {
		t.Fatalf("Settle: plan %d bytes, %+v %v; want no plan and the model's 0.5 s", len(bg.Plan), bg, ok)
	}
}
