package estimate

import "strconv"

// The views of an estimate the proxy shows its callers: JSON (POST
// /v1/estimate and `prestroid estimate --json`), the X-Prestroid-Estimate
// header (AppendHeader: on the proxy's own answers and on Trino Gateway's
// routing answers) and the CPU time in Trino's duration syntax
// (TrinoDuration: X-Trino-Resource-Estimate). All three are formats: their
// field names and text never change.

// JSON is the answer of POST /v1/estimate.
type JSON struct {
	Estimated   bool    `json:"estimated"`
	Reason      string  `json:"reason,omitempty"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUTime     string  `json:"cpu_time,omitempty"` // Trino duration, as in X-Trino-Resource-Estimate
	Model       string  `json:"model,omitempty"`
	ExplainMS   float64 `json:"explain_ms"`
	FeaturizeUS int64   `json:"featurize_us"`
	InferUS     int64   `json:"infer_us"`
	Cached      bool    `json:"cached"`
	// Source is the cascade stage that made the estimate; LoSeconds and
	// HiSeconds the central 80% interval, Sigma its log spread.
	Source         string  `json:"source,omitempty"`
	LoSeconds      float64 `json:"lo_seconds,omitempty"`
	HiSeconds      float64 `json:"hi_seconds,omitempty"`
	Sigma          float64 `json:"sigma,omitempty"`
	ExplainSkipped bool    `json:"explain_skipped,omitempty"`
	// PeakMemoryBytes and ElapsedSeconds are the other targets' medians
	// (0: not predicted), with their 80% intervals; ResourceEstimate is
	// the X-Trino-Resource-Estimate value sent to the cluster.
	PeakMemoryBytes  float64 `json:"peak_memory_bytes,omitempty"`
	PeakMemoryLo     float64 `json:"peak_memory_lo_bytes,omitempty"`
	PeakMemoryHi     float64 `json:"peak_memory_hi_bytes,omitempty"`
	ElapsedSeconds   float64 `json:"elapsed_seconds,omitempty"`
	ElapsedLoSeconds float64 `json:"elapsed_lo_seconds,omitempty"`
	ElapsedHiSeconds float64 `json:"elapsed_hi_seconds,omitempty"`
	ResourceEstimate string  `json:"resource_estimate,omitempty"`
	Error            string  `json:"error,omitempty"`
}

// NewJSON renders an estimate as POST /v1/estimate does.
func NewJSON(e Estimate) JSON {
	out := JSON{Estimated: e.Estimated, Reason: e.Reason, Model: e.Model, Cached: e.Cached,
		ExplainMS: float64(e.Explain.Microseconds()) / 1000, FeaturizeUS: e.Featurize.Microseconds(), InferUS: e.Infer.Microseconds()}
	if e.Estimated {
		out.CPUSeconds = e.CPUSeconds
		out.CPUTime = TrinoDuration(e.CPUSeconds)
		out.Source, out.Sigma, out.ExplainSkipped = e.Source.String(), e.Sigma, e.ExplainSkipped
		out.LoSeconds, out.HiSeconds = e.Interval()
		if q := e.PeakMemory; q.Known() {
			out.PeakMemoryBytes = q.Median
			out.PeakMemoryLo, out.PeakMemoryHi = q.Interval()
		}
		if q := e.Elapsed; q.Known() {
			out.ElapsedSeconds = q.Median
			out.ElapsedLoSeconds, out.ElapsedHiSeconds = q.Interval()
		}
		out.ResourceEstimate = e.ResourceEstimate()
	}
	return out
}

// AppendHeader appends the X-Prestroid-Estimate header's value to b: the
// source, the point estimate and the central 80% interval in CPU seconds,
// the model's own number before the cascade's corrections when the model
// ran, the calibrated optimizer's and the text stage's when known, the
// predicted peak memory (bytes) and elapsed time (seconds) with their
// central 80% intervals when known, and "explain-skipped" when the EXPLAIN
// bound was reached, e.g.
//
//	history; cpu=1.25; lo=1.16; hi=1.34
//	model+residual; cpu=0.3; lo=0.08; hi=1.1; model=0.12; mem=5.2e+07; mem_lo=2e+07; mem_hi=1.4e+08; elapsed=0.9; elapsed_lo=0.5; elapsed_hi=1.6
func (e Estimate) AppendHeader(b []byte) []byte {
	lo, hi := e.Interval()
	b = append(b, e.Source.String()...)
	b = append(b, "; cpu="...)
	b = strconv.AppendFloat(b, e.CPUSeconds, 'g', 4, 64)
	b = append(b, "; lo="...)
	b = strconv.AppendFloat(b, lo, 'g', 4, 64)
	b = append(b, "; hi="...)
	b = strconv.AppendFloat(b, hi, 'g', 4, 64)
	if e.ModelCPUSeconds > 0 {
		b = append(b, "; model="...)
		b = strconv.AppendFloat(b, e.ModelCPUSeconds, 'g', 4, 64)
	}
	if e.OptimizerCPUSeconds > 0 {
		b = append(b, "; optimizer="...)
		b = strconv.AppendFloat(b, e.OptimizerCPUSeconds, 'g', 4, 64)
	}
	if e.TextCPUSeconds > 0 {
		b = append(b, "; text="...)
		b = strconv.AppendFloat(b, e.TextCPUSeconds, 'g', 4, 64)
	}
	b = appendQuantity(b, "mem", e.PeakMemory)
	b = appendQuantity(b, "elapsed", e.Elapsed)
	if e.ExplainSkipped {
		b = append(b, "; explain-skipped"...)
	}
	if e.Cached {
		b = append(b, "; cached"...)
	}
	return b
}

// appendQuantity appends "; NAME=median; NAME_lo=lo; NAME_hi=hi" for a
// known quantity q (its central 80% interval), nothing otherwise.
func appendQuantity(b []byte, name string, q Quantity) []byte {
	if !q.Known() {
		return b
	}
	lo, hi := q.Interval()
	for _, f := range [...]struct {
		suffix string
		v      float64
	}{{"=", q.Median}, {"_lo=", lo}, {"_hi=", hi}} {
		b = append(append(append(b, "; "...), name...), f.suffix...)
		b = strconv.AppendFloat(b, f.v, 'g', 4, 64)
	}
	return b
}
