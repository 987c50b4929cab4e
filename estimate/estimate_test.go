package estimate

import (
	"encoding/json"
	"math"
	"testing"
)

func TestSourceLabels(t *testing.T) {
	// The labels are a format: headers, /v1/estimate, feedback records and
	// metrics carry them.
	for _, tc := range []struct {
		s    Source
		want string
	}{
		{SourceNone, "none"}, {SourceCheap, "cheap"}, {SourceHistory, "history"},
		{SourceModelResidual, "model+residual"}, {SourceModel, "model"}, {SourceOptimizer, "optimizer"},
		{SourceText, "text"}, {SourceText + 1, "unknown"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("Source(%d) = %q, want %q", tc.s, got, tc.want)
		}
	}
	var zero Source
	if zero != SourceNone {
		t.Error("the zero Source is not SourceNone")
	}
}

func TestNormalQuantile(t *testing.T) {
	for _, tc := range []struct {
		name string
		q    float64
		want float64
	}{
		{"the median is 0", 0.5, 0},
		{"the 90% quantile", 0.9, 1.2815515655446004},
		{"the 10% quantile mirrors it", 0.1, -1.2815515655446004},
		{"the 97.5% quantile", 0.975, 1.959963984540054},
		{"0 is −Inf", 0, math.Inf(-1)},
		{"1 is +Inf", 1, math.Inf(1)},
		{"outside [0, 1] is NaN", 1.5, math.NaN()},
		{"NaN is NaN", math.NaN(), math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := NormalQuantile(tc.q)
			if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && !(got == tc.want || math.Abs(got-tc.want) < 1e-9)) {
				t.Errorf("NormalQuantile(%g) = %g, want %g", tc.q, got, tc.want)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	uncertain := Estimate{CPUSeconds: 10, Sigma: 0.5}
	for _, tc := range []struct {
		name string
		e    Estimate
		q    float64
		want float64
	}{
		{"the median is CPUSeconds", uncertain, 0.5, 10},
		{"the 90% quantile of a log-normal", uncertain, 0.9, 10 * math.Exp(1.2815515655446004*0.5)},
		{"the 10% quantile of a log-normal", uncertain, 0.1, 10 * math.Exp(-1.2815515655446004*0.5)},
		{"a zero quantile is the median", uncertain, 0, 10},
		{"a quantile of 1 is the median", uncertain, 1, 10},
		{"a negative quantile is the median", uncertain, -1, 10},
		{"a NaN quantile is the median", uncertain, math.NaN(), 10},
		{"an estimate without Sigma is a point", Estimate{CPUSeconds: 3}, 0.9, 3},
		{"a NaN Sigma is no Sigma", Estimate{CPUSeconds: 3, Sigma: math.NaN()}, 0.9, 3},
		{"no estimate is 0 at any quantile", Estimate{}, 0.9, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.Quantile(tc.q); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("%+v.Quantile(%g) = %g, want %g", tc.e, tc.q, got, tc.want)
			}
		})
	}
}

func TestInterval(t *testing.T) {
	for _, tc := range []struct {
		name   string
		e      Estimate
		lo, hi float64
	}{
		{"the central 80% of a log-normal", Estimate{CPUSeconds: 10, Sigma: 0.5},
			10 * math.Exp(-1.2815515655446004*0.5), 10 * math.Exp(1.2815515655446004*0.5)},
		{"a point is its own interval", Estimate{CPUSeconds: 2}, 2, 2},
		{"a cheap zero is [0, 0]", Estimate{Estimated: true, Source: SourceCheap}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lo, hi := tc.e.Interval()
			if math.Abs(lo-tc.lo) > 1e-9 || math.Abs(hi-tc.hi) > 1e-9 {
				t.Errorf("interval [%g, %g], want [%g, %g]", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestExplained(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Estimate
		want bool
	}{
		{"the model explained", Estimate{Estimated: true, Source: SourceModel}, true},
		{"the optimizer explained", Estimate{Estimated: true, Source: SourceOptimizer}, true},
		{"a cached model estimate did not", Estimate{Estimated: true, Source: SourceModel, Cached: true}, false},
		{"cheap did not", Estimate{Estimated: true, Source: SourceCheap}, false},
		{"history did not", Estimate{Estimated: true, Source: SourceHistory}, false},
		{"text did not", Estimate{Estimated: true, Source: SourceText}, false},
		{"an estimator that names no source did", Estimate{Estimated: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.e.Explained(); got != tc.want {
				t.Errorf("Explained() = %v, want %v", got, tc.want)
			}
		})
	}
}

// The proxy saves an Estimate as JSON in a queued query that a replica of
// another version may submit: the keys are the Go field names, and the
// fields only the estimator fills are left out when zero.
func TestEstimateJSONKeys(t *testing.T) {
	b, err := json.Marshal(Estimate{Estimated: true, CPUSeconds: 2.5, Source: SourceModel, Learn: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Estimated", "Reason", "CPUSeconds", "Sigma", "Source", "Model", "ModelCPUSeconds",
		"OptimizerCPUSeconds", "Explain", "Featurize", "Infer", "Cached", "Planner", "ExplainSkipped", "Tables",
		"UnknownTables", "Plan", "Learn"} {
		if _, ok := m[k]; !ok {
			t.Errorf("key %s missing: %s", k, b)
		}
	}
	for _, k := range []string{"Statement", "Normalized", "Untrained", "ExplainQueryID"} {
		if _, ok := m[k]; ok {
			t.Errorf("zero %s written: %s", k, b)
		}
	}
	if m["Source"] != float64(SourceModel) {
		t.Errorf("Source %v, want the number %d", m["Source"], SourceModel)
	}
}

func TestResourceEstimate(t *testing.T) {
	e := Estimate{Estimated: true, CPUSeconds: 2.5}
	if got := e.ResourceEstimate(); got != "CPU_TIME=3s" {
		t.Errorf("cpu only: %q", got)
	}
	e.PeakMemory = Quantity{Median: 1.5 * 1024 * 1024 * 1024, Sigma: 0.5}
	e.Elapsed = Quantity{Median: 0.25}
	if got, want := e.ResourceEstimate(), "EXECUTION_TIME=250ms, CPU_TIME=3s, PEAK_MEMORY=1536MB"; got != want {
		t.Errorf("three targets: %q, want %q", got, want)
	}
	for _, c := range []struct {
		b    float64
		want string
	}{{0, "0B"}, {999, "999B"}, {1000 * 1024, "1000kB"}, {1000*1024 + 1, "1001kB"}, {5e12, "4657GB"}, {-1, "0B"}} {
		if got := TrinoDataSize(c.b); got != c.want {
			t.Errorf("TrinoDataSize(%v) = %q, want %q", c.b, got, c.want)
		}
	}
	if q := e.Of(TargetMemory); q != e.PeakMemory {
		t.Errorf("Of(memory) = %+v", q)
	}
	var f Estimate
	f.Set(TargetCPU, Quantity{Median: 4, Sigma: 0.3})
	if f.CPUSeconds != 4 || f.Sigma != 0.3 {
		t.Errorf("Set(cpu): %+v", f)
	}
	if lo, hi := e.PeakMemory.Interval(); !(lo < e.PeakMemory.Median && hi > e.PeakMemory.Median) {
		t.Errorf("interval %v %v", lo, hi)
	}
	for _, tg := range Targets {
		if p, ok := ParseTarget(tg.String()); !ok || p != tg {
			t.Errorf("ParseTarget(%s)", tg)
		}
	}
}
