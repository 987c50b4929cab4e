package featurize

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/internal/prestotest"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The plans of a real PrestoDB (estimator/testdata/explain-presto) go
// through the same decoder and O-T-P conversion as Trino's, with their own
// golden files. go test ./estimator/featurize -run Presto -update refreshes
// the plans from PRESTROID_PRESTO_URL (when set) and rewrites the goldens.

var prestoScales = []string{"tiny", "sf1"}

func explainPresto(t *testing.T, server string, q prestotest.Query) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := (&plan.ExplainClient{}).ExplainOn(ctx, server, dialect.Presto, q.SQL, prestotest.UserHeader("prestroid-capture"))
	if err != nil {
		t.Fatalf("%s: %v", q.Name, err)
	}
	return append(bytes.TrimRight(res.PlanJSON, "\n"), '\n')
}

// TestCapturePrestoPlans refreshes testdata/explain-presto from the live
// PrestoDB; only with -update.
func TestCapturePrestoPlans(t *testing.T) {
	if !*update {
		t.Skip("run with -update to refresh the captured PrestoDB plans")
	}
	server := prestotest.URL(t)
	for _, scale := range prestoScales {
		for _, q := range prestotest.Queries(t, scale) {
			b := explainPresto(t, server, q)
			if err := os.WriteFile(filepath.Join(prestotest.ExplainDir, q.Name+"-"+scale+".json"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func prestoPlanFiles(t testing.TB) []string {
	files, _ := filepath.Glob(filepath.Join(prestotest.ExplainDir, "*.json"))
	if len(files) < 40 {
		t.Fatalf("want the captured PrestoDB plans in %s, found %d", prestotest.ExplainDir, len(files))
	}
	sort.Strings(files)
	return files
}

// TestGoldenOTPPresto checks the O-T-P rendering and the sub-trees of
// every captured PrestoDB plan, that a lean parse builds the same tree,
// and that every predicate parses.
func TestGoldenOTPPresto(t *testing.T) {
	for _, f := range prestoPlanFiles(t) {
		base := strings.TrimSuffix(f, ".json")
		t.Run(filepath.Base(base), func(t *testing.T) {
			_, root := loadOTP(t, f)
			if err := checkOTPShape(root); err != nil {
				t.Fatal(err)
			}
			rendered := RenderOTP(root)
			checkGolden(t, base+".otp.golden", []byte(rendered))
			sts, err := SampleSubTrees(root, SamplerConfig{N: 15, K: 9, C: 3})
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, base+".subtrees.golden", []byte(RenderSubTrees(sts)))

			b, _ := os.ReadFile(f)
			lp, err := plan.ParseLimits(b, plan.Limits{Lean: true})
			if err != nil {
				t.Fatal(err)
			}
			lroot, err := BuildOTP(lp)
			if err != nil {
				t.Fatal(err)
			}
			if got := RenderOTP(lroot); got != rendered {
				t.Errorf("a lean parse builds another tree:\n%s", got)
			}
			root.Walk(func(n *OTPNode) {
				if n.PredErr != nil {
					t.Errorf("predicate %q: %v", n.Text, n.PredErr)
				}
				if n.Kind == OTPTable && strings.ContainsAny(n.Value, "{}' ") {
					t.Errorf("table %q is not catalog.schema.table", n.Value)
				}
			})
		})
	}
}

// TestPrestoPlansMatchLive EXPLAINs every captured query on the live
// PrestoDB and compares its O-T-P tree with the golden file's: the goldens
// still say what the server plans. Skips without PRESTROID_PRESTO_URL.
func TestPrestoPlansMatchLive(t *testing.T) {
	server := prestotest.URL(t)
	if *update {
		t.Skip("-update captures instead")
	}
	for _, scale := range prestoScales {
		for _, q := range prestotest.Queries(t, scale) {
			t.Run(q.Name+"-"+scale, func(t *testing.T) {
				p, err := plan.Parse(explainPresto(t, server, q))
				if err != nil {
					t.Fatal(err)
				}
				root, err := BuildOTP(p)
				if err != nil {
					t.Fatal(err)
				}
				want, err := os.ReadFile(filepath.Join(prestotest.ExplainDir, q.Name+"-"+scale+".otp.golden"))
				if err != nil {
					t.Fatal(err)
				}
				if got := RenderOTP(root); got != string(want) {
					t.Errorf("the live plan's O-T-P tree differs from the golden:\n%s", got)
				}
			})
		}
	}
}
