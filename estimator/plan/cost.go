package plan

import (
	"math"

	"github.com/prestroid/prestroid/internal/dialect"
)

// TotalCPUCost is the sum of the optimizer's cpuCost estimates over every
// node of an EXPLAIN JSON plan (unknown values skipped): Trino's own idea
// of the query's cost, in its cost units. The cascade's optimizer stage maps
// it to seconds (estimator/cascade.go).
func TotalCPUCost(planJSON []byte) (float64, error) {
	return sumEstimates(planJSON, func(e Estimate) float64 { return e.CPUCost })
}

// sumEstimates sums one field of every estimate of every node of an EXPLAIN
// JSON plan, skipping unknown (NaN, negative, +Inf) values.
func sumEstimates(planJSON []byte, field func(Estimate) float64) (float64, error) {
	p, err := ParseLimits(planJSON, Limits{Lean: true})
	if err != nil {
		return 0, err
	}
	sum := 0.0
	if p.Root != nil {
		p.Root.Walk(func(n *PlanNode) {
			for _, e := range n.Estimates {
				if c := field(e); c >= 0 && !math.IsInf(c, 1) {
					sum += c
				}
			}
		})
	}
	return sum, nil
}

// TotalRowCost is the cost the cascade's optimizer stage reads from a plan
// without cpuCost, as PrestoDB's (it estimates rows and sizes only): the
// sum of the outputRowCount estimates over every node (unknown values
// skipped), that is the rows every operator is expected to produce, scans
// included. It is a cost in rows, not in Trino's cost units: its
// calibration to seconds is learned apart from cpuCost's (the cascade keys
// it by engine). Row counts rather than sizes, because PrestoDB leaves
// totalSize unknown wherever a column's average width is (every fixed-width
// column of the tpch connector), while row counts are known from every
// scan up.
func TotalRowCost(planJSON []byte) (float64, error) {
	return sumEstimates(planJSON, func(e Estimate) float64 { return e.OutputRowCount })
}

// OptimizerCost is the plan's cost that the optimizer calibration maps to
// seconds on a coordinator of engine: Trino's summed cpuCost, or, on
// PrestoDB, whose plans carry no cpuCost, the summed row count estimates
// (TotalRowCost). The two are in different units and are calibrated apart.
func OptimizerCost(engine dialect.Engine, planJSON []byte) (float64, error) {
	if engine == dialect.Presto {
		return TotalRowCost(planJSON)
	}
	return TotalCPUCost(planJSON)
}
