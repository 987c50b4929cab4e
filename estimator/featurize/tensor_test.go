package featurize

import (
	"bytes"
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
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/estimator/plan"
)

// testVectors gives every token a distinct deterministic vector.
func testVectors(dim int, tokens ...string) *MapVectors {
	m := &MapVectors{Dim: dim, Tokens: map[string][]float32{}}
	for i, t := range tokens {
		v := make([]float32, dim)
		for j := range v {
			v[j] = float32((i+1)*(j+2)%7) - 3
		}
		m.Tokens[t] = v
	}
	return m
}

func otpFromPredicates(t *testing.T, preds ...string) *OTPNode {
	t.Helper()
	// Filter(Filter(...(Values)...)) with one predicate each.
	js := `{"id": "v", "name": "Values", "descriptor": {}}`
	for i, p := range preds {
		b, _ := json.Marshal(p)
		js = fmt.Sprintf(`{"id": "%d", "name": "Filter", "descriptor": {"filterPredicate": %s}, "children": [%s]}`, i, b, js)
	}
	p, err := plan.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	root, err := BuildOTP(p)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func predVectorsOf(t *testing.T, e *Encoder, root *OTPNode) map[string][]float32 {
	t.Helper()
	f, err := e.EncodeFull(root, 0)
	if err != nil {
		t.Fatal(err)
	}
	ft := FullTree(root)
	out := map[string][]float32{}
	for i, n := range ft.Nodes {
		if n.Kind == OTPPredicate {
			s := i + 1
			out[n.Text] = f.Pred[s*f.Dim : (s+1)*f.Dim]
		}
	}
	return out
}

func TestPredicateVectorEncoding(t *testing.T) {
	vecs := &MapVectors{Dim: 2, Tokens: map[string][]float32{
		"a": {1, 10}, "b": {3, 0}, "=": {1, 2}, "<": {5, 4}, "BETWEEN": {0, 6},
	}, Global: []float32{9, 9}}
	e := &Encoder{Vectors: vecs, Dim: 2}
	t.Run("clause mean, AND min, OR max, NOT passes through", func(t *testing.T) {
		root := otpFromPredicates(t, "(a = 1) AND (b < 2)", "(a = 1) OR (b < 2)", "NOT (a BETWEEN 1 AND 2)")
		got := predVectorsOf(t, e, root)
		// [a =] = (1,6); [b <] = (4,2); [a BETWEEN] = (0.5, 8)
		want := map[string][]float32{
			"(a = 1) AND (b < 2)":     {1, 2},
			"(a = 1) OR (b < 2)":      {4, 6},
			"NOT (a BETWEEN 1 AND 2)": {0.5, 8},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("got %v\nwant %v", got, want)
		}
	})
	t.Run("unseen tokens fall back to the mean of the query's other PRED nodes", func(t *testing.T) {
		got := predVectorsOf(t, e, otpFromPredicates(t, "a = 1", "b < 2", "zzz = 3"))
		if want := []float32{2.5, 4}; !reflect.DeepEqual(got["zzz = 3"], want) {
			t.Errorf("got %v, want %v", got["zzz = 3"], want)
		}
	})
	t.Run("the fallback reads PRED nodes outside the first K sub-trees", func(t *testing.T) {
		// The outermost Filter holds "zzz = 3"; with N=3, C=1, K=1 the only
		// sub-tree kept is that Filter, its PRED and the next Filter.
		root := otpFromPredicates(t, "a = 1", "b < 2", "zzz = 3")
		ek := &Encoder{Vectors: vecs, Dim: 2, Sampler: SamplerConfig{N: 3, K: 1, C: 1}}
		f, err := ek.Encode(root)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]float32
		for s, k := range f.Kind {
			if k == SlotPRED {
				got = append(got, f.Pred[s*2:(s+1)*2])
			}
		}
		if want := [][]float32{{2.5, 4}}; !reflect.DeepEqual(got, want) {
			t.Errorf("PRED slots %v, want %v", got, want)
		}
	})
	t.Run("then to the mean of the query's known tokens", func(t *testing.T) {
		got := predVectorsOf(t, e, otpFromPredicates(t, "zzz = 3", "b < yyy"))
		// known tokens: "=" (1,2), "b" (3,0), "<" (5,4) → (3, 2)
		if want := []float32{3, 2}; !reflect.DeepEqual(got["zzz = 3"], want) || !reflect.DeepEqual(got["b < yyy"], want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	t.Run("then to the global mean", func(t *testing.T) {
		got := predVectorsOf(t, e, otpFromPredicates(t, "zzz IS NULL"))
		if want := []float32{9, 9}; !reflect.DeepEqual(got["zzz IS NULL"], want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
	t.Run("no vectors: Dim 0", func(t *testing.T) {
		f, err := (&Encoder{Sampler: SamplerConfig{N: 15, K: 2, C: 3}}).Encode(otpFromPredicates(t, "a = 1"))
		if err != nil || f.Dim != 0 || len(f.Pred) != 0 {
			t.Fatalf("%v %+v", err, f)
		}
	})
}

type mapCache struct{ m map[string][]float32 }

func (c *mapCache) Get(k string) ([]float32, bool) { v, ok := c.m[k]; return v, ok }
func (c *mapCache) Set(k string, v []float32)      { c.m[k] = v }

func TestPredicateCacheKeyIsNormalizedText(t *testing.T) {
	c := &mapCache{m: map[string][]float32{}}
	vecs := testVectors(3, "a", "b", "=", "<")
	e := &Encoder{Vectors: vecs, Dim: 3, Cache: c, Sampler: SamplerConfig{N: 15, K: 3, C: 3}}
	if _, err := e.Encode(otpFromPredicates(t, "(a_1 = 1) AND (b < 2)")); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.m["AND([a =], [b <])"]; !ok || len(c.m) != 1 {
		t.Errorf("cache keys %v", c.m)
	}
}

func TestEncodeCapturedPlans(t *testing.T) {
	var roots []*OTPNode
	for _, f := range planFiles(t) {
		_, root := loadOTP(t, f)
		roots = append(roots, root)
	}
	ops, tables := BuildVocabs(roots)
	if ops.ID("InnerJoin(PARTITIONED)") < 2 || tables.ID("tpcds.sf1.store_sales") < 2 || ops.ID("NoSuchOp") != IDUnknown {
		t.Fatalf("vocabularies: %d ops, %d tables", ops.Len(), tables.Len())
	}
	vecs := testVectors(8)
	for _, root := range roots[:20] {
		for _, tok := range collectTokens(root) {
			if _, ok := vecs.Tokens[tok]; !ok {
				vecs.Tokens[tok] = []float32{1, 2, 3, 4, 5, 6, 7, float32(len(vecs.Tokens))}
			}
		}
	}
	e := &Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: 8, Sampler: SamplerConfig{N: 15, K: 9, C: 3}}
	var batch []*Features
	for i, root := range roots {
		f, err := e.Encode(root)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkFeatures(f); err != nil {
			t.Fatalf("plan %d: %v", i, err)
		}
		g, _ := e.Encode(root)
		if !reflect.DeepEqual(f, g) {
			t.Fatalf("plan %d: encoding is not deterministic", i)
		}
		batch = append(batch, f)
	}
	var a, b bytes.Buffer
	targets := make([]float32, len(batch))
	if err := WriteNPZ(&a, batch, BatchMeta{N: 15, K: 9, C: 3}, targets); err != nil {
		t.Fatal(err)
	}
	WriteNPZ(&b, batch, BatchMeta{N: 15, K: 9, C: 3}, targets)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("npz output is not byte-identical across runs")
	}
	arrs, err := npy.ReadNPZ(bytes.NewReader(a.Bytes()), int64(a.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if v := arrs["format_version"]; v == nil || len(v.Shape) != 0 || v.Data.([]int32)[0] != TensorFormatVersion {
		t.Fatalf("format_version %+v", v)
	}
	if p := arrs["params"].Data.([]int32); !reflect.DeepEqual(p, []int32{15, 9, 3, 8, 0}) {
		t.Errorf("params %v", p)
	}
	if s := arrs["op"].Shape; !reflect.DeepEqual(s, []int{len(batch), 9, 16}) {
		t.Errorf("op shape %v", s)
	}
	if s := arrs["pred"].Shape; !reflect.DeepEqual(s, []int{len(batch), 9, 16, 8}) {
		t.Errorf("pred shape %v", s)
	}
	last := batch[len(batch)-1]
	off := (len(batch) - 1) * 9 * 16
	if got := arrs["left"].Data.([]int32)[off : off+9*16]; !reflect.DeepEqual(got, last.Left) {
		t.Error("left round-trip differs")
	}
	if got := arrs["pred"].Data.([]float32)[off*8 : (off+9*16)*8]; !reflect.DeepEqual(got, last.Pred) {
		t.Error("pred round-trip differs")
	}
}

func collectTokens(root *OTPNode) []string {
	var out []string
	root.Walk(func(n *OTPNode) {
		if n.Kind == OTPPredicate {
			out = append(out, n.Pred.Tokens()...)
		}
	})
	return out
}

// checkFeatures verifies the slot layout: slot 0 empty, children point
// forward within the sub-tree, padding sub-trees are all zero, ids only on
// their kinds.
func checkFeatures(f *Features) error {
	for k := 0; k < f.K; k++ {
		base := k * f.Slots
		if f.Kind[base] != SlotNone || f.Op[base] != 0 || f.Vote[base] != 0 || f.Left[base] != 0 {
			return fmt.Errorf("sub-tree %d: slot 0 is not empty", k)
		}
		for s := 1; s < f.Slots; s++ {
			i := base + s
			if l := f.Left[i]; l != 0 && (int(l) <= s || int(l) >= f.Slots || f.Kind[base+int(l)] == SlotNone) {
				return fmt.Errorf("sub-tree %d slot %d: bad left %d", k, s, l)
			}
			if r := f.Right[i]; r != 0 && (int(r) <= s || int(r) >= f.Slots || f.Kind[base+int(r)] == SlotNone) {
				return fmt.Errorf("sub-tree %d slot %d: bad right %d", k, s, r)
			}
			if f.Op[i] != 0 && f.Kind[i] != SlotOPR || f.Table[i] != 0 && f.Kind[i] != SlotTBL {
				return fmt.Errorf("sub-tree %d slot %d: id on the wrong kind", k, s)
			}
			if k >= f.SubTrees && f.Kind[i] != SlotNone {
				return fmt.Errorf("padding sub-tree %d is not empty", k)
			}
		}
		if k < f.SubTrees && f.Kind[base+1] != SlotOPR {
			return fmt.Errorf("sub-tree %d: root slot is not an OPR", k)
		}
	}
	return nil
}

func TestEncoderErrors(t *testing.T) {
	root := otpFromPredicates(t, "a = 1")
	if _, err := (&Encoder{Sampler: SamplerConfig{N: 15, K: 0, C: 3}}).Encode(root); !errors.Is(err, ErrEncoder) {
		t.Errorf("K=0: %v", err)
	}
	if _, err := (&Encoder{Sampler: SamplerConfig{N: 10, K: 2, C: 3}}).Encode(root); !errors.Is(err, ErrSamplerConfig) {
		t.Errorf("N=10: %v", err)
	}
	if _, err := (&Encoder{}).EncodeFull(root, 3); !errors.Is(err, ErrEncoder) {
		t.Errorf("slots too small: %v", err)
	}
	a, _ := (&Encoder{}).EncodeFull(root, 0)
	b, _ := (&Encoder{Vectors: testVectors(2), Dim: 2}).EncodeFull(root, 0)
	if err := WriteNPZ(&bytes.Buffer{}, []*Features{a, b}, BatchMeta{Full: true}, nil); !errors.Is(err, ErrEncoder) {
		t.Errorf("mixed Dim: %v", err)
	}
}

func TestFullTreeBatchPads(t *testing.T) {
	e := &Encoder{}
	small, _ := e.EncodeFull(otpFromPredicates(t, "a = 1"), 0)
	big, _ := e.EncodeFull(otpFromPredicates(t, "a = 1", "b = 2", "c = 3"), 0)
	var buf bytes.Buffer
	if err := WriteNPZ(&buf, []*Features{small, big}, BatchMeta{Full: true}, nil); err != nil {
		t.Fatal(err)
	}
	arrs, err := npy.ReadNPZ(bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if s := arrs["kind"].Shape; !reflect.DeepEqual(s, []int{2, 1, big.Slots}) {
		t.Errorf("shape %v, want [2 1 %d]", s, big.Slots)
	}
	if p := arrs["params"].Data.([]int32); p[4] != 1 || p[1] != 1 {
		t.Errorf("params %v", p)
	}
}

func TestVocabJSONRoundTrip(t *testing.T) {
	v := VocabFrom([]string{"b", "a", "c", "a"})
	if v.ID("a") != 2 || v.ID("b") != 3 || v.ID("c") != 4 || v.ID("zz") != IDUnknown || v.ID("") != IDNone || v.Len() != 5 {
		t.Fatalf("ids wrong: %v", v.names)
	}
	b, _ := json.Marshal(v)
	var names []string
	if json.Unmarshal(b, &names); !reflect.DeepEqual(names, []string{"<none>", "<unknown>", "a", "b", "c"}) {
		t.Errorf("json %s", b)
	}
	var w Vocab
	if err := json.Unmarshal(b, &w); err != nil || w.ID("c") != 4 {
		t.Fatalf("%v %v", err, w.names)
	}
	if err := json.Unmarshal([]byte(`["a"]`), &w); err == nil {
		t.Error("accepted a vocabulary without the reserved ids")
	}
}

func TestLoadWord2VecText(t *testing.T) {
	m, err := LoadWord2VecText(strings.NewReader("2 3\nd_year 1 2 3\n= 0.5 -1 2e-1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Vector([]string{"d_year", "="}); !ok || !reflect.DeepEqual(v, []float32{0.75, 0.5, 1.6}) {
		t.Errorf("got %v %v", v, ok)
	}
	if _, err := LoadWord2VecText(strings.NewReader("1 3\nx 1 2\n")); err == nil {
		t.Error("accepted a short vector")
	}
}

// TestWriteExampleNPZ writes testdata/example.npz (two TPC-H plans) for the
// Python trainer's reader tests; -update refreshes it.
func TestWriteExampleNPZ(t *testing.T) {
	var batch []*Features
	var roots []*OTPNode
	for _, name := range []string{"tpch-q03-sf1", "tpch-q06-sf1"} {
		_, root := loadOTP(t, filepath.Join(trinotest.ExplainDir, name+".json"))
		roots = append(roots, root)
	}
	ops, tables := BuildVocabs(roots)
	vecs := testVectors(4)
	for _, r := range roots {
		for _, tok := range collectTokens(r) {
			vecs.Tokens[tok] = []float32{float32(len(tok)), 1, 0, -1}
		}
	}
	e := &Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: 4, Sampler: SamplerConfig{N: 15, K: 9, C: 3}}
	for _, r := range roots {
		f, err := e.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		batch = append(batch, f)
	}
	var buf bytes.Buffer
	if err := WriteNPZ(&buf, batch, BatchMeta{N: 15, K: 9, C: 3}, []float32{0.25, 0.75}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(trinotest.Testdata, "example.npz")
	if *update {
		os.WriteFile(path, buf.Bytes(), 0o644)
		vb, _ := json.MarshalIndent(map[string]*Vocab{"ops": ops, "tables": tables}, "", "  ")
		os.WriteFile(filepath.Join(trinotest.Testdata, "example.vocab.json"), append(vb, '\n'), 0o644)
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(want, buf.Bytes()) {
		t.Errorf("%s differs from the encoder's output (layout change? bump TensorFormatVersion and run -update)", path)
	}
}

// TestConcurrentFeaturization runs the serving path from several goroutines
// on one Encoder (shared vocabularies, vectors, parser pools, table memo);
// run with -race.
func TestConcurrentFeaturization(t *testing.T) {
	files := planFiles(t)[:8]
	var plans [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		plans = append(plans, b)
	}
	e := &Encoder{Vectors: testVectors(4, "d_year", "="), Dim: 4, Sampler: SamplerConfig{N: 15, K: 9, C: 3},
		Cache: &lockedCache{m: map[string][]float32{}}}
	want := make([]*Features, len(plans))
	for i, b := range plans {
		f, err := e.Featurize(b)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = f
	}
	done := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func() {
			for r := 0; r < 5; r++ {
				for i, b := range plans {
					f, err := e.Featurize(b)
					if err == nil && !reflect.DeepEqual(f, want[i]) {
						err = fmt.Errorf("plan %d encodes differently under concurrency", i)
					}
					if err != nil {
						done <- err
						return
					}
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

type lockedCache struct {
	mu sync.Mutex
	m  map[string][]float32
}

func (c *lockedCache) Get(k string) ([]float32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[k]
	return v, ok
}

func (c *lockedCache) Set(k string, v []float32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = v
}

// TestEncodeCountsTables: Features count the distinct tables of the whole
// plan (not only those in the first K sub-trees) and those missing from the
// table vocabulary.
func TestEncodeCountsTables(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(trinotest.ExplainDir, "tpch-q08-sf1.json")) // 8 tables, some twice (nation)
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
	known := NewVocab()
	known.Add("tpch.sf1.lineitem")
	known.Add("tpch.sf1.orders")
	known.Add("tpch.sf1.nation")
	enc := &Encoder{Ops: NewVocab(), Tables: known, Sampler: SamplerConfig{N: 15, K: 1, C: 3}}
	f, err := enc.Encode(root)
	if err != nil {
		t.Fatal(err)
	}
	// q08 reads part, supplier, lineitem, orders, customer, nation (twice), region.
	if f.Tables != 7 || f.UnknownTables != 4 {
		t.Fatalf("tables %d unknown %d, want 7 and 4", f.Tables, f.UnknownTables)
	}
	enc.Tables = nil // no vocabulary: every table unknown
	if f, _ = enc.Encode(root); f.Tables != 7 || f.UnknownTables != 7 {
		t.Fatalf("without a vocabulary: tables %d unknown %d", f.Tables, f.UnknownTables)
	}
}

// TestEstimateFeatures checks the optimizer-estimate features on every
// captured plan: the serving path (lean parse) gives the same Est and Plan as
// the full parse; each OPR slot carries its node's estimate; Σ cpuCost over
// the O-T-P tree equals Σ over the plan's own estimate entries (each fused
// node's pieces counted once), and non-OPR slots carry zeros.
func TestEstimateFeatures(t *testing.T) {
	withEst := 0
	for _, file := range planFiles(t) {
		p, root := loadOTP(t, file)
		all, err := SampleSubTrees(root, SamplerConfig{N: 15, K: 1 << 20, C: 3})
		if err != nil {
			t.Fatal(err)
		}
		e := &Encoder{Sampler: SamplerConfig{N: 15, K: len(all), C: 3}}
		f, err := e.Encode(root)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(file)
		lean, err := e.Featurize(b)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(lean.Est, f.Est) || lean.Plan != f.Plan {
			t.Fatalf("%s: lean parse changes the estimate features", file)
		}
		var planSum float64
		p.Root.Walk(func(n *plan.PlanNode) {
			for _, est := range n.Estimates {
				if finite(est.CPUCost) && est.CPUCost >= 0 {
					planSum += est.CPUCost
				}
			}
		})
		if got, want := f.Plan[0], lnScaled(planSum); math.Abs(float64(got-want)) > 1e-6 {
			t.Errorf("%s: plan Σ cpuCost feature %v, want %v (Σ=%g)", file, got, want, planSum)
		}
		if planSum > 0 {
			withEst++
		}
		for s, kind := range f.Kind {
			v := f.Est[s*EstDim : (s+1)*EstDim]
			if kind != SlotOPR && slices.ContainsFunc(v, func(x float32) bool { return x != 0 }) {
				t.Fatalf("%s: slot %d of kind %d has estimate %v", file, s, kind, v)
			}
		}
		// Every OPR node of the whole tree votes once with unlimited K:
		// compare slot values with the node's own estimate.
		sts, _ := SampleSubTrees(root, e.Sampler)
		for si, st := range sts {
			for i, n := range st.Nodes {
				if n.Kind != OTPOperator {
					continue
				}
				v := f.Est[(si*f.Slots+i+1)*EstDim:][:EstDim]
				est, ok := n.Estimate()
				want := []float32{0, 0, 0, 0}
				if ok {
					want = []float32{1, lnScaled(est.OutputRowCount), lnScaled(est.OutputSizeInBytes), lnScaled(est.CPUCost)}
				}
				if !slices.Equal(v, want) {
					t.Fatalf("%s: %s slot has %v, want %v", file, n.Value, v, want)
				}
			}
		}
		for _, x := range f.Plan {
			if !(x >= 0 && x <= 2) {
				t.Fatalf("%s: plan vector %v out of range", file, f.Plan)
			}
		}
	}
	if withEst < 100 {
		t.Errorf("only %d plans carry cpuCost estimates; the captured tiny/sf1 plans should", withEst)
	}
}

func TestLnScaled(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want float32
	}{{math.NaN(), 0}, {math.Inf(1), 0}, {-5, 0}, {0, 0}, {math.E - 1, 1.0 / EstScale}} {
		if got := lnScaled(c.x); math.Abs(float64(got-c.want)) > 1e-7 {
			t.Errorf("lnScaled(%v) = %v, want %v", c.x, got, c.want)
		}
	}
}
