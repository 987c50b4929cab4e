package featurize

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

func TestPlanStatsOverADirectoryOfPlans(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(trinotest.ExplainDir, "*.json"))
	if len(files) == 0 {
		t.Fatal("no plans in testdata/explain")
	}
	var rows []PlanStat
	sentences := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.Parse(b)
		if err != nil {
			t.Fatal(err)
		}
		root, err := BuildOTP(p)
		if err != nil {
			t.Fatal(err)
		}
		s := NewPlanStat("tpcds-q01-sf1", root)
		if s.Workload != "tpcds" || s.Tables == nil || s.Nodes != Stats(root).Nodes {
			t.Fatalf("%s: %+v", f, s)
		}
		preds := PredicateSentences(root, false)
		if len(preds) > s.Preds || len(PredicateSentences(root, true)) < len(preds) {
			t.Errorf("%s: %d sentences for %d PRED nodes", f, len(preds), s.Preds)
		}
		sentences += len(preds)
		s.Workload = filepath.Base(f)[:2] // two workloads or more
		rows = append(rows, s)
	}
	if sentences == 0 {
		t.Error("no predicate sentences in any plan")
	}
	g := NewSizeDepthGrid(rows, DefaultNodeEdges, DefaultDepthEdges)
	total := 0
	for _, r := range g.Counts {
		total += sumInts(r)
	}
	if total != len(rows) || len(g.Counts) != len(DefaultDepthEdges)+1 || len(g.Counts[0]) != len(DefaultNodeEdges)+1 {
		t.Errorf("grid holds %d of %d plans, %d×%d cells", total, len(rows), len(g.Counts), len(g.Counts[0]))
	}
	maxima := WorkloadMaxima(rows)
	plans := 0
	for i, m := range maxima {
		plans += m.Plans
		if i > 0 && maxima[i-1].Workload >= m.Workload {
			t.Errorf("workloads out of order: %v", maxima)
		}
	}
	if plans != len(rows) {
		t.Errorf("maxima count %d plans, want %d", plans, len(rows))
	}
}

func TestBucketsAndLabels(t *testing.T) {
	edges := []int{25, 50}
	var got []string
	for i := 0; i <= len(edges); i++ {
		got = append(got, BucketLabel(i, edges))
	}
	if want := []string{"<25", "25-49", "≥50"}; !reflect.DeepEqual(got, want) {
		t.Errorf("labels %v, want %v", got, want)
	}
	for v, want := range map[int]int{0: 0, 24: 0, 25: 1, 49: 1, 50: 2, 1000: 2} {
		if b := bucketOf(v, edges); b != want {
			t.Errorf("bucketOf(%d) = %d, want %d", v, b, want)
		}
	}
	if m := WorkloadMaxima(nil); len(m) != 0 {
		t.Errorf("maxima of nothing: %v", m)
	}
	if s := NewPlanStat("plain", nil); s.Workload != "plain" || s.Tables == nil {
		t.Errorf("%+v", s)
	}
}

func sumInts(v []int) int {
	n := 0
	for _, x := range v {
		n += x
	}
	return n
}
