package estimator

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/plan"
)

// newRequest is sql from alice on planners as the cheap stage leaves it
// (classified), for the stages after it.
func newRequest(planners []string, sql string) *request {
	return &request{ctx: context.Background(), planners: planners, sql: sql, h: alice, kind: plan.Classify(sql)}
}

// recordStage records that it ran and answers with e and err.
type recordStage struct {
	name string
	ran  *[]string
	e    *estimate.Estimate
	err  error
	b    bool // set up a Basis first, as the history stage does
}

func (f recordStage) run(_ *Service, r *request) (*estimate.Estimate, error) {
	*f.ran = append(*f.ran, f.name)
	if f.b {
		r.basis = Basis{Exact: "x:1", Shape: "s:1", Source: estimate.SourceModel}
		r.b = &r.basis
	}
	return f.e, f.err
}

func TestCascadeRunsTheStagesUntilOneAnswers(t *testing.T) {
	s := newCascade(t, defaults, nil)
	answer, failed := &estimate.Estimate{Estimated: true, CPUSeconds: 2}, errors.New("failed")
	for _, tc := range []struct {
		name    string
		stages  func(ran *[]string) []stage
		ran     []string
		want    *estimate.Estimate
		wantErr error
		learn   bool
	}{
		{"the first answer ends the cascade", func(ran *[]string) []stage {
			return []stage{recordStage{name: "a", ran: ran}, recordStage{name: "b", ran: ran, e: answer}, recordStage{name: "c", ran: ran}}
		}, []string{"a", "b"}, answer, nil, false},
		{"an error ends the cascade", func(ran *[]string) []stage {
			return []stage{recordStage{name: "a", ran: ran, err: failed}, recordStage{name: "b", ran: ran, e: answer}}
		}, []string{"a"}, nil, failed, false},
		{"the answer carries the basis a stage set up", func(ran *[]string) []stage {
			return []stage{recordStage{name: "a", ran: ran, b: true}, recordStage{name: "b", ran: ran, e: answer}}
		}, []string{"a", "b"}, answer, nil, true},
		{"no answer at all is an error", func(ran *[]string) []stage {
			return []stage{recordStage{name: "a", ran: ran}}
		}, []string{"a"}, nil, errNoAnswer, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			answer.Learn = nil
			var ran []string
			e, err := s.cascade(newRequest(nil, "SELECT 1 FROM t"), tc.stages(&ran))
			if !slices.Equal(ran, tc.ran) || e != tc.want || !errors.Is(err, tc.wantErr) {
				t.Fatalf("ran %v, got %v %v; want %v, %v %v", ran, e, err, tc.ran, tc.want, tc.wantErr)
			}
			if e == nil {
				return
			}
			if b := UnmarshalBasis(e.Learn); (b != nil) != tc.learn || (b != nil && (b.Exact != "x:1" || b.Source != estimate.SourceModel)) {
				t.Fatalf("Learn %q (basis %+v); want a basis: %v", e.Learn, b, tc.learn)
			}
		})
	}
}
