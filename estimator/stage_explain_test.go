package estimator

import (
	"errors"
	"math"
	"net/http/httptest"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

func TestExplainStage(t *testing.T) {
	const q = "SELECT * FROM orders WHERE o_orderkey = 1 /* cost 1000 */"
	t.Run("the EXPLAIN's plan and cost are left for the model and the optimizer", func(t *testing.T) {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		defer srv.Close()
		s := newCascade(t, defaults, nil)
		r := newRequest([]string{srv.URL}, q)
		r.b, r.reads = &r.basis, s.reads()
		r.basis.LnCost = math.NaN()
		e, err := explainStage{}.run(s, r)
		if e != nil || err != nil || r.planner != srv.URL || r.res == nil || len(r.res.PlanJSON) == 0 || f.explains.Load() != 1 {
			t.Fatalf("got %+v %v, planner %q, result %+v; want a pass with the plan", e, err, r.planner, r.res)
		}
		if math.Abs(r.b.LnCost-math.Log1p(1000)) > 1e-9 {
			t.Fatalf("basis cost %g, want ln(1 + 1000)", r.b.LnCost)
		}
	})
	t.Run("a failing EXPLAIN ends the cascade with its error", func(t *testing.T) {
		srv := httptest.NewServer(&fakePlanner{fail: true})
		defer srv.Close()
		s := newCascade(t, defaults, nil)
		if e, err := (explainStage{}).run(s, newRequest([]string{srv.URL}, q)); e != nil || err == nil {
			t.Fatalf("got %+v %v; want the EXPLAIN's error", e, err)
		}
	})
	for _, tc := range []struct {
		name    string
		shape   bool // the shape ran before
		text    bool // the text stage left its estimate
		want    estimate.Source
		wantErr error
	}{
		{"over the bound, the shape's history stands in", true, true, estimate.SourceHistory, nil},
		{"over the bound, else the text estimate stands in", false, true, estimate.SourceText, nil},
		{"over the bound with neither, it fails at once", false, false, estimate.SourceNone, ErrExplainBusy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePlanner{}
			srv := httptest.NewServer(f)
			defer srv.Close()
			co := defaults
			co.ExplainLimit = 1
			s := newCascade(t, co, nil)
			if tc.shape {
				observe(s, "SELECT * FROM orders WHERE o_orderkey = 2 /* cost 1000 */", 4)
			}
			_, release, _ := s.explainSlot([]string{srv.URL}, hotNeed(nil, false, &defaults)) // the one slot
			defer release()
			r := newRequest([]string{srv.URL}, q)
			if _, err := (historyStage{}).run(s, r); err != nil {
				t.Fatal(err)
			}
			if tc.text {
				r.text = &estimate.Estimate{Estimated: true, Source: estimate.SourceText, CPUSeconds: 2, Sigma: 1}
			}
			e, err := explainStage{}.run(s, r)
			if !errors.Is(err, tc.wantErr) || f.explains.Load() != 0 {
				t.Fatalf("err %v (%d EXPLAINs); want %v, none", err, f.explains.Load(), tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if e == nil || e.Source != tc.want || r.b.Source != tc.want || !e.ExplainSkipped || e.Sigma < co.ModelSigma {
				t.Fatalf("got %+v, basis %+v; want %s, explain-skipped, at least the model's uncertainty", e, r.b, tc.want)
			}
		})
	}
}
