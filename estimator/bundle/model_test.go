package bundle

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/internal/dialect"
)

const fixtureBundle = trinotest.Testdata + "/bundle-fixture"

// fakeRuntime declares the given inputs and answers every Run with 0.5.
type fakeRuntime struct{ inputs []TensorInfo }

type fakeSession struct{ inputs []TensorInfo }

func (f fakeRuntime) NewSession([]byte, []string, []string) (Session, error) {
	return fakeSession{f.inputs}, nil
}
func (f fakeSession) Inputs() []TensorInfo { return f.inputs }
func (f fakeSession) Outputs() []TensorInfo {
	return []TensorInfo{{Name: "y", DType: "float32", Shape: []int64{-1, 1}}}
}
func (f fakeSession) Run(in []Tensor) ([]Output, error) {
	b := in[0].Shape[0]
	out := make([]float32, b)
	for i := range out {
		out[i] = 0.5
	}
	return []Output{{Data: out, Shape: []int64{b, 1}}}, nil
}
func (f fakeSession) Close() error { return nil }

func fixtureInputs() []TensorInfo {
	sh := []int64{-1, 9, 16}
	return []TensorInfo{
		{"op", "int32", sh}, {"table", "int32", sh}, {"left", "int32", sh}, {"right", "int32", sh},
		{"vote", "float32", sh}, {"pred", "float32", []int64{-1, 9, 16, 16}},
	}
}

func TestModelInputsChecked(t *testing.T) {
	b, err := Read(fixtureBundle)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		edit func(in []TensorInfo) []TensorInfo
		want string
	}{
		{"a wrong dtype", func(in []TensorInfo) []TensorInfo { in[0].DType = "int64"; return in }, `"op" is int64, want int32`},
		{"a wrong fixed dimension", func(in []TensorInfo) []TensorInfo { in[5].Shape = []int64{-1, 9, 16, 8}; return in }, `"pred" has shape`},
		{"a fixed batch axis", func(in []TensorInfo) []TensorInfo { in[4].Shape = []int64{1, 9, 16}; return in }, `"vote" has shape`},
		{"an extra input", func(in []TensorInfo) []TensorInfo { return append(in, TensorInfo{"kind", "int8", nil}) }, "declares inputs"},
		{"an unknown input", func(in []TensorInfo) []TensorInfo { in[1].Name = "tbl"; return in }, `"tbl" is not one of`},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			_, err := LoadModel(b, fakeRuntime{c.edit(fixtureInputs())}, ModelOptions{})
			if !errors.Is(err, ErrBundle) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "model.onnx") {
				t.Fatalf("err = %v, want a bundle error on model.onnx mentioning %s", err, c.want)
			}
		})
	}
	t.Run("dynamic dimensions are accepted, the golden cases then decide", func(t *testing.T) {
		in := fixtureInputs()
		in[5].Shape = []int64{-1, -1, -1, -1}
		var ge *GoldenError
		if _, err := LoadModel(b, fakeRuntime{in}, ModelOptions{}); !errors.As(err, &ge) || !strings.Contains(err.Error(), "golden.npz") {
			t.Fatalf("err = %v, want a golden case error", err)
		}
		if ge.Index != 0 || ge.Case != "tpch-q03-sf1" {
			t.Errorf("first failing case = %d %q", ge.Index, ge.Case)
		}
	})
}

func TestTargetDenormalization(t *testing.T) {
	tg := Target{Transform: "ln_cpu_seconds_minmax", Min: -4.6, Max: 7.3}
	for _, c := range []struct {
		y    float32
		want float64
	}{{0, 0.010051835744633586}, {1, 1480.2998836739}, {-0.5, 0.010051835744633586}, {2, 1480.2998836739}} {
		if got := tg.CPUSeconds(c.y); fmt.Sprintf("%.6g", got) != fmt.Sprintf("%.6g", c.want) {
			t.Errorf("CPUSeconds(%v) = %v, want %v", c.y, got, c.want)
		}
	}
	// a cost-anchored model extrapolates: up to half the training range
	// beyond either end (ln: -4.6 - 5.95 and 7.3 + 5.95)
	open := Target{Transform: "ln_cpu_seconds_minmax_open", Min: -4.6, Max: 7.3}
	for _, c := range []struct {
		y    float32
		want float64
	}{{1, 1480.2998836739}, {1.2, math.Exp(-4.6 + 1.2*11.9)}, {2, math.Exp(7.3 + 5.95)}, {-1, math.Exp(-4.6 - 5.95)},
		{float32(math.NaN()), math.Exp(-4.6 - 5.95)}} {
		if got := open.CPUSeconds(c.y); math.Abs(got/c.want-1) > 1e-5 {
			t.Errorf("open: CPUSeconds(%v) = %v, want %v", c.y, got, c.want)
		}
	}
}

// oovPlan is a one-fragment plan with an operator, a table and predicate
// tokens that the fixture bundle has never seen.
const oovPlan = `{"0": {"id": "1", "name": "Output", "descriptor": {}, "children": [
 {"id": "2", "name": "FancyNewOperator", "descriptor": {"filterPredicate": "(\"zzz_unknown\" IS NULL)"}, "children": [
  {"id": "3", "name": "ScanFilter", "descriptor": {"table": "hive:web:clicks", "filterPredicate": %s}, "children": []}]}]}}`

func TestOutOfVocabularyFallbacks(t *testing.T) {
	b, err := Read(fixtureBundle)
	if err != nil {
		t.Fatal(err)
	}
	enc := &featurize.Encoder{Ops: b.Ops, Tables: b.Tables, Vectors: b.Vectors, Dim: b.Manifest.Pf,
		Sampler: featurize.SamplerConfig{N: b.Manifest.N, K: b.Manifest.K, C: b.Manifest.C}}
	predOf := func(f *featurize.Features, want int) [][]float32 {
		var out [][]float32
		for s, k := range f.Kind {
			if k == featurize.SlotPRED {
				out = append(out, f.Pred[s*f.Dim:(s+1)*f.Dim])
			}
		}
		if len(out) != want {
			t.Fatalf("%d PRED slots, want %d", len(out), want)
		}
		return out
	}
	cases := []struct {
		name, scanPred string
		want           func(preds [][]float32) []float32 // vector of the IS NULL predicate
	}{
		{"an unknown predicate takes the mean of the query's known predicates", `"(\"shipdate\" = DATE '1995-01-01')"`,
			func(preds [][]float32) []float32 { return meanVec(b.Vectors.Tokens["shipdate"], b.Vectors.Tokens["="]) }},
		{"with no known predicate, the mean of the query's known tokens", `"(\"zzz_other\" = 1)"`,
			func([][]float32) []float32 { return b.Vectors.Tokens["="] }},
		{"with no known token, the bundle's global vector", `"(\"zzz_other\" IS NULL)"`,
			func([][]float32) []float32 { return b.Manifest.GlobalPredVector }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := enc.Featurize([]byte(fmt.Sprintf(oovPlan, c.scanPred)))
			if err != nil {
				t.Fatal(err)
			}
			unknownOp, unknownTable := false, false
			for s, k := range f.Kind {
				unknownOp = unknownOp || k == featurize.SlotOPR && f.Op[s] == featurize.IDUnknown
				unknownTable = unknownTable || k == featurize.SlotTBL && f.Table[s] == featurize.IDUnknown
			}
			if !unknownOp || !unknownTable {
				t.Errorf("unknown operator id 1: %v, unknown table id 1: %v", unknownOp, unknownTable)
			}
			preds := predOf(f, 2)
			want := c.want(preds)
			found := false
			for _, p := range preds {
				found = found || approxEqual(p, want)
			}
			if !found {
				t.Errorf("no PRED slot holds the fallback %v; slots: %v", want, preds)
			}
		})
	}
}

func meanVec(vs ...[]float32) []float32 {
	out := make([]float32, len(vs[0]))
	for _, v := range vs {
		for i := range out {
			out[i] += v[i] / float32(len(vs))
		}
	}
	return out
}

func approxEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if d := a[i] - b[i]; d > 1e-5 || d < -1e-5 {
			return false
		}
	}
	return true
}

func TestReadBundleFixture(t *testing.T) {
	b, err := Read(fixtureBundle)
	if err != nil {
		t.Fatal(err)
	}
	if b.Golden.B != 8 || !reflect.DeepEqual(b.Manifest.Inputs, ModelInputs) || !b.Manifest.Untrained() {
		t.Errorf("fixture: %d cases, inputs %v, untrained %v", b.Golden.B, b.Manifest.Inputs, b.Manifest.Untrained())
	}
	if _, err := Read(filepath.Join(fixtureBundle, "nope")); !errors.Is(err, ErrBundle) {
		t.Errorf("missing directory: %v", err)
	}
}

func TestManifestTrainedOn(t *testing.T) {
	var old Manifest // every bundle before training.engines: Trino's plans only
	if !old.TrainedOn(dialect.Trino) || !old.TrainedOn(dialect.Unknown) || old.TrainedOn(dialect.Presto) {
		t.Error("a manifest without engines: want Trino (and Unknown) only")
	}
	var both Manifest
	both.Training.Engines = []string{"presto", "trino"}
	if !both.TrainedOn(dialect.Presto) || !both.TrainedOn(dialect.Trino) {
		t.Error("engines [presto trino]: want both")
	}
}
