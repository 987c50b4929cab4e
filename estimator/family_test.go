package estimator

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

// inSession is alice's header with the session properties props.
func inSession(props string) http.Header {
	h := alice.Clone()
	h.Set("X-Trino-Session", props)
	return h
}

func TestFamilyKeysIgnoreTheSession(t *testing.T) {
	const q = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	fp := Fingerprint(q)
	x1, s1, f1 := historyKeys(q, dialect.Trino, fp, alice)
	x2, s2, f2 := historyKeys(q, dialect.Trino, fp, inSession("join_distribution_type=BROADCAST"))
	if x1 == x2 || s1 == s2 {
		t.Fatal("the statement and shape keys must keep sessions apart")
	}
	if f1 != f2 || f1[:len(keyFamily)] != keyFamily {
		t.Fatalf("family keys %q %q: want one, prefixed %q", f1, f2, keyFamily)
	}
	// Without session properties the shape's digest input is the text and
	// context alone: the family's must still differ, or its residuals
	// would be the shape's written twice.
	if f1[len(keyFamily):] == s1[len(keyShape):] {
		t.Fatal("the family digest equals the shape's")
	}
	_, _, f3 := historyKeys("SELECT count(*) FROM lineitem WHERE l_orderkey = 7", dialect.Trino, Fingerprint("SELECT count(*) FROM lineitem WHERE l_orderkey = 7"), alice)
	if f3 == f1 {
		t.Fatal("another statement shares the family")
	}
	b := &Basis{Exact: x1, Shape: s1, Family: f1, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}
	if got := UnmarshalBasis(MarshalBasis(b)); got == nil || got.Family != f1 {
		t.Fatalf("the family does not cross the wire: %+v", got)
	}
}

// A statement family the text model underestimates 10×, learned in one
// session, corrects the text estimate of the same statement with other
// literals in another session (its shape there never ran): the family's
// residual stands in for the shape's. A statement of another family in
// that session gets only the global offset. Once the new session's shape
// has residuals of its own, they are used instead.
func TestFamilyResidualsReachOtherSessions(t *testing.T) {
	const (
		first   = "SELECT count(*) FROM lineitem WHERE l_orderkey = 2 -- text 0.01 0.03 0.1"
		literal = "SELECT count(*) FROM lineitem WHERE l_orderkey = 3 -- text 0.01 0.03 0.1"
		other   = "SELECT count(*) FROM orders WHERE o_orderkey = 3 -- text 0.01 0.03 0.1"
	)
	f := &fakePlanner{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, classes, 0.9
	co.RepeatSigma = 0
	s := newCascade(t, co, constModel(0.03))
	s.textHook = textModel
	est := func(sql string, h http.Header) *estimate.Estimate {
		t.Helper()
		e, err := s.EstimateOn(context.Background(), []string{srv.URL}, sql, h)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	observed := func(e *estimate.Estimate, actual float64) {
		t.Helper()
		b := basisOf(e)
		key := targetKey(familyKey(keyFamText, b.Family), estimate.TargetCPU)
		before, _ := s.learn.get(key)
		s.Observe(b, estimate.Actual{CPUSeconds: actual})
		s.Flush()
		waitFor(t, "the observation", func() bool {
			st, _ := s.learn.get(key)
			return st.Count > before.Count
		})
	}
	// The text model is right on five other statements: the global
	// offset stays 0 (one family's miss does not set it apart from 0).
	for _, tb := range []string{"t1", "t2", "t3", "t4", "t5"} {
		observed(est("SELECT * FROM "+tb+" -- text 0.01 0.03 0.1", alice), 0.03)
	}
	e := est(first, alice)
	if e.Source != estimate.SourceText {
		t.Fatalf("first sight: %s, want the text stage", e.Source)
	}
	observed(e, 0.3)

	bob := inSession("join_distribution_type=BROADCAST")
	lit, oth := est(literal, bob), est(other, bob)
	lb, ab := basisOf(lit), basisOf(e)
	if lb.Family != ab.Family || lb.Shape == ab.Shape {
		t.Fatal("want one family, two shapes")
	}
	// The family's one residual ln 10, shrunk by Shrink 1 toward the
	// global offset (0): ×√10; the other family: the raw 0.03 s.
	if math.Abs(oth.CPUSeconds-0.03) > 1e-9 {
		t.Errorf("another family: %.4g s, want the raw 0.03 s", oth.CPUSeconds)
	}
	if want := 0.03 * math.Sqrt(10); lit.CPUSeconds < want*0.999 {
		t.Errorf("the family in another session: %s %.4g s, want at least %.4g s (the family's residual)", lit.Source, lit.CPUSeconds, want)
	}
	// The new session's shape learns its own: 0.03 s ran 0.03 s. Its
	// residual 0 now corrects it, not the family's.
	observed(lit, 0.03)
	again := est("SELECT count(*) FROM lineitem WHERE l_orderkey = 4 -- text 0.01 0.03 0.1", bob)
	if again.Source == estimate.SourceText && math.Abs(again.CPUSeconds-0.03) > 0.03*0.6 {
		t.Errorf("after its own run: %.4g s, want near the shape's own 0.03 s", again.CPUSeconds)
	}
}

// The size line: after MinCalibration statements whose CPU time grew with
// the rows of the table they read (1 µs a row here), the text estimate
// of a statement over a table of a size the deployment knows, whose shape
// never ran, is weighed with the line's: the text model says 0.1 s, the
// line 0.3 s for 300k rows, the line's spread (about 0: the floor) much
// the narrower. A statement over a table of unknown size gets no line.
func TestSizeLineWeighsTheTextEstimate(t *testing.T) {
	z := sizes{"tpch.tiny.big": 3e5}
	rows := []float64{1e3, 1e4, 1e5, 2e5, 1e6, 1e7, 1e8}
	for i, r := range rows {
		z[fmt.Sprintf("tpch.tiny.t%d", i)] = r
	}
	s := newTextCascade(t, ExplainWhenUncertain, 0.5)
	s.textHookReads = 100 // every size within the text model's training
	s.opts.TableStats = z
	for i, r := range rows {
		e := withPlanner(t, s, fmt.Sprintf("SELECT count(*) FROM t%d -- text 0.05 0.1 0.2", i))
		b := basisOf(e)
		if b == nil || math.Abs(b.LnRows-math.Log1p(r)) > 1e-9 {
			t.Fatalf("t%d: basis %+v, want ln rows %.4f", i, b, math.Log1p(r))
		}
		s.Observe(b, estimate.Actual{CPUSeconds: 1e-6 * r})
		s.Flush()
	}
	waitFor(t, "the size line", func() bool {
		st, _ := s.learn.get(globalKey(keySize, dialect.Trino))
		return st.Count == uint64(len(rows))
	})
	r := newRequest(nil, "SELECT count(*) FROM big -- text 0.05 0.1 0.2")
	r.m = nil
	if _, err := (historyStage{}).run(s, r); err != nil {
		t.Fatal(err)
	}
	e, err := textStage{}.run(s, r)
	if err != nil || e == nil || e.Source != estimate.SourceText {
		t.Fatalf("got %+v %v, want the text stage", e, err)
	}
	if e.CPUSeconds < 0.25 || e.CPUSeconds > 0.35 || e.Sigma > 0.2 {
		t.Errorf("%.4g s σ %.3f; want about the line's 0.3 s, σ the line's", e.CPUSeconds, e.Sigma)
	}
	r = newRequest(nil, "SELECT count(*) FROM unknown -- text 0.05 0.1 0.2")
	if _, err := (historyStage{}).run(s, r); err != nil {
		t.Fatal(err)
	}
	if textStage.run(textStage{}, s, r); r.text == nil || math.Abs(r.text.CPUSeconds-0.1) > 1e-9 || r.b.LnRows > 0 {
		t.Errorf("a table of unknown size: %+v (ln rows %v), want the text model's 0.1 s", r.text, r.b.LnRows)
	}
}
