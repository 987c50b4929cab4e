// Package gateway is Trino Gateway's external routing service (POST
// /v1/routing, routingRules.rulesType: EXTERNAL): for each new statement
// the gateway asks about, a Handler estimates it through the Estimate func
// the core supplies, picks the first RoutingGroup whose bound holds the
// estimate, and answers the group and the headers the gateway forwards to
// the cluster (X-Trino-Resource-Estimate, the class tag). Every estimate
// failure fails open: the gateway's default group takes the query.
//
// The core keeps the admin token check and the estimator (Handler.Estimate
// wraps its estimateFor, with its time budget); this package imports no
// other package of the proxy but protocol and routing (the caller's
// headers, the fail-open reasons).
package gateway
