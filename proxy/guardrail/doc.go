// Package guardrail refuses a query before it reaches any cluster when its
// estimate, at a stated quantile, is over a limit for its user, group or
// source (docs/guardrails.md).
//
// A Guard holds the compiled rules (config.Guardrail, mapped by FromConfig)
// and decides from plain values (Input: who sent the query, its client
// tags, its estimate) without a server: Check is a pure function of the
// rules and the input, apart from the counters it bumps. The proxy builds
// the Input after the estimate is made and, on a refusal, answers with a
// failed query (PRESTROID_GUARDRAIL) whose message Verdict.Message writes.
//
// Fail open: a query without an estimate (not estimated, the estimate
// failed or timed out) or whose estimate does not predict a rule's target
// passes every rule it matches, counted as fail_open.
//
// Every decision on a matching rule over its limit, or failing open on it,
// is counted in prestroid_guardrail_decisions_total{rule, outcome}
// (outcome: refused, dry_run, override, fail_open; rule names are the
// configuration's, so the label set is bounded). Refusals and dry-run
// hits are kept in a small ring (Recent) for the web console.
//
// Bounds lists the rules' (target, limit) pairs for the estimator: a
// cascade that stops early on a cheap estimate can ask for the plan when
// a guardrail's limit could be crossed.
package guardrail
