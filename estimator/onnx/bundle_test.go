package onnx

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/estimator/plan"
)

// copyFixture copies the fixture bundle into a temporary directory.
func copyFixture(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range bundle.Files {
		b, err := os.ReadFile(filepath.Join(fixtureDir, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func loadFixture(t testing.TB, rt bundle.Runtime, dir string) *bundle.Model {
	t.Helper()
	m, err := bundle.LoadDir(rt, bundle.ModelOptions{})(dir)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// editManifest rewrites manifest.json in dir through f.
func editManifest(t testing.TB, dir string, f func(m map[string]any)) {
	t.Helper()
	p := filepath.Join(dir, bundle.ManifestFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	b, _ = json.Marshal(m)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// editGolden rewrites golden.npz in dir through f.
func editGolden(t testing.TB, dir string, f func(arrs map[string]*npy.Array)) {
	t.Helper()
	p := filepath.Join(dir, bundle.GoldenFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	arrs, err := npy.ReadNPZ(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	f(arrs)
	var out bytes.Buffer
	z := npy.NewNPZWriter(&out)
	for name, a := range arrs {
		if err := z.Add(name, a.Shape, a.Data); err != nil {
			t.Fatal(err)
		}
	}
	z.Close()
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGoFeaturizationMatchesGoldenInputs(t *testing.T) {
	rt := runtime(t)
	m := loadFixture(t, rt, fixtureDir)
	defer m.Close()
	b, err := bundle.Read(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	g := b.Golden
	per := g.K * g.S
	var batch []*featurize.Features
	for i, name := range g.Names {
		js, err := os.ReadFile(filepath.Join("..", "testdata", "explain", name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		f, err := m.Featurize(js)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		o := i * per
		if !reflect.DeepEqual(f.Op, g.Op[o:o+per]) || !reflect.DeepEqual(f.Table, g.Table[o:o+per]) ||
			!reflect.DeepEqual(f.Left, g.Left[o:o+per]) || !reflect.DeepEqual(f.Right, g.Right[o:o+per]) ||
			!reflect.DeepEqual(f.Vote, g.Vote[o:o+per]) || !reflect.DeepEqual(f.Pred, g.Pred[o*g.Pf:(o+per)*g.Pf]) {
			t.Errorf("%s: Go featurization differs from the golden inputs", name)
		}
		batch = append(batch, f)
	}
	y, err := m.Predict(batch)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range g.Expected {
		if d := math.Abs(float64(y[i] - want)); d > bundle.GoldenTolerance {
			t.Errorf("%s: predicted %v, golden %v", g.Names[i], y[i], want)
		}
	}
}

func TestRefusedBundles(t *testing.T) {
	rt := runtime(t)
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string // substrings of the error
	}{
		{"a missing manifest", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "manifest.json")) }, []string{"manifest.json", "missing"}},
		{"a missing model", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "model.onnx")) }, []string{"model.onnx", "missing"}},
		{"missing golden cases", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "golden.npz")) }, []string{"golden.npz", "missing"}},
		{"missing token vectors", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "tokens.vec")) }, []string{"tokens.vec", "missing"}},
		{"a malformed manifest", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"format_version": 1,`), 0o644)
		}, []string{"manifest.json", "malformed JSON"}},
		{"an unknown format version", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["format_version"] = 3 })
		}, []string{"manifest.json", "format_version 3"}},
		{"tree features in a version-1 manifest", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["tree_features"] = []string{"dynamic_filters"} })
		}, []string{"manifest.json", "need format_version 2"}},
		{"an unknown tree feature", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["format_version"] = 2
				m["tree_features"] = []string{"dynamic_filters", "bloom_filters"}
			})
		}, []string{"manifest.json", `unknown O-T-P tree feature "bloom_filters"`}},
		{"an unknown target transform", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["target"].(map[string]any)["transform"] = "cpu_seconds" })
		}, []string{"target.transform \"cpu_seconds\""}},
		{"a global vector of the wrong size", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["global_pred_vector"] = []float64{1, 2} })
		}, []string{"global_pred_vector has 2 values"}},
		{"Pf disagreeing with tokens.vec", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["Pf"] = 8
				m["global_pred_vector"] = make([]float64, 8)
			})
		}, []string{"tokens.vec", "16 dimensions", "Pf=8"}},
		{"K disagreeing with the golden cases", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["K"] = 10 })
		}, []string{"golden.npz", "shape"}},
		{"a vocabulary without reserved ids", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "ops.json"), []byte(`["Aggregate", "Filter"]`), 0o644)
		}, []string{"ops.json", "<none>"}},
		{"truncated token vectors", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "tokens.vec")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, []string{"tokens.vec"}},
		{"a truncated model", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.onnx")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)/2], 0o644)
		}, []string{"model.onnx"}},
		{"a corrupted model", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "model.onnx")
			b, _ := os.ReadFile(p)
			for i := 100; i < len(b); i += 97 {
				b[i] ^= 0x5a
			}
			os.WriteFile(p, b, 0o644)
		}, []string{"model.onnx"}},
		{"truncated golden cases", func(t *testing.T, dir string) {
			p := filepath.Join(dir, "golden.npz")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, b[:len(b)-200], 0o644)
		}, []string{"golden.npz"}},
		{"a golden case the model disagrees with", func(t *testing.T, dir string) {
			editGolden(t, dir, func(arrs map[string]*npy.Array) {
				arrs["expected"].Data.([]float32)[3] += 0.001
			})
		}, []string{"golden.npz", `golden case 3 "tpcds-q01-sf1"`}},
		{"golden inputs that do not give the expected prediction", func(t *testing.T, dir string) {
			editGolden(t, dir, func(arrs map[string]*npy.Array) {
				arrs["vote"].Data.([]float32)[9*16*5+1] = 0 // root of case 5's first sub-tree
			})
		}, []string{`golden case 5 "tpcds-q18-sf1"`}},
		{"model inputs the manifest does not name", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["inputs"] = []string{"op", "table", "left", "right", "vote", "predicate"}
			})
		}, []string{"manifest.json", `lack "pred"`}},
		{"estimate inputs on a format-1 manifest", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["inputs"] = []string{"op", "table", "left", "right", "vote", "pred", "est", "plan"}
			})
		}, []string{"manifest.json", "need tensor_format_version ≥ 2"}},
		{"one estimate input without the other", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["tensor_format_version"] = 2
				m["inputs"] = []string{"op", "table", "left", "right", "vote", "pred", "est"}
			})
		}, []string{"manifest.json", "optionally with"}},
		{"estimate inputs without estimate golden arrays", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["tensor_format_version"] = 2
				m["inputs"] = []string{"op", "table", "left", "right", "vote", "pred", "est", "plan"}
			})
			editGolden(t, dir, func(arrs map[string]*npy.Array) { delete(arrs, "est"); delete(arrs, "plan") })
		}, []string{"golden.npz", `array "est" missing`}},
		{"estimate inputs the model does not take", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) {
				m["tensor_format_version"] = 2
				m["inputs"] = []string{"op", "table", "left", "right", "vote", "pred", "est", "plan"}
			})
			editGolden(t, dir, func(arrs map[string]*npy.Array) {
				g := arrs["expected"].Shape[0]
				arrs["est"] = &npy.Array{Descr: "<f4", Shape: []int{g, 9, 16, featurize.EstDim}, Data: make([]float32, g*9*16*featurize.EstDim)}
				arrs["plan"] = &npy.Array{Descr: "<f4", Shape: []int{g, featurize.PlanDim}, Data: make([]float32, g*featurize.PlanDim)}
			})
		}, []string{"model.onnx", "declares inputs"}},
		{"a newer tensor format", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["tensor_format_version"] = 3 })
		}, []string{"manifest.json", "tensor_format_version 3"}},
		{"a missing output", func(t *testing.T, dir string) {
			editManifest(t, dir, func(m map[string]any) { m["output"] = "cost" })
		}, []string{"model.onnx"}},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			dir := copyFixture(t)
			c.break_(t, dir)
			_, err := bundle.LoadDir(rt, bundle.ModelOptions{})(dir)
			if err == nil {
				t.Fatal("bundle accepted")
			}
			if !errors.Is(err, bundle.ErrBundle) {
				t.Errorf("error does not wrap ErrBundle: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.Contains(err.Error(), dir) {
				t.Errorf("error %q does not name the bundle %s", err, dir)
			}
		})
	}
}

// TestBundleTreeFeaturesReachTheServingTree: a version-2 bundle naming
// dynamic_filters serves trees with the dynamic filter clauses (the
// store_sales scan of tpcds q03 waits for one, its own predicate is empty:
// a PRED slot instead of ∅), and the same bundle without the field
// serves BuildOTP's.
func TestBundleTreeFeaturesReachTheServingTree(t *testing.T) {
	rt := runtime(t)
	plainDir, dfDir := copyFixture(t), copyFixture(t)
	editManifest(t, dfDir, func(m map[string]any) {
		m["format_version"] = 2
		m["tree_features"] = []string{featurize.TreeFeatureDynamicFilters}
	})
	planJSON, err := os.ReadFile(filepath.Join("..", "testdata", "explain", "tpcds-q03-sf1.json"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(planJSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		tree featurize.TreeOptions
	}{{plainDir, featurize.TreeOptions{}}, {dfDir, featurize.TreeOptions{DynamicFilters: true}}} {
		m := loadFixture(t, rt, c.dir)
		got, err := m.Featurize(planJSON)
		if err != nil {
			t.Fatal(err)
		}
		root, err := featurize.BuildOTPWith(p, c.tree)
		if err != nil {
			t.Fatal(err)
		}
		want, err := m.Encode(root)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Kind, want.Kind) || !slices.Equal(got.Pred, want.Pred) {
			t.Errorf("%+v: the served features are not those of the tree with the bundle's readings", c.tree)
		}
		other, err := featurize.BuildOTPWith(p, featurize.TreeOptions{DynamicFilters: !c.tree.DynamicFilters})
		if err != nil {
			t.Fatal(err)
		}
		if o, _ := m.Encode(other); slices.Equal(got.Kind, o.Kind) && slices.Equal(got.Pred, o.Pred) {
			t.Errorf("%+v: the two readings encode alike; the test shows nothing", c.tree)
		}
		m.Close()
	}
}

func TestRefusedReloadKeepsServing(t *testing.T) {
	rt := runtime(t)
	dir := copyFixture(t)
	svc := estimator.NewService(loadFixture(t, rt, dir), estimator.ServiceOptions{})
	defer svc.Close()
	plan, _ := os.ReadFile(filepath.Join("..", "testdata", "explain", "tpch-q03-sf1.json"))
	before, err := svc.EstimatePlan(context.Background(), plan)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() {
		svc.WatchBundle(ctx, dir, bundle.LoadDir(rt, bundle.ModelOptions{}), 20*time.Millisecond, hup)
		close(done)
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if cond() {
				return
			}
		}
		t.Fatalf("timed out waiting for %s", what)
	}

	// A corrupted model file: noticed by polling, refused, old model serves.
	p := filepath.Join(dir, "model.onnx")
	good, _ := os.ReadFile(p)
	os.WriteFile(p, good[:len(good)/3], 0o644)
	time.Sleep(200 * time.Millisecond)
	hup <- syscall.SIGHUP
	time.Sleep(100 * time.Millisecond)
	after, err := svc.EstimatePlan(context.Background(), plan)
	if err != nil {
		t.Fatalf("estimate after a refused reload: %v", err)
	}
	if after.Model != before.Model || after.Normalized != before.Normalized {
		t.Fatalf("after a refused reload: %+v, before %+v", after, before)
	}

	// A good bundle with a new id: picked up from the file change.
	os.WriteFile(p, good, 0o644)
	editManifest(t, dir, func(m map[string]any) { m["model_id"] = "fixture-reloaded" })
	waitFor("the new model", func() bool { return svc.Model().ID() == "fixture-reloaded" })
	e, err := svc.EstimatePlan(context.Background(), plan)
	if err != nil || e.Model != "fixture-reloaded" || e.Normalized != before.Normalized {
		t.Fatalf("after reload: %+v, %v", e, err)
	}
	cancel()
	<-done
}

// TestConcurrentEstimatesWhileReloading runs estimates from many
// goroutines while the model is swapped (run with -race).
func TestConcurrentEstimatesWhileReloading(t *testing.T) {
	rt := runtime(t)
	svc := estimator.NewService(loadFixture(t, rt, fixtureDir), estimator.ServiceOptions{MaxBatch: 8, MaxWait: time.Millisecond})
	defer svc.Close()
	var plans [][]byte
	var want []float32
	for _, n := range []string{"tpch-q03-sf1", "tpcds-q01-sf1", "tpch-q19-tiny", "tpcds-q03-tiny"} {
		js, _ := os.ReadFile(filepath.Join("..", "testdata", "explain", n+".json"))
		e, err := svc.EstimatePlan(context.Background(), js)
		if err != nil {
			t.Fatal(err)
		}
		plans, want = append(plans, js), append(want, e.Normalized)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				k := (g + i) % len(plans)
				e, err := svc.EstimatePlan(context.Background(), plans[k])
				if err != nil {
					errc <- err
					return
				}
				if math.Abs(float64(e.Normalized-want[k])) > 1e-6 {
					errc <- fmt.Errorf("plan %d: %v, want %v", k, e.Normalized, want[k])
					return
				}
			}
		}(g)
	}
	for i := 0; i < 3; i++ {
		if err := svc.Reload(func() (*bundle.Model, error) {
			return bundle.LoadDir(rt, bundle.ModelOptions{})(fixtureDir)
		}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
}

func TestEstimatesAfterCloseFail(t *testing.T) {
	rt := runtime(t)
	svc := estimator.NewService(loadFixture(t, rt, fixtureDir), estimator.ServiceOptions{})
	plan, _ := os.ReadFile(filepath.Join("..", "testdata", "explain", "tpch-q03-sf1.json"))
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := svc.EstimatePlan(context.Background(), plan); err != nil {
					return // closed: an error, never a hang
				}
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	svc.Close()
	wg.Wait()
	if _, err := svc.EstimatePlan(context.Background(), plan); err == nil {
		t.Error("estimate after Close succeeded")
	}
}
