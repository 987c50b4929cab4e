package estimate

import (
	"encoding/json"
	"testing"
	"time"
)

func TestTrinoDuration(t *testing.T) {
	for in, want := range map[float64]string{0: "0ms", 0.0004: "1ms", 0.25: "250ms", 1: "1s", 89.2: "90s", 600: "10m", 5400: "90m", -1: "0ms"} {
		if got := TrinoDuration(in); got != want {
			t.Errorf("TrinoDuration(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestAppendHeader(t *testing.T) {
	for _, tc := range []struct {
		e    Estimate
		want string
	}{
		{Estimate{CPUSeconds: 1.25, Sigma: 0.05, Source: SourceHistory, ExplainSkipped: true}, "history; cpu=1.25; lo=1.172; hi=1.333; explain-skipped"},
		{Estimate{CPUSeconds: 2, Source: SourceModelResidual, Cached: true}, "model+residual; cpu=2; lo=2; hi=2; cached"},
		{Estimate{CPUSeconds: 2, ModelCPUSeconds: 0.5, Source: SourceModel}, "model; cpu=2; lo=2; hi=2; model=0.5"},
		{Estimate{CPUSeconds: 2, ModelCPUSeconds: 0.5, OptimizerCPUSeconds: 7, Source: SourceModel}, "model; cpu=2; lo=2; hi=2; model=0.5; optimizer=7"},
		{Estimate{CPUSeconds: 2, ModelCPUSeconds: 0.5, OptimizerCPUSeconds: 7, TextCPUSeconds: 1.5, Source: SourceModel}, "model; cpu=2; lo=2; hi=2; model=0.5; optimizer=7; text=1.5"},
	} {
		if got := string(tc.e.AppendHeader([]byte("x: "))); got != "x: "+tc.want {
			t.Errorf("X-Prestroid-Estimate %q, want %q", got, tc.want)
		}
	}
}

// The JSON view's keys are a format (/v1/estimate, prestroid estimate
// --json): a not-estimated answer has no CPU time, an estimated one all of it.
func TestJSONKeys(t *testing.T) {
	keys := func(e Estimate) map[string]any {
		b, err := json.Marshal(NewJSON(e))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := keys(Estimate{Estimated: true, CPUSeconds: 90, Sigma: 0.5, Source: SourceModel, Model: "m", Cached: true,
		Explain: 1500 * time.Microsecond, Featurize: 20 * time.Microsecond, Infer: 30 * time.Microsecond, ExplainSkipped: true})
	for k, want := range map[string]any{"estimated": true, "cpu_seconds": 90.0, "cpu_time": "90s", "model": "m", "explain_ms": 1.5,
		"featurize_us": 20.0, "infer_us": 30.0, "cached": true, "source": "model", "sigma": 0.5, "explain_skipped": true} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	for _, k := range []string{"lo_seconds", "hi_seconds"} {
		if _, ok := m[k].(float64); !ok {
			t.Errorf("%s missing: %v", k, m)
		}
	}
	m = keys(Estimate{Reason: "SET SESSION"})
	if m["estimated"] != false || m["reason"] != "SET SESSION" || m["cpu_seconds"] != 0.0 {
		t.Errorf("not estimated: %v", m)
	}
	for _, k := range []string{"cpu_time", "source", "lo_seconds", "hi_seconds", "sigma", "error"} {
		if _, ok := m[k]; ok {
			t.Errorf("%s written when not estimated: %v", k, m)
		}
	}
}
