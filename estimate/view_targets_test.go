package estimate

import (
	"encoding/json"
	"testing"
)

// The views of an estimate that predicts peak memory and elapsed time as
// well as CPU: the X-Prestroid-Estimate header and the JSON of POST
// /v1/estimate.
func TestViewsOfThreeTargets(t *testing.T) {
	e := Estimate{Estimated: true, CPUSeconds: 2, Source: SourceModel, ModelCPUSeconds: 2,
		PeakMemory: Quantity{Median: 5.2e7, Sigma: 0.5}, Elapsed: Quantity{Median: 0.9}}
	// The memory's interval: 5.2e7·exp(∓1.2816·0.5).
	if got, want := string(e.AppendHeader(nil)), "model; cpu=2; lo=2; hi=2; model=2; mem=5.2e+07; mem_lo=2.74e+07; mem_hi=9.869e+07; elapsed=0.9; elapsed_lo=0.9; elapsed_hi=0.9"; got != want {
		t.Errorf("X-Prestroid-Estimate %q, want %q", got, want)
	}
	b, err := json.Marshal(NewJSON(e))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	lo, hi := e.PeakMemory.Interval()
	for k, want := range map[string]any{"peak_memory_bytes": 5.2e7, "peak_memory_lo_bytes": lo, "peak_memory_hi_bytes": hi,
		"elapsed_seconds": 0.9, "elapsed_lo_seconds": 0.9, "elapsed_hi_seconds": 0.9,
		"resource_estimate": "EXECUTION_TIME=900ms, CPU_TIME=2s, PEAK_MEMORY=50782kB"} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if !(lo < 5.2e7 && hi > 5.2e7) {
		t.Errorf("memory interval [%v, %v] around 5.2e7", lo, hi)
	}
	// Without them, none of their keys is written.
	b, _ = json.Marshal(NewJSON(Estimate{Estimated: true, CPUSeconds: 2}))
	m = nil
	json.Unmarshal(b, &m)
	for _, k := range []string{"peak_memory_bytes", "peak_memory_lo_bytes", "peak_memory_hi_bytes", "elapsed_seconds", "elapsed_lo_seconds", "elapsed_hi_seconds"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s written for a CPU-only estimate: %s", k, b)
		}
	}
	if m["resource_estimate"] != "CPU_TIME=2s" {
		t.Errorf("resource_estimate %v", m["resource_estimate"])
	}
}
