package plan

import "math"

// TotalCPUCost is the sum of the optimizer's cpuCost estimates over every
// node of an EXPLAIN JSON plan (unknown values skipped): Trino's own idea
// of the query's cost, in its cost units. The cascade's optimizer stage maps
// it to seconds (estimator/cascade.go).
func TotalCPUCost(planJSON []byte) (float64, error) {
	p, err := ParseLimits(planJSON, Limits{Lean: true})
	if err != nil {
		return 0, err
	}
	sum := 0.0
	if p.Root != nil {
		p.Root.Walk(func(n *PlanNode) {
			for _, e := range n.Estimates {
				if c := e.CPUCost; c >= 0 && !math.IsInf(c, 1) {
					sum += c
				}
			}
		})
	}
	return sum, nil
}
