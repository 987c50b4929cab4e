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

// bounded reports whether target t has a decision bound: one of Bounds, or
// for the CPU time a bound between two routing classes.
func (co *CascadeOptions) bounded(t estimate.Target) bool {
	if len(co.Bounds[t]) > 0 {
		return true
	}
	if t != estimate.TargetCPU {
		return false
	}
	for i, b := range co.ClassBounds {
		if b > 0 && i < len(co.ClassBounds)-1 {
			return true
		}
	}
	return false
}

// side is the number of target t's decision bounds below x: two values
// are on one side of every bound when their sides are equal. The routing
// classes' bounds count for the CPU time, but for the last class's (a
// value above it still goes to the last class, as routing.ClassFor places it). -1 for
// NaN, which lies on no side.
func (co *CascadeOptions) side(t estimate.Target, x float64) int {
	if math.IsNaN(x) {
		return -1
	}
	n := 0
	for _, b := range co.Bounds[t] {
		if x > b {
			n++
		}
	}
	if t == estimate.TargetCPU {
		for i, b := range co.ClassBounds {
			if b > 0 && i < len(co.ClassBounds)-1 && x > b {
				n++
			}
		}
	}
	return n
}
