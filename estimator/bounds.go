package estimator

import (
	"math"
	"slices"

	"github.com/prestroid/prestroid/estimate"
)

// Bounds are decision bounds per target (CascadeOptions.Bounds): for each
// target, the values (in its unit: seconds, bytes) at which a decision
// made from an estimate changes. The order within a list does not matter.
type Bounds map[estimate.Target][]float64

// MergeBounds joins bound lists from several places (estimator.
// decision_bounds, the routing classes' bounds, guardrail limits, budgets)
// into one: per target the union, in increasing order, each value once;
// values that bound nothing (not positive, not finite) are left out. Nil
// when no list holds a bound. The arguments are not modified.
func MergeBounds(lists ...Bounds) Bounds {
	var out Bounds
	for _, l := range lists {
		for t, vs := range l {
			for _, v := range vs {
				if !(v > 0) || math.IsInf(v, 0) {
					continue
				}
				if out == nil {
					out = Bounds{}
				}
				out[t] = append(out[t], v)
			}
		}
	}
	for t, vs := range out {
		slices.Sort(vs)
		out[t] = slices.Compact(vs)
	}
	return out
}

// eachBound calls f with each of target t's decision bounds: Bounds[t]
// and, for the CPU time, the routing classes' bounds but the last
// class's (a value above it still goes to the last class, as
// routing.ClassFor places it). Unordered; a bound in both lists twice.
func (co *CascadeOptions) eachBound(t estimate.Target, f func(b float64)) {
	for _, b := range co.Bounds[t] {
		f(b)
	}
	if t == estimate.TargetCPU {
		for i, b := range co.ClassBounds {
			if b > 0 && i < len(co.ClassBounds)-1 {
				f(b)
			}
		}
	}
}

// bounded reports whether target t has a decision bound (eachBound).
func (co *CascadeOptions) bounded(t estimate.Target) bool {
	found := false
	co.eachBound(t, func(float64) { found = true })
	return found
}

// side is the number of target t's decision bounds (eachBound) below x:
// two values are on one side of every bound when their sides are equal.
// -1 for NaN, which lies on no side.
func (co *CascadeOptions) side(t estimate.Target, x float64) int {
	if math.IsNaN(x) {
		return -1
	}
	n := 0
	co.eachBound(t, func(b float64) {
		if x > b {
			n++
		}
	})
	return n
}

// around gives the bounds of x's side (side): lo the largest of target
// t's decision bounds below x (0 when none), hi the smallest at or above
// it (+Inf when none).
func (co *CascadeOptions) around(t estimate.Target, x float64) (lo, hi float64) {
	hi = math.Inf(1)
	co.eachBound(t, func(b float64) {
		if x > b {
			lo = max(lo, b)
		} else {
			hi = min(hi, b)
		}
	})
	return lo, hi
}
