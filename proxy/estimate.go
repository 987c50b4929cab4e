package proxy

import (
	"context"
	"errors"
	"math"
	"net/http"
	"time"
)

// Estimator is what the proxy needs from a cost model: the predicted CPU
// time of one statement, planned as the calling user. The proxy declares it
// and never imports the estimator; cmd/prestroid wires an implementation.
type Estimator interface {
	Estimate(ctx context.Context, q Query) (Estimate, error)
}

// Query is one statement as the client sent it. Header is a copy the
// estimator may keep; it holds the caller's identity and session
// (X-Trino-* headers, Authorization), which the EXPLAIN must carry.
type Query struct {
	SQL string
	// Header is the caller's identity and session: the request's
	// X-Trino-* headers and Authorization as callerhdr.Forward admits them,
	// hop-by-hop headers dropped (CallerHeaders in headers.go).
	Header http.Header
	// Server is the base URL of the default cluster.
	Server string
	// Planners are the base URLs of the healthy clusters an EXPLAIN may
	// run on (the estimator spreads them and bounds each), the default
	// first. Empty means Server alone.
	Planners []string
}

// ErrEstimatorBusy is what an Estimator returns (wrapped or not) when it
// could not estimate without waiting (every planner at its EXPLAIN bound):
// the query fails open at once, never queued behind EXPLAINs.
var ErrEstimatorBusy = errors.New("proxy: estimator busy")

// Source says where an estimate came from (the estimator's cascade,
// DESIGN §5.1). Its String is the label in X-Prestroid-Estimate,
// /v1/estimate, the feedback record and the metrics.
type Source uint8

const (
	SourceNone          Source = iota // no estimate
	SourceCheap                       // a statement cheap by nature: a constant, no EXPLAIN
	SourceHistory                     // the statement's observed CPU time, no EXPLAIN
	SourceModelResidual               // EXPLAIN + model, corrected by the shape's residual
	SourceModel                       // EXPLAIN + model (calibrated to the deployment)
	SourceOptimizer                   // EXPLAIN + Trino's cpuCost, calibrated
	SourceText                        // the SQL text and session alone, no EXPLAIN on the hot path
)

var sourceNames = [...]string{SourceNone: "none", SourceCheap: "cheap", SourceHistory: "history",
	SourceModelResidual: "model+residual", SourceModel: "model", SourceOptimizer: "optimizer", SourceText: "text"}

func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// IntervalQuantile is the lower and (1 - it) the upper quantile of the
// interval shown to clients (Estimate.Interval): an 80% interval.
const IntervalQuantile = 0.1

// Estimate is a model's answer for one statement.
type Estimate struct {
	// Estimated is false when the statement is not one the model scores
	// (SET SESSION, SHOW, transactions, ...); Reason then says why.
	Estimated bool
	Reason    string
	// CPUSeconds is the predicted CPU time.
	CPUSeconds float64
	// Model identifies the model that made the prediction.
	Model string
	// Timings of the steps.
	Explain   time.Duration
	Featurize time.Duration
	Infer     time.Duration
	// Cached is true when the estimate came from the estimate cache.
	Cached bool
	// Tables is the number of tables the plan scans and UnknownTables how
	// many of them the model never saw in training (the drift signal).
	Tables, UnknownTables int
	// Plan is the EXPLAIN JSON the estimate was made from, for the
	// feedback log; nil when unknown (e.g. a cached estimate).
	Plan []byte

	// Source is the cascade stage that made the estimate; Sigma its
	// uncertainty, the standard deviation of ln CPU seconds (a log-normal
	// whose median is CPUSeconds; 0 when none is known).
	Source Source
	Sigma  float64
	// ModelCPUSeconds is the model's own number before the cascade's
	// corrections (0 when the model did not run).
	ModelCPUSeconds float64
	// OptimizerCPUSeconds is the plan's cost mapped to seconds by the
	// deployment's optimizer calibration (0 when not known).
	OptimizerCPUSeconds float64
	// Planner is the base URL of the cluster that ran the EXPLAIN ("" when
	// none ran); ExplainSkipped is set when every planner was at its
	// EXPLAIN bound and the estimate was made without one.
	Planner        string
	ExplainSkipped bool
	// Learn is the estimator's, opaque bytes to the proxy: handed back
	// with the query's outcome (Completed.Estimate) so the estimator can
	// learn from it, also when another replica submits the queued query
	// (it travels in the saved query). Nil when there is nothing to learn.
	// It is the one field the proxy keeps from an Estimate returned with an
	// error (the query fails open, its outcome may still teach the
	// estimator).
	Learn []byte
}

// Quantile is the q-quantile (0 < q < 1) of the predicted CPU time: the
// log-normal of median CPUSeconds and log standard deviation Sigma. With no
// Sigma, or q outside (0, 1), it is CPUSeconds.
func (e Estimate) Quantile(q float64) float64 {
	if !(e.Sigma > 0) || !(q > 0 && q < 1) {
		return e.CPUSeconds
	}
	return e.CPUSeconds * math.Exp(math.Sqrt2*math.Erfinv(2*q-1)*e.Sigma)
}

// Interval is the central 80% interval of the predicted CPU time
// (IntervalQuantile and 1 − IntervalQuantile).
func (e Estimate) Interval() (lo, hi float64) {
	return e.Quantile(IntervalQuantile), e.Quantile(1 - IntervalQuantile)
}

// explained reports whether the estimate came from an EXPLAIN: its source
// says so, or an estimator that does not name sources made it (its
// timings then say what it did).
func (e Estimate) explained() bool {
	switch e.Source {
	case SourceCheap, SourceHistory, SourceText:
		return false
	}
	return !e.Cached
}
