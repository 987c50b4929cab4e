package plan

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
)

func TestTotalCPUCostSumsEveryNode(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(trinotest.ExplainDir, "tpch-q03-sf1.json"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := TotalCPUCost(b)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := Parse(b)
	want := 0.0
	p.Root.Walk(func(n *PlanNode) {
		for _, e := range n.Estimates {
			if !math.IsNaN(e.CPUCost) && !math.IsInf(e.CPUCost, 0) {
				want += e.CPUCost
			}
		}
	})
	if !(got > 0) || math.Abs(got-want) > 1e-6*want {
		t.Fatalf("TotalCPUCost = %g, want the sum %g (> 0)", got, want)
	}
	if _, err := TotalCPUCost([]byte("not json")); err == nil {
		t.Fatal("a bad plan gave no error")
	}
	one := `{"0":{"id":"1","name":"Values","descriptor":{},"outputs":[],"details":[],"estimates":[{"outputRowCount":1,"outputSizeInBytes":1,"cpuCost":"NaN","memoryCost":0,"networkCost":0}],"children":[]}}`
	if got, err := TotalCPUCost([]byte(one)); err != nil || got != 0 {
		t.Fatalf("an unknown cpuCost: %g, %v; want 0", got, err)
	}
}
