// Package admission holds the budgets of in-flight queries and the fair
// queue of those over budget: one Store interface (admission.go), kept in
// this process's memory (mem.go) or in Redis shared by every replica
// (redis.go, with its Lua scripts under lua/), and the per-user and
// per-group rate limits of new queries (ratelimit.go). It knows nothing of
// HTTP: the proxy enters a query, polls it and submits it
// (proxy/admission_flow.go), and reads the store's health through
// Store.Kind and Store.Down and Metrics.
package admission
