package featurize

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

// TestLeanParseFeaturizesLikeFull: the serving path's O-T-P tree (a lean
// parse: no outputs, no details, only the descriptor keys leanDescriptorKey
// names; join criteria not parsed) matches the full one node for node, and
// the two encode to the same tensors, on every captured plan. A new
// descriptor read in otp.go without its key in the list fails here.
func TestLeanParseFeaturizesLikeFull(t *testing.T) {
	dynamic := 0
	for _, tree := range []TreeOptions{{}, {DynamicFilters: true}} {
		for f, b := range trinotest.Plans(t) {
			if n := leanMatchesFull(t, f, b, tree); tree.DynamicFilters {
				dynamic += n
			}
		}
	}
	if dynamic == 0 {
		t.Fatal("no captured plan has a dynamic filter clause: the DynamicFilters reading is not checked")
	}
}

// leanMatchesFull checks one plan with the readings tree and returns the
// number of dynamic filter clauses in its tree.
func leanMatchesFull(t *testing.T, f string, b []byte, tree TreeOptions) int {
	t.Helper()
	fullPlan, _ := loadOTP(t, f)
	fullRoot, err := BuildOTPWith(fullPlan, tree)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	lp, err := plan.ParseLimits(b, plan.Limits{Lean: true})
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	leanRoot, err := buildOTP(lp, false, tree)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	var full, lean []*OTPNode
	fullRoot.Walk(func(n *OTPNode) { full = append(full, n) })
	leanRoot.Walk(func(n *OTPNode) { lean = append(lean, n) })
	if len(full) != len(lean) {
		t.Fatalf("%s: %d O-T-P nodes from the full parse, %d from the lean one", f, len(full), len(lean))
	}
	for i, a := range full {
		c := lean[i]
		if a.Kind != c.Kind || a.Value != c.Value || a.Text != c.Text || a.part != c.part || a.link != c.link || (a.Plan == nil) != (c.Plan == nil) {
			t.Fatalf("%s node %d: full %s %q %q, lean %s %q %q", f, i, a.Kind, a.Value, a.Text, c.Kind, c.Value, c.Text)
		}
		if a.Kind == OTPPredicate && (a.Pred.String() != c.Pred.String() || (a.PredErr == nil) != (c.PredErr == nil)) {
			t.Fatalf("%s node %d: PRED %v/%v, lean %v/%v", f, i, a.Pred, a.PredErr, c.Pred, c.PredErr)
		}
		if a.Plan != nil && (a.Plan.ID != c.Plan.ID || !sameEstimates(a.Plan.Estimates, c.Plan.Estimates)) {
			t.Fatalf("%s node %d (%s): plan node %s/%v, lean %s/%v", f, i, a.Value, a.Plan.ID, a.Plan.Estimates, c.Plan.ID, c.Plan.Estimates)
		}
	}
	vecs := testVectors(8)
	for _, tok := range collectTokens(fullRoot) {
		vecs.Tokens[tok] = []float32{float32(len(tok)), 1, 2, 3, 4, 5, 6, 7}
	}
	ops, tables := BuildVocabs([]*OTPNode{fullRoot})
	enc := &Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: 8, Sampler: SamplerConfig{N: 15, K: 47, C: 3}, Tree: tree}
	want, err := enc.Encode(fullRoot)
	if err != nil {
		t.Fatal(err)
	}
	got, err := enc.Featurize(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: the serving path's features differ from the full parse's", f)
	}
	// As the service does: the next plan's encodings reuse these
	// tensors (and Featurize reuses its O-T-P arena), so anything a
	// plan leaves behind in them shows up as a difference there.
	got.Release()
	want.Release()
	clauses := 0
	for _, n := range full {
		if n.Kind == OTPPredicate {
			clauses += strings.Count(n.Value, " "+OpDynamic+"]")
		}
	}
	return clauses
}

func sameEstimates(a, b []plan.Estimate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		for j, v := range []float64{x.OutputRowCount, x.OutputSizeInBytes, x.CPUCost, x.MemoryCost, x.NetworkCost} {
			w := []float64{y.OutputRowCount, y.OutputSizeInBytes, y.CPUCost, y.MemoryCost, y.NetworkCost}[j]
			if !(v == w || math.IsNaN(v) && math.IsNaN(w)) {
				return false
			}
		}
	}
	return true
}
