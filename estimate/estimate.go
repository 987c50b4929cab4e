// Package estimate is the cost estimate of one statement: the one type the
// estimator makes and the proxy routes, admits and reports by, its Source
// labels, the log-normal quantiles of its CPU time and of its other
// targets (targets.go: peak memory, elapsed time), the q-error
// of an estimate against the actual CPU time, what the estimator reports
// of itself (Stats, stats.go: its caches, history and model), and the
// views of an estimate the proxy shows (view.go: the JSON of POST
// /v1/estimate, the X-Prestroid-Estimate header, Trino's duration syntax).
//
// It imports no package of this project, so that both sides of the
// proxy/estimator seam import it (the proxy never imports the estimator;
// cmd/prestroid wires the two).
//
// # The class quantile
//
// A class quantile is the quantile of an estimate that picks its class
// (Estimate.Quantile, then routing.ClassFor): routing.class_quantile in the
// configuration, proxy.Options.ClassQuantile and CostPolicy.Quantile,
// estimator.CascadeOptions.ClassQuantile. In code, zero means the median
// (the point estimate, CPUSeconds), as it does for Quantile. Only the
// configuration has a default: config fills an absent
// routing.class_quantile with its default (0.9) and refuses
// values outside (0, 1), so a loaded configuration never hands 0 on.
package estimate

import (
	"math"
	"time"
)

// Source says which stage of the estimator's cascade made an estimate
// (docs/design.md §5.1). Its String is the label in the X-Prestroid-Estimate
// header, /v1/estimate, the console, the feedback record and the metrics:
// the labels are a format and never change.
type Source uint8

const (
	// SourceNone (the zero value): no estimate (not estimated, or failed:
	// fail open), or an estimate from an estimator that names no stage
	// (its timings then say what it did).
	SourceNone Source = iota
	// SourceCheap: a statement cheap by nature (SHOW, DESCRIBE, queries of
	// system.* / information_schema / VALUES): a constant, no EXPLAIN.
	SourceCheap
	// SourceHistory: the statement's own observed CPU time (or, before the
	// plan or when the planners are at their EXPLAIN bound, its shape's),
	// no EXPLAIN.
	SourceHistory
	// SourceModelResidual: EXPLAIN + the model, corrected by the shape's
	// observed residual.
	SourceModelResidual
	// SourceModel: EXPLAIN + the model, calibrated to the deployment.
	SourceModel
	// SourceOptimizer: EXPLAIN + Trino's cpuCost mapped to seconds by a
	// log-linear calibration fitted on the deployment's history (the model
	// was unavailable or failed).
	SourceOptimizer
	// SourceText: the text stage: quantiles of the CPU time from the SQL
	// text and session alone, no EXPLAIN on the hot path (estimator.explain
	// when-uncertain or never); the EXPLAIN and the model run in the
	// background for the history and the feedback record.
	SourceText
)

var sourceNames = [...]string{SourceNone: "none", SourceCheap: "cheap", SourceHistory: "history",
	SourceModelResidual: "model+residual", SourceModel: "model", SourceOptimizer: "optimizer", SourceText: "text"}

// String is the source's label; "unknown" for a value no constant names.
func (s Source) String() string {
	if int(s) < len(sourceNames) {
		return sourceNames[s]
	}
	return "unknown"
}

// Estimate is the cost estimate of one statement. The estimator makes it;
// the proxy routes and admits by it, reports it (X-Prestroid-Estimate,
// /v1/estimate, the console, the feedback record) and hands it back to the
// estimator with the query's outcome (Learn).
//
// The zero value is no estimate: not estimated, no reason, SourceNone.
// Each field's zero meaning is given. The proxy saves an Estimate as JSON
// inside a queued query that another replica may submit, under the Go
// field names: renaming a field changes that format.
type Estimate struct {
	// Estimated is false when the statement gets no estimate (SET SESSION,
	// SHOW, DDL, ...: not one the model scores); Reason then says why and
	// the cost fields are zero.
	Estimated bool
	// Reason says why the statement was not estimated; "" on an estimate.
	Reason string
	// Statement is the statement's kind as the estimator classified it
	// (the estimator's plan.StatementKind label: "query", "insert",
	// "set-session", ...); "" when the estimator did not classify it.
	Statement string `json:",omitempty"`

	// CPUSeconds is the predicted CPU time in seconds: the median of a
	// log-normal whose log standard deviation is Sigma. Zero is a
	// prediction of no CPU time (a cheap statement's default constant) or,
	// with Estimated false, no prediction.
	CPUSeconds float64
	// Sigma is the estimate's uncertainty: the standard deviation of
	// ln CPU seconds around ln CPUSeconds. Zero means none is known: the
	// estimate is a point, each of its quantiles is CPUSeconds.
	Sigma float64
	// Source is the cascade stage that made the estimate (SourceNone: see
	// there).
	Source Source

	// PeakMemory is the predicted peak user memory in bytes and Elapsed
	// the predicted elapsed time in seconds (targets.go): the zero
	// Quantity when the stage that answered does not predict them (an old
	// single-target bundle, the cheap stage, a history without them).
	PeakMemory Quantity `json:",omitzero"`
	Elapsed    Quantity `json:",omitzero"`

	// Model identifies the model that made the prediction: the bundle's
	// model id ("" when no model ran: cheap, history, optimizer).
	Model string
	// Normalized is the model's raw output, in [0, 1]; 0 when the model
	// did not run.
	Normalized float32 `json:",omitempty"`
	// Untrained is set when Model is an untrained fixture (random weights)
	// whose number means nothing; false when it is trained or no model
	// ran.
	Untrained bool `json:",omitempty"`
	// ModelCPUSeconds is the model's own prediction before the cascade's
	// corrections; 0 when the model did not run.
	ModelCPUSeconds float64
	// OptimizerCPUSeconds is Trino's plan cost mapped to seconds by the
	// deployment's optimizer calibration, when an EXPLAIN ran on the hot
	// path and the calibration is fitted: what the optimizer stage would
	// have said, beside the model's number. 0 when not known.
	OptimizerCPUSeconds float64
	// TextCPUSeconds is the text stage's number (the statement and its
	// tables' sizes, with the deployment's corrections) on a statement the
	// model stage served, when the statement was not far from the text
	// model's training: a third opinion beside the model's and the
	// optimizer's. 0 when not known.
	TextCPUSeconds float64 `json:",omitempty"`

	// Explain, Featurize and Infer are how long each step took: the
	// EXPLAIN round trip, plan JSON to tensors, and inference (queued and
	// batched). Zero when the step did not run (no EXPLAIN, a cache hit).
	Explain   time.Duration
	Featurize time.Duration
	Infer     time.Duration
	// Cached is set when the estimate came from the estimate cache: no
	// EXPLAIN ran and the timings are zero.
	Cached bool
	// Planner is the base URL of the cluster that ran the EXPLAIN and
	// ExplainQueryID the EXPLAIN's query id there; "" when none ran on the
	// hot path.
	Planner        string
	ExplainQueryID string `json:",omitempty"`
	// ExplainSkipped is set when every planner was at its EXPLAIN bound
	// and the estimate was made without one.
	ExplainSkipped bool
	// Tables is the number of distinct tables the plan scans and
	// UnknownTables how many of them the model never saw in training (the
	// drift signal); 0 when no plan was featurized.
	Tables, UnknownTables int
	// Plan is the EXPLAIN JSON the estimate was made from, for the
	// feedback log; nil when unknown (no EXPLAIN ran and the plan cache
	// does not hold the statement's last one).
	Plan []byte

	// Learn is the estimator's, opaque bytes to the proxy: handed back
	// with the query's outcome (the proxy's Completed.Estimate) so the
	// estimator can learn from it, also when another replica submits the
	// queued query (it travels in the saved query). Nil when there is
	// nothing to learn. It is the one field the proxy keeps from an
	// Estimate returned with an error (the query fails open, its outcome
	// may still teach the estimator).
	Learn []byte
}

// IntervalQuantile is the lower, and 1 − IntervalQuantile the upper,
// quantile of the interval shown to clients (Estimate.Interval): an 80%
// interval.
const IntervalQuantile = 0.1

// IntervalCoverage is the share of statements the interval is to hold:
// its two tails, IntervalQuantile each.
const IntervalCoverage = 1 - 2*IntervalQuantile

// NormalQuantile is the standard normal distribution's q-quantile (the
// probit): −Inf at 0, +Inf at 1, NaN outside [0, 1].
func NormalQuantile(q float64) float64 { return math.Sqrt2 * math.Erfinv(2*q-1) }

// Quantile is the q-quantile of the predicted CPU time: the log-normal of
// median CPUSeconds and log standard deviation Sigma. A q outside (0, 1),
// the zero value included, is the median (CPUSeconds): a zero class
// quantile routes on the point estimate. An estimate without Sigma is a
// point: every quantile is CPUSeconds.
func (e Estimate) Quantile(q float64) float64 {
	if !(e.Sigma > 0) || !(q > 0 && q < 1) {
		return e.CPUSeconds
	}
	return e.CPUSeconds * math.Exp(NormalQuantile(q)*e.Sigma)
}

// Interval is the central 80% interval of the predicted CPU time: the
// IntervalQuantile and 1 − IntervalQuantile quantiles.
func (e Estimate) Interval() (lo, hi float64) {
	return e.Quantile(IntervalQuantile), e.Quantile(1 - IntervalQuantile)
}

// Explained reports whether the estimate came from an EXPLAIN on the hot
// path: no for the sources that need none (cheap, history, text) and for
// a cached estimate; otherwise yes, also for an estimator that names no
// source (SourceNone with Estimated set).
func (e Estimate) Explained() bool {
	switch e.Source {
	case SourceCheap, SourceHistory, SourceText:
		return false
	}
	return !e.Cached
}
