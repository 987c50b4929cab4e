package bundle

import (
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/models"
)

// defaultFS is the embedded default bundle with its manifest passed
// through edit (nil: as shipped).
func defaultFS(t *testing.T, edit func(m map[string]any)) fs.FS {
	t.Helper()
	out := fstest.MapFS{}
	err := fs.WalkDir(models.Default(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(models.Default(), p)
		out[p] = &fstest.MapFile{Data: b}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(out[ManifestFile].Data, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		out[ManifestFile].Data, _ = json.Marshal(m)
	}
	return out
}

// targetOf is the estimate.Target of a manifest label.
func targetOf(label string) estimate.Target {
	t, _ := estimate.ParseTarget(label)
	return t
}

func TestManifestTargets(t *testing.T) {
	t.Run("the default bundle has peak memory and elapsed time with their golden arrays", func(t *testing.T) {
		b, err := ReadFS(defaultFS(t, nil), "default")
		if err != nil {
			t.Fatal(err)
		}
		for _, label := range []string{"peak_memory", "elapsed"} {
			tg := b.Manifest.Targets[label]
			if tg == nil || tg.Output == "" || !(tg.Sigma > 0) || len(b.Golden.Targets[label]) != b.Golden.B {
				t.Errorf("%s: %+v, golden %v", label, tg, b.Golden.Targets[label])
			}
			if tb := b.Manifest.TextBlend(targetOf(label)); tb == nil || !(tb.Weight > 0 && tb.Weight < 1) || !(tb.Sigma > 0) {
				t.Errorf("%s: text blend %+v, want a weight in (0, 1) and a spread", label, tb)
			}
		}
	})
	t.Run("a bundle without targets reads as CPU only", func(t *testing.T) {
		b, err := ReadFS(defaultFS(t, func(m map[string]any) { delete(m, "targets") }), "old")
		if err != nil {
			t.Fatal(err)
		}
		if b.Manifest.Targets != nil || b.Golden.Targets != nil {
			t.Errorf("targets %v, golden %v: want none", b.Manifest.Targets, b.Golden.Targets)
		}
	})
	t.Run("a value de-normalizes within the transform's range", func(t *testing.T) {
		tg := TargetOutput{Transform: "ln_bytes_minmax_open", Min: 0, Max: 10}
		for _, c := range []struct {
			y    float32
			want float64
		}{{0.5, math.Exp(5)}, {-3, math.Exp(-5)}, {9, math.Exp(15)}, {float32(math.NaN()), math.Exp(-5)}} {
			if got := tg.Value(c.y); math.Abs(got/c.want-1) > 1e-9 {
				t.Errorf("Value(%v) = %v, want %v", c.y, got, c.want)
			}
		}
	})
	target := func(m map[string]any, label string) map[string]any {
		return m["targets"].(map[string]any)[label].(map[string]any)
	}
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"an unknown label", func(m map[string]any) { m["targets"].(map[string]any)["wall"] = target(m, "elapsed") }, `targets: "wall" is not a target beyond CPU`},
		{"a transform of the other unit", func(m map[string]any) { target(m, "elapsed")["transform"] = "ln_bytes_minmax_open" }, `targets.elapsed.transform "ln_bytes_minmax_open"`},
		{"two targets on one output", func(m map[string]any) { target(m, "elapsed")["output"] = target(m, "peak_memory")["output"] }, "is also the output of"},
		{"an empty output", func(m map[string]any) { target(m, "peak_memory")["output"] = "" }, "targets.peak_memory.output is empty"},
		{"an infinite sigma", func(m map[string]any) { target(m, "peak_memory")["sigma"] = 1e9 }, "targets.peak_memory.sigma"},
		{"no golden array named", func(m map[string]any) { delete(target(m, "elapsed"), "golden") }, "targets.elapsed.golden is empty"},
		{"a golden array that is not there", func(m map[string]any) { target(m, "elapsed")["golden"] = "expected_wall" }, `"expected_wall" missing`},
		{"a text weight above 1", func(m map[string]any) {
			target(m, "elapsed")["text_blend"] = map[string]any{"weight": 1.5, "sigma": 0.5}
		}, "targets.elapsed.text_blend.weight 1.5"},
		{"a text blend without a spread", func(m map[string]any) { target(m, "elapsed")["text_blend"] = map[string]any{"weight": 0.5} }, "targets.elapsed.text_blend.sigma 0"},
		{"a text blend without the text stage's target", func(m map[string]any) {
			target(m, "peak_memory")["text_blend"] = map[string]any{"weight": 0.5, "sigma": 0.5}
			m["text"].(map[string]any)["targets"] = map[string]any{"elapsed": m["text"].(map[string]any)["targets"].(map[string]any)["elapsed"]}
		}, "targets.peak_memory.text_blend: the text stage has no peak_memory output"},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			_, err := ReadFS(defaultFS(t, c.edit), "broken")
			if !errors.Is(err, ErrBundle) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want a bundle error containing %q", err, c.want)
			}
		})
	}
}
