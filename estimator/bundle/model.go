package bundle

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// Model is a loaded bundle: its featurizer settings, vocabularies and
// vectors, and an open session that passed every golden case. A Model is
// safe for concurrent use; it is read-only once loaded.
type Model struct {
	bundle *Bundle
	enc    *featurize.Encoder
	sess   Session
	text   *textModel // nil without a text stage
	// targets are the outputs beyond CPU (targets.go), in the order the
	// session fetches them after the CPU's.
	targets []modelTarget
	order   []int     // position in the manifest's inputs of ModelInputs, then EstimateInputs (if used)
	loaded  time.Time // when LoadModel finished

	mu      sync.Mutex
	refs    int
	retired bool
	closed  bool
}

// ModelOptions configure LoadModel.
type ModelOptions struct {
	// PredicateCache caches encoded predicate vectors. Nil means no cache.
	// Keys are prefixed with the model id, so one cache may serve several
	// models (vectors differ per model).
	PredicateCache featurize.PredicateCache
}

// LoadModel opens b's model with rt, checks the model's declared inputs
// against the manifest and runs every golden case, refusing (with a
// *BundleError) a bundle whose prediction differs from the expected one by
// more than GoldenTolerance.
func LoadModel(b *Bundle, rt Runtime, o ModelOptions) (*Model, error) {
	if rt == nil {
		return nil, errors.New("estimator: LoadModel: no runtime")
	}
	m := &Model{bundle: b}
	mf := &b.Manifest
	fail := func(file string, err error) error {
		return &BundleError{Bundle: b.Source, File: file, Err: err}
	}
	outputs, targets := resolveTargets(mf)
	m.targets = targets
	sess, err := rt.NewSession(b.Model, mf.Inputs, outputs)
	if err != nil {
		return nil, fail(ModelFile, err)
	}
	m.sess = sess
	if err := m.checkIO(); err != nil {
		sess.Close()
		return nil, fail(ModelFile, err)
	}
	for _, name := range m.inputNames() {
		m.order = append(m.order, slices.Index(mf.Inputs, name))
	}
	var cache featurize.PredicateCache
	if o.PredicateCache != nil {
		cache = prefixCache{c: o.PredicateCache, prefix: mf.ModelID + "\x00"}
	}
	m.enc = &featurize.Encoder{Ops: b.Ops, Tables: b.Tables, Vectors: b.Vectors, Dim: mf.Pf,
		Sampler: featurize.SamplerConfig{N: mf.N, K: mf.K, C: mf.C}, Cache: cache, Tree: mf.Tree()}
	if err := m.checkGolden(); err != nil {
		sess.Close()
		return nil, fail(GoldenFile, err)
	}
	if m.text, err = loadText(b, rt); err != nil {
		sess.Close()
		return nil, err
	}
	m.loaded = time.Now()
	return m, nil
}

// inputNames are the model's inputs in ModelInputs + EstimateInputs order.
func (m *Model) inputNames() []string {
	if m.bundle.Manifest.UsesEstimates() {
		return append(ModelInputs[:len(ModelInputs):len(ModelInputs)], EstimateInputs...)
	}
	return ModelInputs
}

// checkIO compares the model's declared inputs and output with BUNDLE.md.
func (m *Model) checkIO() error {
	mf := &m.bundle.Manifest
	type io struct {
		dtype string
		shape []int64
	}
	want := map[string]io{
		"op": {"int32", []int64{-1, int64(mf.K), int64(mf.Slots)}}, "table": {"int32", []int64{-1, int64(mf.K), int64(mf.Slots)}},
		"left": {"int32", []int64{-1, int64(mf.K), int64(mf.Slots)}}, "right": {"int32", []int64{-1, int64(mf.K), int64(mf.Slots)}},
		"vote": {"float32", []int64{-1, int64(mf.K), int64(mf.Slots)}}, "pred": {"float32", []int64{-1, int64(mf.K), int64(mf.Slots), int64(mf.Pf)}},
	}
	if mf.UsesEstimates() {
		want["est"] = io{"float32", []int64{-1, int64(mf.K), int64(mf.Slots), featurize.EstDim}}
		want["plan"] = io{"float32", []int64{-1, featurize.PlanDim}}
	}
	ins := m.sess.Inputs()
	if len(ins) != len(mf.Inputs) {
		names := make([]string, len(ins))
		for i, in := range ins {
			names[i] = in.Name
		}
		return fmt.Errorf("model declares inputs %q, manifest %q", names, mf.Inputs)
	}
	for _, in := range ins {
		w, ok := want[in.Name]
		if !ok {
			return fmt.Errorf("model input %q is not one of %q", in.Name, mf.Inputs)
		}
		if in.DType != w.dtype {
			return fmt.Errorf("model input %q is %s, want %s", in.Name, in.DType, w.dtype)
		}
		if len(in.Shape) != len(w.shape) {
			return fmt.Errorf("model input %q has shape %v, want %v", in.Name, in.Shape, w.shape)
		}
		for i, d := range in.Shape {
			// Dynamic dimensions are accepted anywhere; fixed ones must
			// match the manifest (the batch axis may be fixed only at 1
			// in no sane model, so a fixed batch axis is refused).
			if d >= 0 && (i == 0 || d != w.shape[i]) {
				return fmt.Errorf("model input %q has shape %v, want %v (-1 = dynamic)", in.Name, in.Shape, w.shape)
			}
		}
	}
	found := false
	for _, out := range m.sess.Outputs() {
		if out.Name == mf.Output {
			found = true
			if out.DType != "float32" {
				return fmt.Errorf("model output %q is %s, want float32", out.Name, out.DType)
			}
		}
	}
	if !found {
		return fmt.Errorf("model has no output %q", mf.Output)
	}
	return m.checkTargetIO()
}

// checkGolden runs the golden cases as one batch, and the first as a batch
// of one (the batch axis is dynamic): the CPU output and every target's.
func (m *Model) checkGolden() error {
	g := m.bundle.Golden
	ps, err := m.run(g.B, modelInput{g.Op, g.Table, g.Left, g.Right, g.Vote, g.Pred, g.Est, g.Plan})
	if err != nil {
		return err
	}
	if err := m.compareGolden(ps, g.B); err != nil {
		return err
	}
	per := g.K * g.S
	one := modelInput{g.Op[:per], g.Table[:per], g.Left[:per], g.Right[:per], g.Vote[:per], g.Pred[:per*g.Pf], nil, nil}
	if g.Est != nil {
		one.est, one.plan = g.Est[:per*featurize.EstDim], g.Plan[:featurize.PlanDim]
	}
	p1, err := m.run(1, one)
	if err != nil {
		return err
	}
	if err := m.compareGolden(p1, 1); err != nil {
		return fmt.Errorf("batch of one: %w", err)
	}
	return nil
}

// compareGolden compares the first n golden cases' predictions with the
// expected outputs.
func (m *Model) compareGolden(ps []Prediction, n int) error {
	g := m.bundle.Golden
	for i, want := range g.Expected[:n] {
		if got := ps[i].Y[estimate.TargetCPU]; !(math.Abs(float64(got-want)) <= GoldenTolerance) {
			return &GoldenError{Case: g.Names[i], Index: i, Got: got, Want: want}
		}
		for _, mt := range m.targets {
			want := g.Targets[mt.t.String()][i]
			if got := ps[i].Y[mt.t]; !(math.Abs(float64(got-want)) <= GoldenTolerance) {
				return fmt.Errorf("%s (output %q): %w", mt.t, mt.spec.Output, &GoldenError{Case: g.Names[i], Index: i, Got: got, Want: want})
			}
		}
	}
	return nil
}

// modelInput holds the flat input arrays of one batch (est and plan are
// used only by a model that takes EstimateInputs).
type modelInput struct {
	op, table, left, right []int32
	vote, pred, est, plan  []float32
}

// run feeds one batch of b queries and returns their normalized outputs.
func (m *Model) run(b int, in modelInput) ([]Prediction, error) {
	mf := &m.bundle.Manifest
	sh := []int64{int64(b), int64(mf.K), int64(mf.Slots)}
	shp := []int64{int64(b), int64(mf.K), int64(mf.Slots), int64(mf.Pf)}
	byName := [...]Tensor{
		{Shape: sh, Int32: in.op}, {Shape: sh, Int32: in.table}, {Shape: sh, Int32: in.left},
		{Shape: sh, Int32: in.right}, {Shape: sh, Float32: in.vote}, {Shape: shp, Float32: in.pred},
		{Shape: []int64{int64(b), int64(mf.K), int64(mf.Slots), featurize.EstDim}, Float32: in.est},
		{Shape: []int64{int64(b), featurize.PlanDim}, Float32: in.plan},
	}
	ins := make([]Tensor, len(m.order))
	for i, pos := range m.order {
		ins[pos] = byName[i]
	}
	outs, err := m.sess.Run(ins)
	if err != nil {
		return nil, fmt.Errorf("estimator: inference: %w", err)
	}
	if len(outs) != 1+len(m.targets) {
		return nil, fmt.Errorf("estimator: inference: %d outputs, want %d", len(outs), 1+len(m.targets))
	}
	for i, o := range outs {
		if len(o.Data) != b || len(o.Shape) == 0 || o.Shape[0] != int64(b) {
			return nil, fmt.Errorf("estimator: inference: output %d has shape %v for a batch of %d, want (%d, 1)", i, o.Shape, b, b)
		}
	}
	ps := make([]Prediction, b)
	for i := range ps {
		ps[i].Y[estimate.TargetCPU], ps[i].Known[estimate.TargetCPU] = outs[0].Data[i], true
		for _, mt := range m.targets {
			ps[i].Y[mt.t], ps[i].Known[mt.t] = outs[mt.out].Data[i], true
		}
	}
	return ps, nil
}

// ID is the bundle's model id.
func (m *Model) ID() string { return m.bundle.Manifest.ModelID }

// Manifest returns the bundle's manifest (read-only).
func (m *Model) Manifest() *Manifest { return &m.bundle.Manifest }

// Source names where the bundle was read from.
func (m *Model) Source() string { return m.bundle.Source }

// Loaded is when the model was loaded (it passed its golden checks).
func (m *Model) Loaded() time.Time { return m.loaded }

// Featurize turns an EXPLAIN plan (JSON) into the model's input.
func (m *Model) Featurize(planJSON []byte) (*featurize.Features, error) {
	return featurize.FromPlan(planJSON, m.enc.Tree, m.Encode)
}

// Encode turns an O-T-P tree into the model's input.
func (m *Model) Encode(root *featurize.OTPNode) (*featurize.Features, error) {
	if m.bundle.Manifest.Kind == "full" {
		return m.enc.EncodeFull(root, m.bundle.Manifest.Slots)
	}
	return m.enc.Encode(root)
}

// batchBuf holds the flat input arrays of one batch.
type batchBuf struct {
	ints       []int32
	vote, pred []float32
	est, plan  []float32
}

var batchPool sync.Pool

// Predict runs a batch of featurized queries and returns their normalized
// CPU predictions (model outputs, in [0, 1]).
func (m *Model) Predict(batch []*featurize.Features) ([]float32, error) {
	ps, err := m.PredictAll(batch)
	if err != nil || ps == nil {
		return nil, err
	}
	ys := make([]float32, len(ps))
	for i, p := range ps {
		ys[i] = p.Y[estimate.TargetCPU]
	}
	return ys, nil
}

// PredictAll runs a batch of featurized queries and returns every
// target's normalized prediction (CPUSeconds and Quantity de-normalize
// them): the CPU always, the targets beyond CPU that the bundle has.
func (m *Model) PredictAll(batch []*featurize.Features) ([]Prediction, error) {
	mf := &m.bundle.Manifest
	b := len(batch)
	if b == 0 {
		return nil, nil
	}
	per := mf.K * mf.Slots
	bb, _ := batchPool.Get().(*batchBuf)
	if bb == nil {
		bb = &batchBuf{}
	}
	defer batchPool.Put(bb)
	bb.ints = grow(bb.ints, 4*b*per)
	bb.vote = grow(bb.vote, b*per)
	bb.pred = grow(bb.pred, b*per*mf.Pf)
	op, table := bb.ints[:b*per], bb.ints[b*per:2*b*per]
	left, right := bb.ints[2*b*per:3*b*per], bb.ints[3*b*per:4*b*per]
	in := modelInput{op: op, table: table, left: left, right: right, vote: bb.vote, pred: bb.pred}
	est := mf.UsesEstimates()
	if est {
		bb.est = grow(bb.est, b*per*featurize.EstDim)
		bb.plan = grow(bb.plan, b*featurize.PlanDim)
		in.est, in.plan = bb.est, bb.plan
	}
	for i, f := range batch {
		if f.K != mf.K || f.Slots != mf.Slots || (f.Dim != mf.Pf && f.Dim != 0) {
			return nil, fmt.Errorf("%w: query %d has K=%d slots=%d Pf=%d, model wants K=%d slots=%d Pf=%d",
				featurize.ErrEncoder, i, f.K, f.Slots, f.Dim, mf.K, mf.Slots, mf.Pf)
		}
		o := i * per
		copy(op[o:o+per], f.Op)
		copy(table[o:o+per], f.Table)
		copy(left[o:o+per], f.Left)
		copy(right[o:o+per], f.Right)
		copy(bb.vote[o:o+per], f.Vote)
		p := bb.pred[o*mf.Pf : (o+per)*mf.Pf]
		if f.Dim == 0 {
			clear(p)
		} else {
			copy(p, f.Pred)
		}
		if est {
			e := bb.est[o*featurize.EstDim : (o+per)*featurize.EstDim]
			if f.Est == nil {
				clear(e)
			} else {
				copy(e, f.Est)
			}
			copy(bb.plan[i*featurize.PlanDim:(i+1)*featurize.PlanDim], f.Plan[:])
		}
	}
	return m.run(b, in)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// CPUSeconds de-normalizes a prediction (BUNDLE.md).
func (m *Model) CPUSeconds(y float32) float64 { return m.bundle.Manifest.Target.CPUSeconds(y) }

// Acquire takes a reference for one use (the Service's, per request);
// false when the model was retired. Each true Acquire needs one Release.
func (m *Model) Acquire() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return false
	}
	m.refs++
	return true
}

// Release gives back a reference taken by Acquire; the last one of a
// retired model closes it.
func (m *Model) Release() {
	m.mu.Lock()
	m.refs--
	closeNow := m.retired && m.refs == 0 && !m.closed
	if closeNow {
		m.closed = true
	}
	m.mu.Unlock()
	if closeNow {
		m.closeSessions()
	}
}

// Close retires the model: its session closes once the last use ends.
func (m *Model) Close() {
	m.mu.Lock()
	m.retired = true
	closeNow := m.refs == 0 && !m.closed
	if closeNow {
		m.closed = true
	}
	m.mu.Unlock()
	if closeNow {
		m.closeSessions()
	}
}

func (m *Model) closeSessions() {
	m.sess.Close()
	if m.text != nil {
		m.text.sess.Close()
	}
}

// prefixCache scopes a shared predicate cache to one model.
type prefixCache struct {
	c      featurize.PredicateCache
	prefix string
}

func (p prefixCache) Get(key string) ([]float32, bool) { return p.c.Get(p.prefix + key) }
func (p prefixCache) Set(key string, v []float32)      { p.c.Set(p.prefix+key, v) }
