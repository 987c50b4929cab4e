// Package metrics is the proxy's Prometheus metrics: a Set of typed
// counters and histograms the server increments, the gauges read at scrape
// time through the small State interface the server implements, the
// estimator's figures (estimate.Stats), and the handler that serves GET
// /metrics. The metric names are a format (docs/operations.md lists them):
// dashboards and alerts depend on them.
package metrics
