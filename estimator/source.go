package estimator

// Source says which stage of the estimate cascade (cascade.go, DESIGN
// §5.1) produced an estimate. Its String is the label in headers, JSON,
// feedback records and metrics.
type Source uint8

const (
	// SourceNone: no estimate (not estimated, or failed: fail open).
	SourceNone Source = iota
	// SourceCheap: a statement cheap by nature (plan.Cheap): a constant,
	// no EXPLAIN.
	SourceCheap
	// SourceHistory: the statement's own observed CPU time (or, when the
	// planners are at their EXPLAIN bound, its shape's), no EXPLAIN.
	SourceHistory
	// SourceModelResidual: EXPLAIN + the model, corrected by the shape's
	// observed residual.
	SourceModelResidual
	// SourceModel: EXPLAIN + the model (with the deployment's calibration).
	SourceModel
	// SourceOptimizer: EXPLAIN + Trino's cpuCost mapped to seconds by a
	// log-linear calibration fitted on this deployment's history (the
	// model was unavailable or failed).
	SourceOptimizer
	// SourceText: the text stage (text_stage.go): quantiles of the CPU
	// time from the SQL text and session alone, no EXPLAIN on the hot path
	// (estimator.explain when-uncertain or never); the EXPLAIN and the model
	// run in the background for the history and the feedback record.
	SourceText
)

var sourceNames = [...]string{SourceNone: "none", SourceCheap: "cheap", SourceHistory: "history",
	SourceModelResidual: "model+residual", SourceModel: "model", SourceOptimizer: "optimizer", SourceText: "text"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}
