package estimator

import (
	"encoding/json"
	"math"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

// basisWire is Basis as bytes that cross the proxy (Estimate.Learn) and,
// inside a queued query, the replicas: JSON, with the unknown numbers (NaN
// in Basis) left out, since JSON has no NaN. The history keys are bytes
// (a SHA-256 digest, not UTF-8), so they travel as []byte (base64): as a
// JSON string, encoding/json would replace every invalid byte with U+FFFD
// and the history would learn under a key no lookup ever computes.
type basisWire struct {
	Exact   []byte          `json:"x,omitempty"`
	Shape   []byte          `json:"s,omitempty"`
	Family  []byte          `json:"f,omitempty"`
	LnModel *float64        `json:"m,omitempty"`
	LnCost  *float64        `json:"c,omitempty"`
	LnText  *float64        `json:"t,omitempty"`
	LnRows  *float64        `json:"n,omitempty"`
	Blend   *BlendPoint     `json:"b,omitempty"`
	Source  estimate.Source `json:"src"`
	Pending string          `json:"p,omitempty"`
	Engine  dialect.Engine  `json:"e,omitempty"` // "" for Trino: a Trino basis reads as it always did
	// Served and Sigma are Basis.Served's CPU time: ln of its median and
	// its σ (absent: none).
	Served *float64 `json:"v,omitempty"`
	Sigma  *float64 `json:"vs,omitempty"`
	// ModelBy and TextBy are Basis.ModelBy and TextBy by target label
	// ("peak_memory", "elapsed"), the targets not predicted left out.
	ModelBy map[string]float64 `json:"mb,omitempty"`
	TextBy  map[string]float64 `json:"tb,omitempty"`
	// ServedMemory and ServedElapsed are Basis.Served's peak memory and
	// elapsed time: [median, σ] (absent: none served).
	ServedMemory  *[2]float64 `json:"vm,omitempty"`
	ServedElapsed *[2]float64 `json:"ve,omitempty"`
}

// servedPair is a served interval as the wire carries it; nil for none.
func servedPair(q estimate.Quantity) *[2]float64 {
	if !q.Known() || !(q.Sigma > 0) || math.IsInf(q.Sigma, 0) {
		return nil
	}
	return &[2]float64{q.Median, q.Sigma}
}

// fromPair is servedPair's inverse (the zero Quantity for none).
func fromPair(p *[2]float64) estimate.Quantity {
	if p == nil {
		return estimate.Quantity{}
	}
	if q := (estimate.Quantity{Median: p[0], Sigma: p[1]}); servedPair(q) != nil {
		return q
	}
	return estimate.Quantity{}
}

// byLabel is a per-target array as the wire carries it: the known values
// beyond the CPU time by target label; nil when none is.
func byLabel(v *[numTargets]float64) map[string]float64 {
	var m map[string]float64
	for _, t := range beyondCPU {
		if x := v[t]; x > 0 && !math.IsInf(x, 0) {
			if m == nil {
				m = map[string]float64{}
			}
			m[t.String()] = x
		}
	}
	return m
}

// fromLabels is byLabel's inverse; labels it does not know are left out.
func fromLabels(m map[string]float64) (v [numTargets]float64) {
	for k, x := range m {
		if t, ok := estimate.ParseTarget(k); ok && t != estimate.TargetCPU && x > 0 {
			v[t] = x
		}
	}
	return v
}

func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// positive is finite for a number that is only known when positive.
func positive(v float64) *float64 {
	if !(v > 0) {
		return nil
	}
	return finite(v)
}

func orNaN(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// MarshalBasis encodes b for the proxy to hand back with the query's
// outcome; nil for a nil b.
func MarshalBasis(b *Basis) []byte {
	if b == nil {
		return nil
	}
	w := basisWire{Exact: []byte(b.Exact), Shape: []byte(b.Shape), Family: []byte(b.Family), LnModel: finite(b.LnModel),
		LnCost: finite(b.LnCost), LnText: finite(b.LnText), LnRows: positive(b.LnRows), Blend: b.Blend.finite(), Source: b.Source, Pending: b.Pending, Engine: wireEngine(b.Engine),
		ModelBy: byLabel(&b.ModelBy), TextBy: byLabel(&b.TextBy), ServedMemory: servedPair(b.Served[estimate.TargetMemory]), ServedElapsed: servedPair(b.Served[estimate.TargetElapsed])}
	if p := servedPair(b.Served[estimate.TargetCPU]); p != nil {
		w.Served, w.Sigma = finite(math.Log(p[0])), &p[1]
	}
	out, _ := json.Marshal(w) // strings and finite numbers: cannot fail
	return out
}

// UnmarshalBasis decodes what MarshalBasis wrote; nil when data is empty or
// not a basis.
func UnmarshalBasis(data []byte) *Basis {
	if len(data) == 0 {
		return nil
	}
	var w basisWire
	if err := json.Unmarshal(data, &w); err != nil {
		return nil
	}
	var served [numTargets]estimate.Quantity
	if w.Served != nil && w.Sigma != nil {
		served[estimate.TargetCPU] = fromPair(&[2]float64{math.Exp(*w.Served), *w.Sigma})
	}
	served[estimate.TargetMemory], served[estimate.TargetElapsed] = fromPair(w.ServedMemory), fromPair(w.ServedElapsed)
	return &Basis{Exact: string(w.Exact), Shape: string(w.Shape), Family: string(w.Family), LnModel: orNaN(w.LnModel), LnCost: orNaN(w.LnCost), LnText: orNaN(w.LnText), LnRows: orNaN(w.LnRows), Blend: w.Blend.finite(), Source: w.Source, Pending: w.Pending, Engine: w.Engine,
		ModelBy: fromLabels(w.ModelBy), TextBy: fromLabels(w.TextBy), Served: served}
}

// wireEngine is the engine as a basis carries it: Trino's is left out.
func wireEngine(e dialect.Engine) dialect.Engine {
	if e == dialect.Trino {
		return dialect.Unknown
	}
	return e
}

// BlendPoint is what the model stage combined: ln of the model's
// corrected CPU seconds and of the calibrated optimizer's, both finite.
type BlendPoint struct {
	LnModel     float64 `json:"m"`
	LnOptimizer float64 `json:"o"`
}

// finite is p when both its numbers are finite, else nil (the wire's
// JSON has no NaN or infinity).
func (p *BlendPoint) finite() *BlendPoint {
	if p == nil || finite(p.LnModel) == nil || finite(p.LnOptimizer) == nil {
		return nil
	}
	return p
}
