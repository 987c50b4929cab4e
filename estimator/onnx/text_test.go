package onnx

import (
	"context"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/estimator/tablestats"
	"github.com/prestroid/prestroid/models"
	"github.com/prestroid/prestroid/training"
)

// copyDefault copies the embedded default bundle (which has a text stage)
// into a temporary directory.
func copyDefault(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	err := fs.WalkDir(models.Default(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(models.Default(), p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, p), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestDefaultBundleTextStage(t *testing.T) {
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	defer m.Close()
	if !m.HasText() {
		t.Fatal("the default bundle has no text stage")
	}
	ctx := featurize.TextContext{Catalog: "tpch", Schema: "tiny"}
	qs, secs, ok, err := m.TextQuantiles("SELECT count(*) FROM lineitem WHERE quantity < 24", ctx)
	if err != nil || !ok {
		t.Fatalf("TextQuantiles: ok=%v err=%v", ok, err)
	}
	if len(qs) != 3 || qs[0] != 0.1 || qs[1] != 0.5 || qs[2] != 0.9 {
		t.Fatalf("quantiles %v, want [0.1 0.5 0.9]", qs)
	}
	if !(secs[0] > 0 && secs[0] <= secs[1] && secs[1] <= secs[2]) {
		t.Fatalf("CPU seconds %v: want 0 < q10 ≤ q50 ≤ q90", secs)
	}
	// The scale is part of the context: the same statement on sf1 must be
	// predicted dearer than on tiny (a model that ignored the schema would
	// route a 1000× larger scan like a tiny one).
	_, big, _, err := m.TextQuantiles("SELECT count(*) FROM lineitem WHERE quantity < 24", featurize.TextContext{Catalog: "tpch", Schema: "sf1"})
	if err != nil {
		t.Fatal(err)
	}
	if !(big[1] > secs[1]) {
		t.Errorf("q50 on sf1 %.3g s, on tiny %.3g s: want sf1 dearer", big[1], secs[1])
	}
	// Garbage in is still a number, never a panic or an error.
	for _, sql := range []string{"", "'unterminated", strings.Repeat("(", 10000), "\xff\xfe"} {
		if _, s, _, err := m.TextQuantiles(sql, featurize.TextContext{}); err != nil || !(s[0] > 0) {
			t.Errorf("%.20q: %v, %v", sql, s, err)
		}
	}
}

func TestRefusedTextStages(t *testing.T) {
	rt := runtime(t)
	for _, c := range []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
	}{
		{"a missing text model", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, bundle.TextFile)) },
			[]string{"text.onnx", "missing"}},
		{"another featurizer", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["text"].(map[string]any)["featurizer"] = "hashed-tokens-v0" })
		}, []string{"manifest.json", "hashed-tokens-v0"}},
		{"a dimension the model does not take", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["text"].(map[string]any)["dim"] = 1024 })
		}, []string{"text.onnx", "shape (-1, 1024)"}},
		{"crossing quantiles", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["text"].(map[string]any)["quantiles"] = []float64{0.5, 0.1, 0.9} })
		}, []string{"manifest.json", "increasing"}},
		{"a golden case the model disagrees with", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				g := m["text"].(map[string]any)["golden"].([]any)[2].(map[string]any)
				g["expected"].([]any)[1] = g["expected"].([]any)[1].(float64) + 0.01
			})
		}, []string{"text.onnx", "golden case 2"}},
		{"a golden statement encoded otherwise", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				g := m["text"].(map[string]any)["golden"].([]any)[0].(map[string]any)
				g["sql"] = g["sql"].(string) + " AND 1 = 1"
			})
		}, []string{"text.onnx", "golden case 0"}},
		{"a corrupted text model", func(t *testing.T, dir string) {
			p := filepath.Join(dir, bundle.TextFile)
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/3], 0o644)
		}, []string{"text.onnx"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := copyDefault(t)
			c.break_(t, dir)
			m, err := bundle.LoadDir(rt, bundle.ModelOptions{})(dir)
			if err == nil {
				m.Close()
				t.Fatal("the bundle was accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// BenchmarkTextStage is the text stage's whole cost per statement: encode
// and one ONNX Runtime call (a batch of one, as on the hot path).
func BenchmarkTextStage(b *testing.B) {
	rt := runtime(b)
	m := loadFixture(b, rt, copyDefault(b))
	defer m.Close()
	sql := `SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, avg(l_discount) AS avg_disc, count(*) AS count_order
FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY GROUP BY l_returnflag, l_linestatus ORDER BY 1, 2`
	ctx := featurize.TextContext{Catalog: "tpch", Schema: "sf1"}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := m.TextQuantiles(sql, ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTextDecision is a statement's whole hot path under
// estimator.explain: when-uncertain when the text stage decides: history
// keys, the statement's and shape's history, the text model, its learned
// offset and the class check (a TPC-DS query of 2 KB; the background
// EXPLAIN is refused by an unreachable planner, off the timed path).
func BenchmarkTextDecision(b *testing.B) {
	rt := runtime(b)
	m := loadFixture(b, rt, copyDefault(b))
	sql, err := os.ReadFile(filepath.Join("..", "..", "..", "shared", "workloads", "tpcds", "q03.sql"))
	if err != nil {
		b.Skip(err)
	}
	co := estimator.CascadeOptions{Explain: estimator.ExplainWhenUncertain, ClassBounds: []float64{100, 0}, ClassQuantile: 0.9,
		ModelSigma: 1, MaxSpread: 0.5, Shrink: 1, MinCount: 2}
	h := http.Header{"X-Trino-User": {"bench"}, "X-Trino-Catalog": {"tpcds"}, "X-Trino-Schema": {"tiny"}}
	// The tables' sizes as Trino gave them (data/table-stats.json), in the
	// serving cache, for a text model that reads them.
	ts := tablestats.New(tablestats.Options{})
	if f, err := training.ReadTableStats(filepath.Join("..", "..", "data", "table-stats.json")); err == nil {
		names, _ := plan.Tables(string(sql), "tpcds", "tiny")
		for _, n := range names {
			ts.Seed(n, h, f.Tables[n.String()])
		}
	}
	svc := estimator.NewService(m, estimator.ServiceOptions{Explain: &plan.ExplainClient{}, ExplainTimeout: time.Millisecond,
		History: history.NewMemory(1000), Cascade: co, TableStats: ts})
	defer svc.Close()
	planners := []string{"http://127.0.0.1:1"}
	b.ReportAllocs()
	for b.Loop() {
		e, err := svc.EstimateOn(context.Background(), planners, string(sql), h)
		if err != nil || e.Source != estimate.SourceText {
			b.Fatalf("%v %+v", err, e)
		}
	}
}
