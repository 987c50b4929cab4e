package guardrail

import "github.com/prestroid/prestroid/estimate"

// Bound is one limit an estimate is compared with: the estimator's
// cascade may stop at a cheap stage only when its estimate of Target is
// clearly on one side of Value, so that the plan is fetched for a query a
// guardrail could refuse.
type Bound struct {
	Target estimate.Target
	// Value is the limit in Target's unit (seconds or bytes).
	Value float64
	// Quantile is the quantile of the estimate the guardrail compares
	// with Value (0.5: the point estimate).
	Quantile float64
}

// Bounds are the (target, limit) pairs of rules that refuse or count
// (dry-run rules included: their counts are only as good as the
// estimate), once per distinct pair, in rule order.
func Bounds(rules []Rule) []Bound {
	var out []Bound
	seen := map[Bound]bool{}
	for _, r := range rules {
		b := Bound{Target: r.Target, Value: r.Limit, Quantile: quantileOf(r.Quantile)}
		if !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}
