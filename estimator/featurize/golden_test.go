package featurize

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

// go test ./estimator/featurize -update refreshes the captured plans from the live
// Trino at PRESTROID_TRINO_URL (when set) and rewrites every golden file.
var update = flag.Bool("update", false, "refresh testdata/explain plans from PRESTROID_TRINO_URL and rewrite golden files")

// TestCapturePlans refreshes testdata/explain from the live Trino; only with -update.
func TestCapturePlans(t *testing.T) {
	if !*update {
		t.Skip("run with -update to refresh the captured plans")
	}
	server := trinotest.URL(t)
	c := &plan.ExplainClient{}
	for _, scale := range []string{"tiny", "sf1"} {
		for _, q := range trinotest.Workloads(t, scale) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			res, err := c.Explain(ctx, server, q.SQL, trinotest.UserHeader("prestroid-capture"))
			cancel()
			if err != nil {
				t.Fatalf("%s at %s: %v", q.Name, scale, err)
			}
			plan := bytes.TrimRight(res.PlanJSON, "\n")
			if err := os.WriteFile(filepath.Join(trinotest.ExplainDir, q.Name+"-"+scale+".json"), append(plan, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// planFiles lists the captured plans (sorted).
func planFiles(t testing.TB) []string {
	files, err := filepath.Glob(filepath.Join(trinotest.ExplainDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no captured plans in %s", trinotest.ExplainDir)
	}
	sort.Strings(files)
	return files
}

func loadOTP(t testing.TB, file string) (*plan.Plan, *OTPNode) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	root, err := BuildOTP(p)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return p, root
}

// checkGolden compares got with the golden file; -update rewrites it, a
// mismatch writes got to golden+".actual" beside it.
func checkGolden(t *testing.T, golden string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(golden + ".actual")
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./estimator/featurize -update)", err)
	}
	if !bytes.Equal(want, got) {
		os.WriteFile(golden+".actual", got, 0o644)
		t.Errorf("%s differs; actual output written to %s.actual", golden, golden)
		return
	}
	os.Remove(golden + ".actual")
}

// TestGoldenOTP checks the O-T-P rendering and the sub-trees (N=15, K=9,
// C=3) of every captured plan.
func TestGoldenOTP(t *testing.T) {
	for _, f := range planFiles(t) {
		base := strings.TrimSuffix(f, ".json")
		t.Run(filepath.Base(base), func(t *testing.T) {
			_, root := loadOTP(t, f)
			if err := checkOTPShape(root); err != nil {
				t.Fatal(err)
			}
			checkGolden(t, base+".otp.golden", []byte(RenderOTP(root)))
			sts, err := SampleSubTrees(root, SamplerConfig{N: 15, K: 9, C: 3})
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, base+".subtrees.golden", []byte(RenderSubTrees(sts)))
			// the sampler's invariants hold on every real plan too
			checkSampler(t, root, SamplerConfig{N: 15, C: 3})
			checkSampler(t, root, SamplerConfig{N: 32, C: 3})
		})
	}
}

// checkOTPShape verifies the O-T-P invariants: OPR nodes have exactly two
// children, TBL/PRED/∅ none; TBL only left of a TableScan.
func checkOTPShape(root *OTPNode) error {
	var err error
	root.Walk(func(n *OTPNode) {
		if err != nil {
			return
		}
		switch n.Kind {
		case OTPOperator:
			if n.Left == nil || n.Right == nil {
				err = fmt.Errorf("OPR %s has a nil child", n.Value)
			}
			if n.Left != nil && n.Left.Kind == OTPTable && (n.Value != "TableScan" || n.Right.Kind != OTPEmpty) {
				err = fmt.Errorf("TBL under %s", n.Value)
			}
			if n.Left != nil && (n.Left.Kind == OTPPredicate) {
				err = fmt.Errorf("PRED on the left of %s", n.Value)
			}
		default:
			if !n.IsLeaf() {
				err = fmt.Errorf("%s node with children", n.Kind)
			}
		}
	})
	return err
}

// TestGoldenStats records per-plan statistics, the per-workload maxima at
// each scale (the paper's Fig 2 numbers) and the predicate corpus size.
func TestGoldenStats(t *testing.T) {
	var b strings.Builder
	type max struct{ nodes, depth int }
	maxima := map[string]*max{}
	sentences := map[string]struct{}{}     // PRED nodes and join criteria
	predSentences := map[string]struct{}{} // PRED nodes only (the Word2Vec corpus)
	var keys []string
	fmt.Fprintf(&b, "# plan\tplan-nodes\totp-nodes\tmax-depth\tpreds\ttables\n")
	for _, f := range planFiles(t) {
		p, root := loadOTP(t, f)
		s := Stats(root)
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		fmt.Fprintf(&b, "%s\t%d\t%d\t%d\t%d\t%d\n", name, p.Nodes, s.Nodes, s.MaxDepth, s.Preds, len(s.Tables))
		wl := name[:strings.IndexByte(name, '-')] + "-" + name[strings.LastIndexByte(name, '-')+1:]
		m := maxima[wl]
		if m == nil {
			m = &max{}
			maxima[wl] = m
			keys = append(keys, wl)
		}
		m.nodes, m.depth = maxInt(m.nodes, s.Nodes), maxInt(m.depth, s.MaxDepth)
		root.Walk(func(n *OTPNode) {
			if n.Kind == OTPPredicate || (n.Kind == OTPOperator && n.Pred != nil) {
				if n.PredErr != nil {
					t.Errorf("%s: predicate %q: %v", name, n.Text, n.PredErr)
				}
				sentences[strings.Join(n.Pred.Tokens(), " ")] = struct{}{}
				if n.Kind == OTPPredicate {
					predSentences[strings.Join(n.Pred.Tokens(), " ")] = struct{}{}
				}
			}
		})
	}
	sort.Strings(keys)
	fmt.Fprintf(&b, "\n# workload-scale\tmax-otp-nodes\tmax-depth\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s\t%d\t%d\n", k, maxima[k].nodes, maxima[k].depth)
		t.Logf("%s: max (nodes, depth) = (%d, %d)", k, maxima[k].nodes, maxima[k].depth)
	}
	fmt.Fprintf(&b, "\n# distinct predicate token sentences: PRED nodes\t%d\n", len(predSentences))
	fmt.Fprintf(&b, "# distinct predicate token sentences: PRED nodes and join criteria\t%d\n", len(sentences))
	t.Logf("distinct predicate token sentences: %d PRED, %d with join criteria", len(predSentences), len(sentences))
	checkGolden(t, filepath.Join("testdata", "stats.golden"), []byte(b.String()))
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}
