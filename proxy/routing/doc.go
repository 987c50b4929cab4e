// Package routing decides where a new query goes, and keeps what it needs
// to know of the clusters.
//
// The policies (policy.go, rules.go) are pure functions over plain values:
// a Selector takes an Input (the estimate's Outcome, who sent the query,
// each cluster's ClusterState) and returns a Decision, whose String is the
// X-Prestroid-Decision grammar. CostPolicy picks the CostClass from the
// estimate (ClassFor, classes.go: on CPU time, and on peak memory and
// elapsed time where the class bounds and the estimate predicts them), a cluster within it (ClusterPicker,
// LeastLoaded by default) and a fallback when the class has none healthy;
// RulePolicy lets a Rule fix the class first. They see no request and no
// server, so they are table-tested without one.
//
// The monitor (health.go) keeps each cluster's Health (its last checked
// State, and the queries sent since) current: Monitor.Run probes every
// Target's /v1/info and load through a Prober, which the proxy's core
// implements over its own HTTP client; the core also marks a cluster down
// when a connection fails (Health.MarkDown) and reads Healthy and Load
// into the ClusterStates it hands a policy.
//
// It imports no other package of the proxy: the transaction stickiness,
// estimating, failover and admission around a decision stay in the core.
package routing
