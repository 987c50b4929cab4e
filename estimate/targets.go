package estimate

import (
	"math"
	"strconv"
	"strings"
)

// Target names one quantity the estimator predicts for a statement: its
// CPU time (the one every stage gives), its peak memory and its elapsed
// (wall-clock) time. Their String is the label in configuration, metrics,
// the feedback record and the bundle's manifest: the labels are a format.
type Target uint8

const (
	// TargetCPU is the CPU time in seconds (Trino's cpuTimeMillis, summed
	// over every task): Estimate.CPUSeconds and Estimate.Sigma.
	TargetCPU Target = iota
	// TargetMemory is the peak user memory in bytes (Trino's
	// peakMemoryBytes, the figure query.max-memory limits):
	// Estimate.PeakMemory.
	TargetMemory
	// TargetElapsed is the elapsed time in seconds from creation to end
	// (Trino's elapsedTimeMillis, queueing included): Estimate.Elapsed.
	TargetElapsed
)

// Targets lists every target in order.
var Targets = [...]Target{TargetCPU, TargetMemory, TargetElapsed}

var targetNames = [...]string{TargetCPU: "cpu", TargetMemory: "peak_memory", TargetElapsed: "elapsed"}

// String is the target's label; "unknown" for a value no constant names.
func (t Target) String() string {
	if int(t) < len(targetNames) {
		return targetNames[t]
	}
	return "unknown"
}

// Unit is the unit of the target's Quantity: "seconds" or "bytes".
func (t Target) Unit() string {
	if t == TargetMemory {
		return "bytes"
	}
	return "seconds"
}

// ParseTarget is the Target whose String is s.
func ParseTarget(s string) (Target, bool) {
	for i, n := range targetNames {
		if n == s {
			return Target(i), true
		}
	}
	return 0, false
}

// Quantity is the prediction of one target: the median of a log-normal
// whose log standard deviation is Sigma, in the target's unit. A zero
// Median is no prediction (the stage that answered does not predict the
// target); a zero Sigma is a point.
type Quantity struct {
	Median float64 `json:",omitempty"`
	Sigma  float64 `json:",omitempty"`
}

// Known reports whether the quantity is a prediction.
func (q Quantity) Known() bool { return q.Median > 0 && !math.IsInf(q.Median, 0) }

// Quantile is the p-quantile of the quantity (the median outside (0, 1)
// and for a point), as Estimate.Quantile is for the CPU time.
func (q Quantity) Quantile(p float64) float64 {
	if !(q.Sigma > 0) || !(p > 0 && p < 1) {
		return q.Median
	}
	return q.Median * math.Exp(NormalQuantile(p)*q.Sigma)
}

// Interval is the central 80% interval of the quantity.
func (q Quantity) Interval() (lo, hi float64) {
	return q.Quantile(IntervalQuantile), q.Quantile(1 - IntervalQuantile)
}

// Of is the estimate's prediction of target t: for TargetCPU the
// CPUSeconds and Sigma (known when Estimated, zero CPU included: a cheap
// statement's constant is a prediction); the zero Quantity for a target
// the estimate does not predict.
func (e Estimate) Of(t Target) Quantity {
	switch t {
	case TargetCPU:
		return Quantity{Median: e.CPUSeconds, Sigma: e.Sigma}
	case TargetMemory:
		return e.PeakMemory
	case TargetElapsed:
		return e.Elapsed
	}
	return Quantity{}
}

// Set sets the estimate's prediction of target t.
func (e *Estimate) Set(t Target, q Quantity) {
	switch t {
	case TargetCPU:
		e.CPUSeconds, e.Sigma = q.Median, q.Sigma
	case TargetMemory:
		e.PeakMemory = q
	case TargetElapsed:
		e.Elapsed = q
	}
}

// Actual is what a statement cost when it ran, per target: the labels the
// estimator learns from (Trino's final statistics: cpuTimeMillis,
// peakMemoryBytes, elapsedTimeMillis). A value that is not positive is
// not known (Memory, Elapsed) — CPU may be 0 for a tiny statement.
type Actual struct {
	CPUSeconds      float64
	PeakMemoryBytes float64
	ElapsedSeconds  float64
}

// Of is the actual value of target t.
func (a Actual) Of(t Target) float64 {
	switch t {
	case TargetCPU:
		return a.CPUSeconds
	case TargetMemory:
		return a.PeakMemoryBytes
	case TargetElapsed:
		return a.ElapsedSeconds
	}
	return 0
}

// TrinoDataSize formats bytes in Trino's data size syntax (io.airlift.units
// DataSize: an integer and one of B kB MB GB TB PB), rounded up to whole
// units of the largest unit that keeps three significant digits, e.g.
// 1.5 GiB is "1536MB". Both Trino and PrestoDB parse it.
func TrinoDataSize(bytes float64) string {
	if math.IsNaN(bytes) || bytes < 0 {
		bytes = 0
	}
	units := [...]string{"B", "kB", "MB", "GB", "TB", "PB"}
	u := 0
	for u < len(units)-1 && bytes >= 1000*1024 {
		bytes /= 1024
		u++
	}
	return strconv.FormatFloat(math.Ceil(bytes), 'f', 0, 64) + units[u]
}

// ResourceEstimate is the value of X-Trino-Resource-Estimate (and of
// PrestoDB's X-Presto-Resource-Estimate) for the estimate: the median of
// each target it predicts, "EXECUTION_TIME=…, CPU_TIME=…, PEAK_MEMORY=…"
// with CPU_TIME always present and the other two only when known. Trino's
// resource groups select on these (selectors' resourceEstimate ranges).
func (e Estimate) ResourceEstimate() string {
	var b strings.Builder
	if q := e.Elapsed; q.Known() {
		b.WriteString("EXECUTION_TIME=")
		b.WriteString(TrinoDuration(q.Median))
		b.WriteString(", ")
	}
	b.WriteString("CPU_TIME=")
	b.WriteString(TrinoDuration(e.CPUSeconds))
	if q := e.PeakMemory; q.Known() {
		b.WriteString(", PEAK_MEMORY=")
		b.WriteString(TrinoDataSize(q.Median))
	}
	return b.String()
}
