// Package plan is the first stage of the estimator's pipeline (docs/design.md §2.1):
// which statements get an EXPLAIN, the EXPLAIN itself, and the plan it
// returns.
//
//	Classify, StatementKind   which statements get an EXPLAIN, and which     classify.go
//	                          must not (SafeToExplain: CREATE TABLE AS)
//	ExplainClient.Explain     EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) as the explain.go
//	                          caller (headers by internal/callerhdr)
//	Parse, Plan, PlanNode     plan JSON → stitched plan tree; Walk            plan.go, planjson.go
//
// Errors carry the "estimator:" prefix and wrap sentinel errors
// (ErrBadPlan, ErrPlanTooLarge, ErrPlanCycle, ErrUnknownFragment, ErrNoPlan,
// ErrNotExplainable) or are typed (*TrinoError, *HTTPError). It imports no
// other estimator package.
package plan
