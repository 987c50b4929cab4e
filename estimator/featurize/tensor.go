package featurize

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/estimator/plan"
)

// TensorFormatVersion is the version of the on-disk tensor layout written by
// WriteNPZ (documented in TENSORS.md). Bump it on any incompatible change.
const TensorFormatVersion = 2

// Optimizer-estimate features (TENSORS.md, format 2).
const (
	// EstDim is the size of a node's estimate vector ("est"): [known,
	// ln(1+rows)/EstScale, ln(1+bytes)/EstScale, ln(1+cpuCost)/EstScale] for
	// an OPR node whose plan node has an estimate; zeros elsewhere.
	EstDim = 4
	// PlanDim is the size of a query's plan vector ("plan"): [ln(1+Σ cpuCost),
	// ln(1+max cpuCost), ln(1+Σ networkCost), ln(1+max rows)] each / EstScale,
	// then ln(1+O-T-P nodes)/10 and the share of OPR nodes with a known
	// cpuCost. Sums and maxima run over every OPR node of the whole tree.
	PlanDim = 6
	// EstScale brings ln(1+x) of Trino's estimates (rows, bytes and cost
	// units up to ~1e13) to about [0, 1].
	EstScale = 25
)

// Node kinds in the "kind" tensor.
const (
	SlotNone  int8 = 0 // slot 0 and unused slots
	SlotOPR   int8 = 1
	SlotTBL   int8 = 2
	SlotPRED  int8 = 3
	SlotEmpty int8 = 4 // an ∅ node (occupies a slot; ids 0, zero vector)
)

// Features are one query's model inputs (docs/design.md §2.5): K sub-trees of Slots
// slots each (Slots = N + 1: slot 0 is the all-zero "no node" slot that
// missing children point to, slot 1 the sub-tree's root, then the sub-tree's
// nodes in breadth-first order, then unused slots). Arrays are flat in C
// order: index [k*Slots + s] (Pred: [(k*Slots + s)*Dim + d]).
type Features struct {
	K, Slots, Dim int
	SubTrees      int     // real sub-trees (the rest, up to K, are padding)
	Op            []int32 // operator id (OPR slots), else 0
	Table         []int32 // table id (TBL slots), else 0
	Kind          []int8  // Slot* constants
	Left, Right   []int32 // child slot within the same sub-tree; 0 = none
	Vote          []float32
	Pred          []float32 // predicate vector (PRED slots), else zeros
	// Est is the optimizer-estimate vector of each slot, [(k*Slots + s)*EstDim + j].
	Est []float32
	// Plan is the query's plan-level estimate vector.
	Plan [PlanDim]float32
	// Tables is the number of distinct tables the whole plan scans and
	// UnknownTables how many of them are not in the table vocabulary (the
	// model never saw them in training: the paper's drift signal).
	Tables, UnknownTables int

	buf featureBufs // the tensors' backing arrays (newFeatures, Release)
}

// featureBufs backs a Features' tensors: Op, Table, Left and Right share
// ints; Vote, Est and Pred share floats.
type featureBufs struct {
	ints   []int32
	kinds  []int8
	floats []float32
}

// featuresPool holds Features given back by Release (the service does,
// once a query is estimated), so that steady serving reuses its tensors
// rather than allocating ~100 KB per query for the GC to collect.
var featuresPool sync.Pool

// maxPooledFeatureFloats bounds the tensors kept in featuresPool (16 MB).
const maxPooledFeatureFloats = 1 << 22

// newFeatures returns zeroed Features of k sub-trees of slots slots with
// dim-sized predicate vectors (Pred nil when dim is 0).
func newFeatures(k, slots, dim int) *Features {
	total := k * slots
	f, _ := featuresPool.Get().(*Features)
	if f == nil {
		f = new(Features)
	}
	b := f.buf
	*f = Features{K: k, Slots: slots, Dim: dim}
	b.ints = zeroed(b.ints, 4*total)
	b.kinds = zeroed(b.kinds, total)
	b.floats = zeroed(b.floats, total*(1+EstDim+dim))
	f.buf = b
	f.Op, f.Table = b.ints[:total:total], b.ints[total:2*total:2*total]
	f.Left, f.Right = b.ints[2*total:3*total:3*total], b.ints[3*total:]
	f.Kind = b.kinds
	f.Vote = b.floats[:total:total]
	f.Est = b.floats[total : total*(1+EstDim) : total*(1+EstDim)]
	if dim > 0 {
		f.Pred = b.floats[total*(1+EstDim):]
	}
	return f
}

// zeroed returns s resized to n zero elements, reusing its array if it is
// large enough.
func zeroed[T int8 | int32 | float32](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// Release gives f's tensors back for reuse by a later encoding (the
// service does once a query is estimated). Optional: unreleased Features
// are left to the GC. Nothing may use f afterwards.
func (f *Features) Release() {
	if f != nil && cap(f.buf.floats) <= maxPooledFeatureFloats {
		featuresPool.Put(f)
	}
}

// Encoder turns O-T-P trees into Features. Its fields are read-only while
// Encode runs; one Encoder may serve concurrent calls.
type Encoder struct {
	// Ops and Tables are the vocabularies; nil maps every name to IDUnknown.
	Ops, Tables *Vocab
	// Vectors supplies predicate token vectors; nil (or Dim 0) leaves the
	// predicate vectors out (Dim 0) or zero.
	Vectors PredicateVectors
	// Dim is Pf, the predicate vector size.
	Dim int
	// Sampler holds N, K, C. K must be ≥ 1 for Encode.
	Sampler SamplerConfig
	// Cache, if set, caches directly encoded predicate vectors by normalized
	// predicate text.
	Cache PredicateCache
	// Tree are the O-T-P tree's optional readings Featurize builds with (the
	// bundle's tree_features).
	Tree TreeOptions
}

// ErrEncoder is wrapped by invalid Encoder settings.
var ErrEncoder = errors.New("estimator: invalid encoder")

// Featurize parses planJSON and encodes it: the serving path in one call.
func (e *Encoder) Featurize(planJSON []byte) (*Features, error) {
	return FromPlan(planJSON, e.Tree, e.Encode)
}

// FromPlan is the serving path: a lean parse of planJSON (output symbols,
// details and most descriptor keys left out), its O-T-P tree with the
// readings o, without the parse of join criteria, built in a pooled arena
// (withOTP), and enc.
func FromPlan(planJSON []byte, o TreeOptions, enc func(*OTPNode) (*Features, error)) (*Features, error) {
	p, err := plan.ParseLimits(planJSON, plan.Limits{Lean: true})
	if err != nil {
		return nil, err
	}
	return withOTP(p, o, enc)
}

// Encode samples the first K sub-trees of root (docs/design.md §2.4) and encodes
// them, padding with empty sub-trees up to K.
func (e *Encoder) Encode(root *OTPNode) (*Features, error) {
	if e.Sampler.K < 1 {
		return nil, fmt.Errorf("%w: K=%d, want ≥ 1", ErrEncoder, e.Sampler.K)
	}
	sts, err := SampleSubTrees(root, e.Sampler)
	if err != nil {
		return nil, err
	}
	return e.encode(root, sts, e.Sampler.K, e.Sampler.N+1)
}

// EncodeFull encodes the whole tree as one sub-tree (the full-tree variant).
// slots ≤ 0 sizes it to the tree (nodes + 1); a larger value pads (to the
// longest tree of a batch); a smaller one is an error.
func (e *Encoder) EncodeFull(root *OTPNode, slots int) (*Features, error) {
	ft := FullTree(root)
	if slots <= 0 {
		slots = ft.Len() + 1
	}
	if slots < ft.Len()+1 {
		return nil, fmt.Errorf("%w: tree of %d nodes needs %d slots, have %d", ErrEncoder, ft.Len(), ft.Len()+1, slots)
	}
	return e.encode(root, []SubTree{ft}, 1, slots)
}

func (e *Encoder) encode(root *OTPNode, sts []SubTree, k, slots int) (*Features, error) {
	if e.Dim < 0 {
		return nil, fmt.Errorf("%w: Dim=%d", ErrEncoder, e.Dim)
	}
	dim := e.Dim
	if e.Vectors == nil {
		dim = 0
	}
	f := newFeatures(k, slots, dim)
	f.SubTrees = len(sts)
	// One walk over the whole tree: every PRED node of the query (the
	// vector fallback chain looks at all of them, not only those in the
	// first K sub-trees) and the distinct tables.
	var preds []*OTPNode
	var tables map[string]bool
	var pa planAgg
	root.Walk(func(n *OTPNode) {
		pa.nodes++
		if n.Kind == OTPOperator {
			pa.add(n)
		}
		switch {
		case n.Kind == OTPPredicate && dim > 0:
			preds = append(preds, n)
		case n.Kind == OTPTable && !tables[n.Value]:
			if tables == nil {
				tables = map[string]bool{}
			}
			tables[n.Value] = true
			f.Tables++
			if e.Tables.ID(n.Value) == IDUnknown {
				f.UnknownTables++
			}
		}
	})
	f.Plan = pa.vector()
	// Vectors of the PRED slots, in slot order. The PRED nodes of the first
	// K sub-trees are encoded first; only when one of them needs the
	// fallback chain (which reads every PRED node of the query) are all of
	// them encoded.
	var slotVecs [][]float32
	if dim > 0 {
		var inK []*OTPNode
		for si := range sts {
			for _, n := range sts[si].Nodes {
				if n.Kind == OTPPredicate {
					inK = append(inK, n)
				}
			}
		}
		pe := predEncoder{vecs: e.Vectors, cache: e.Cache, dim: dim}
		var missing int
		if slotVecs, missing = pe.direct(inK); missing > 0 {
			all := pe.vectors(preds)
			idx := make(map[*OTPNode]int, len(preds))
			for i, p := range preds {
				idx[p] = i
			}
			for i, n := range inK {
				slotVecs[i] = all[idx[n]]
			}
		}
	}
	next := 0 // the next PRED slot's vector
	for si := range sts {
		st := &sts[si]
		base := si * slots
		for i, n := range st.Nodes {
			s := base + i + 1
			switch n.Kind {
			case OTPOperator:
				f.Kind[s], f.Op[s] = SlotOPR, e.Ops.ID(n.Value)
				nodeEst(n, f.Est[s*EstDim:(s+1)*EstDim])
			case OTPTable:
				f.Kind[s], f.Table[s] = SlotTBL, e.Tables.ID(n.Value)
			case OTPPredicate:
				f.Kind[s] = SlotPRED
				if dim > 0 {
					if v := slotVecs[next]; v != nil {
						copy(f.Pred[s*dim:(s+1)*dim], v)
					}
					next++
				}
			default:
				f.Kind[s] = SlotEmpty
			}
			if l := st.Left[i]; l >= 0 {
				f.Left[s] = l + 1
			}
			if r := st.Right[i]; r >= 0 {
				f.Right[s] = r + 1
			}
			f.Vote[s] = float32(st.Vote[i])
		}
	}
	return f, nil
}

// lnScaled is ln(1+x)/EstScale for a finite x ≥ 0, else 0.
func lnScaled(x float64) float32 {
	if !(x > 0) || math.IsInf(x, 1) {
		return 0
	}
	return float32(math.Log1p(x) / EstScale)
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// nodeEst writes an OPR node's estimate vector into dst (EstDim values).
func nodeEst(n *OTPNode, dst []float32) {
	e, ok := n.Estimate()
	if !ok {
		return
	}
	dst[0] = 1
	dst[1] = lnScaled(e.OutputRowCount)
	dst[2] = lnScaled(e.OutputSizeInBytes)
	dst[3] = lnScaled(e.CPUCost)
}

// planAgg accumulates the plan vector over the O-T-P tree.
type planAgg struct {
	nodes, ops, known         int
	cpuSum, cpuMax, net, rows float64
}

func (a *planAgg) add(n *OTPNode) {
	if n.link { // the chain's top link stands for the plan node
		return
	}
	a.ops++
	e, ok := n.Estimate()
	if !ok {
		return
	}
	if finite(e.CPUCost) && e.CPUCost >= 0 {
		a.known++
		a.cpuSum += e.CPUCost
		a.cpuMax = max(a.cpuMax, e.CPUCost)
	}
	if finite(e.NetworkCost) && e.NetworkCost >= 0 {
		a.net += e.NetworkCost
	}
	if finite(e.OutputRowCount) {
		a.rows = max(a.rows, e.OutputRowCount)
	}
}

func (a *planAgg) vector() (v [PlanDim]float32) {
	v[0], v[1], v[2], v[3] = lnScaled(a.cpuSum), lnScaled(a.cpuMax), lnScaled(a.net), lnScaled(a.rows)
	v[4] = float32(math.Log1p(float64(a.nodes)) / 10)
	if a.ops > 0 {
		v[5] = float32(a.known) / float32(a.ops)
	}
	return v
}

// BatchMeta describes a batch for WriteNPZ.
type BatchMeta struct {
	N, K, C int  // sampler settings (N = 0, K = 1 for the full-tree variant)
	Full    bool // full-tree variant
}

// WriteNPZ writes a batch of Features as an .npz archive (layout version
// TensorFormatVersion, see TENSORS.md). Every Features must have the same K
// and Dim; their Slots may differ (full-tree variant) and are padded to the
// largest. Targets, when not nil, go in "target" (one per query).
func WriteNPZ(w io.Writer, batch []*Features, meta BatchMeta, targets []float32) error {
	if len(batch) == 0 {
		return fmt.Errorf("%w: empty batch", ErrEncoder)
	}
	if targets != nil && len(targets) != len(batch) {
		return fmt.Errorf("%w: %d targets for %d queries", ErrEncoder, len(targets), len(batch))
	}
	k, dim, slots := batch[0].K, batch[0].Dim, 0
	for i, f := range batch {
		if f.K != k || f.Dim != dim {
			return fmt.Errorf("%w: query %d has K=%d Dim=%d, want K=%d Dim=%d", ErrEncoder, i, f.K, f.Dim, k, dim)
		}
		slots = max(slots, f.Slots)
	}
	b := len(batch)
	per := k * slots
	op, tbl := make([]int32, b*per), make([]int32, b*per)
	left, right := make([]int32, b*per), make([]int32, b*per)
	kind, vote := make([]int8, b*per), make([]float32, b*per)
	pred := make([]float32, b*per*dim)
	est := make([]float32, b*per*EstDim)
	plan := make([]float32, b*PlanDim)
	subtrees := make([]int32, b)
	for qi, f := range batch {
		subtrees[qi] = int32(f.SubTrees)
		copy(plan[qi*PlanDim:], f.Plan[:])
		for kk := 0; kk < k; kk++ {
			src, dst := kk*f.Slots, qi*per+kk*slots
			copy(op[dst:dst+f.Slots], f.Op[src:src+f.Slots])
			copy(tbl[dst:dst+f.Slots], f.Table[src:src+f.Slots])
			copy(left[dst:dst+f.Slots], f.Left[src:src+f.Slots])
			copy(right[dst:dst+f.Slots], f.Right[src:src+f.Slots])
			copy(kind[dst:dst+f.Slots], f.Kind[src:src+f.Slots])
			copy(vote[dst:dst+f.Slots], f.Vote[src:src+f.Slots])
			if dim > 0 {
				copy(pred[dst*dim:(dst+f.Slots)*dim], f.Pred[src*dim:(src+f.Slots)*dim])
			}
			if f.Est != nil {
				copy(est[dst*EstDim:(dst+f.Slots)*EstDim], f.Est[src*EstDim:(src+f.Slots)*EstDim])
			}
		}
	}
	full := int32(0)
	if meta.Full {
		full = 1
	}
	z := npy.NewNPZWriter(w)
	shape := []int{b, k, slots}
	entries := []struct {
		name  string
		shape []int
		data  any
	}{
		{"format_version", nil, []int32{TensorFormatVersion}},
		{"params", []int{5}, []int32{int32(meta.N), int32(k), int32(meta.C), int32(dim), full}},
		{"op", shape, op},
		{"table", shape, tbl},
		{"kind", shape, kind},
		{"left", shape, left},
		{"right", shape, right},
		{"vote", shape, vote},
		{"pred", []int{b, k, slots, dim}, pred},
		{"est", []int{b, k, slots, EstDim}, est},
		{"plan", []int{b, PlanDim}, plan},
		{"subtrees", []int{b}, subtrees},
	}
	if targets != nil {
		entries = append(entries, struct {
			name  string
			shape []int
			data  any
		}{"target", []int{b}, targets})
	}
	for _, en := range entries {
		if err := z.Add(en.name, en.shape, en.data); err != nil {
			return err
		}
	}
	return z.Close()
}
