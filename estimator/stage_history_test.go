package estimator

import (
	"math"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// observe teaches s runs of sql (alice's session) taking secs each.
func observe(s *Service, sql string, secs ...float64) {
	exact, shape := HistoryKeys(sql, alice)
	for _, v := range secs {
		s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()}, estimate.Actual{CPUSeconds: v})
	}
	s.Flush()
}

func TestHistoryStage(t *testing.T) {
	const q = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	exact, shape := HistoryKeys(q, alice)
	for _, tc := range []struct {
		name    string
		sql     string
		runs    []float64 // observed before
		answers bool
		count   uint64 // runs read into request.exact
	}{
		{"a statement never seen passes, with its basis", q, nil, false, 0},
		{"one run is too few (MinCount 2): passes, the run read once", q, []float64{8}, false, 1},
		{"a history spread over 20x is not trusted: passes", q, []float64{1, 20}, false, 2},
		{"a confident history answers, no EXPLAIN", q, []float64{8, 8}, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newCascade(t, defaults, nil)
			observe(s, tc.sql, tc.runs...)
			r := newRequest(nil, tc.sql)
			e, err := historyStage{}.run(s, r)
			if err != nil || (e != nil) != tc.answers {
				t.Fatalf("got %+v %v; want an answer: %v", e, err, tc.answers)
			}
			b := r.b
			if b == nil || b.Exact != exact || b.Shape != shape || !math.IsNaN(b.LnModel) || !math.IsNaN(b.LnCost) || !math.IsNaN(b.LnText) {
				t.Fatalf("basis %+v; want the statement's keys, nothing computed yet", b)
			}
			if r.exact[estimate.TargetCPU].Count != tc.count {
				t.Fatalf("read %d runs, want %d", r.exact[estimate.TargetCPU].Count, tc.count)
			}
			if !tc.answers {
				return
			}
			// Two equal runs: the second, a repeat the history predicted
			// exactly (absolute error 0), shrinks the prior run-to-run
			// noise 0.25 to 0.25/2; the next run is off the mean of two by
			// that noise times √1.5.
			want := 0.25 / 2 * math.Sqrt(1.5)
			if e.Source != estimate.SourceHistory || b.Source != estimate.SourceHistory || math.Abs(e.CPUSeconds-8) > 1e-9 ||
				math.Abs(e.Sigma-want) > 1e-9 || e.Statement != "query" || e.Planner != "" {
				t.Fatalf("got %+v; want history, 8 s, σ %.4f (the run-to-run noise learned from one exact repeat, and the mean's), no planner", e, want)
			}
		})
	}
	t.Run("without a history it passes with no basis", func(t *testing.T) {
		s := NewService(nil, ServiceOptions{Workers: 1, Cascade: defaults})
		defer s.Close()
		r := newRequest(nil, q)
		if e, err := (historyStage{}).run(s, r); e != nil || err != nil || r.b != nil {
			t.Fatalf("got %+v %v, basis %+v; want a pass with no basis", e, err, r.b)
		}
	})
	t.Run("EXECUTE passes with no basis: its text does not say what runs", func(t *testing.T) {
		s := NewService(nil, ServiceOptions{Workers: 1, History: history.NewMemory(10), Cascade: defaults})
		defer s.Close()
		r := newRequest(nil, "EXECUTE stmt USING 1")
		if e, err := (historyStage{}).run(s, r); e != nil || err != nil || r.b != nil {
			t.Fatalf("got %+v %v, basis %+v; want a pass with no basis", e, err, r.b)
		}
	})
}
