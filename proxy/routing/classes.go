package routing

import "github.com/prestroid/prestroid/estimate"

// CostClass is a band of predicted cost; clusters serve one class.
// Classes are checked in order: a query belongs to the first class that
// holds it (ClassFor): its CPU time within MaxCPUSeconds, and its peak
// memory and elapsed time within MaxPeakMemory and MaxElapsed where the
// estimate predicts them. A bound that is not positive is unbounded.
type CostClass struct {
	Name          string
	MaxCPUSeconds float64
	// MaxPeakMemory bounds the predicted peak memory in bytes: what the
	// class's clusters can hold (routing.classes[].max_peak_memory).
	MaxPeakMemory float64
	// MaxElapsed bounds the predicted elapsed time in seconds
	// (routing.classes[].max_elapsed).
	MaxElapsed float64
}

// Bound is the class's upper bound on target t, in the target's unit; not
// positive means unbounded.
func (c CostClass) Bound(t estimate.Target) float64 {
	switch t {
	case estimate.TargetCPU:
		return c.MaxCPUSeconds
	case estimate.TargetMemory:
		return c.MaxPeakMemory
	case estimate.TargetElapsed:
		return c.MaxElapsed
	}
	return 0
}

// ClassFor is the index of the class that holds estimate e at quantile q
// (estimate.Quantity.Quantile; zero means the median), and the targets
// other than CPU that e is predicted over every class's bound on (nil
// when none: the usual case).
//
// A class holds e when the q-quantile of each target it bounds is within
// the bound. The CPU time always counts (an estimate's CPU is a
// prediction, zero included; NaN fits only an unbounded class: an
// estimate that says nothing is not sent to a small class on a guess); peak memory and elapsed time count only where e
// predicts them (Quantity.Known), so a single-target estimate is routed
// on its CPU alone. When no class holds e, the last class (the largest)
// takes it. A target over every class's bound (every class bounds it, and
// all are below the prediction) is reported: a query predicted over the
// memory any cluster can hold is flagged, not refused (the guardrails
// refuse; routing places). CPU over every bound is not reported: the
// largest class takes the long queries, as it always has.
// -1 when there are no classes.
func ClassFor(classes []CostClass, e estimate.Estimate, q float64) (int, []estimate.Target) {
	if len(classes) == 0 {
		return -1, nil
	}
	var vals [len(estimate.Targets)]float64
	var known [len(estimate.Targets)]bool
	for _, t := range estimate.Targets {
		qt := e.Of(t)
		known[t] = t == estimate.TargetCPU || qt.Known()
		if t == estimate.TargetCPU {
			vals[t] = e.Quantile(q)
		} else {
			vals[t] = qt.Quantile(q)
		}
	}
	fits := func(c CostClass, t estimate.Target) bool {
		b := c.Bound(t)
		return !known[t] || !(b > 0) || vals[t] <= b
	}
	ci := len(classes) - 1
	for i, c := range classes {
		if fits(c, estimate.TargetCPU) && fits(c, estimate.TargetMemory) && fits(c, estimate.TargetElapsed) {
			ci = i
			break
		}
	}
	var over []estimate.Target
	for _, t := range [...]estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		all := known[t]
		for _, c := range classes {
			if !all {
				break
			}
			all = !fits(c, t)
		}
		if all {
			over = append(over, t)
		}
	}
	return ci, over
}
