package estimator

import (
	"net/http/httptest"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

func TestTextStage(t *testing.T) {
	const (
		inside    = "SELECT count(*) FROM orders WHERE o_orderkey = 1 -- text 0.05 0.1 0.2"
		straddles = "SELECT count(*) FROM lineitem WHERE l_orderkey = 2 -- text 0.3 2 9"
	)
	for _, tc := range []struct {
		name    string
		mode    ExplainMode
		sql     string
		history []float64 // the statement's runs before
		want    estimate.Source
		text    bool // the text estimate is left for the EXPLAIN's stand-in
	}{
		{"under always it passes without the text model", ExplainAlways, inside, nil, estimate.SourceNone, false},
		{"an interval inside one class answers", ExplainWhenUncertain, inside, nil, estimate.SourceText, true},
		{"an interval across a bound passes, its estimate kept", ExplainWhenUncertain, straddles, nil, estimate.SourceNone, true},
		{"under never any interval answers", ExplainNever, straddles, nil, estimate.SourceText, true},
		{"a short history narrower than the text model answers", ExplainWhenUncertain, straddles, []float64{0.2}, estimate.SourceHistory, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakePlanner{}
			srv := httptest.NewServer(f)
			defer srv.Close()
			s := newTextCascade(t, tc.mode, 0.5)
			if tc.mode == ExplainAlways {
				s.textHook = func(string) ([]float64, []float64) { t.Error("text model consulted"); return nil, nil }
			}
			observe(s, tc.sql, tc.history...)
			r := newRequest([]string{srv.URL}, tc.sql)
			if e, err := (historyStage{}).run(s, r); e != nil || err != nil {
				t.Fatalf("the history answered: %+v %v", e, err)
			}
			e, err := textStage{}.run(s, r)
			if err != nil || (r.text != nil) != tc.text {
				t.Fatalf("err %v, text estimate %+v; want one kept: %v", err, r.text, tc.text)
			}
			if tc.want == estimate.SourceNone {
				if e != nil || f.explains.Load() != 0 {
					t.Fatalf("answered %+v (%d EXPLAINs); want a pass, no EXPLAIN yet", e, f.explains.Load())
				}
				return
			}
			if e == nil || e.Source != tc.want || r.b.Source != tc.want || r.b.Pending == "" || e.Planner != "" {
				t.Fatalf("got %+v, basis %+v; want %s with a background EXPLAIN pending", e, r.b, tc.want)
			}
			waitFor(t, "the background EXPLAIN", func() bool { return s.BackgroundStats().Done == 1 })
		})
	}
}
