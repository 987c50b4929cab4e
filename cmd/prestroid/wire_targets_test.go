package main

import (
	"context"
	"math"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/protocol"
)

// A completed query teaches the history its CPU time, peak memory and
// elapsed time: two FINISHED runs later the history stage serves all
// three, no EXPLAIN (no planner answers here). A final page whose figures
// were not rolled up teaches nothing; a figure of 0 teaches nothing of
// its target.
func TestRecordTeachesEveryTarget(t *testing.T) {
	const sql = "SELECT count(*) FROM orders WHERE o_orderkey = 7"
	h := http.Header{"X-Trino-User": {"alice"}, "X-Trino-Catalog": {"tpch"}, "X-Trino-Schema": {"tiny"}}
	for _, tc := range []struct {
		name         string
		stats        []protocol.PageStats
		served       bool
		mem, elapsed float64
	}{
		{"all three figures", []protocol.PageStats{
			{CPUTimeMillis: 8000, PeakMemoryBytes: 2 << 30, ElapsedTimeMillis: 3000},
			{CPUTimeMillis: 8000, PeakMemoryBytes: 2 << 30, ElapsedTimeMillis: 3000}}, true, 2 << 30, 3},
		{"no memory figure", []protocol.PageStats{
			{CPUTimeMillis: 8000, ElapsedTimeMillis: 3000}, {CPUTimeMillis: 8000, ElapsedTimeMillis: 3000}}, true, 0, 3},
		{"a final page not rolled up teaches nothing", []protocol.PageStats{
			{CPUTimeMillis: 8000, PeakMemoryBytes: 2 << 30, ElapsedTimeMillis: 3000},
			{PeakMemoryBytes: 2 << 30, ElapsedTimeMillis: 3000, TotalSplits: 4, CompletedSplits: 4}}, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := estimator.NewService(nil, estimator.ServiceOptions{Workers: 1, History: history.NewMemory(100),
				Cascade: estimator.CascadeOptions{MinCount: 2, MaxSpread: 0.5, Alpha: 0.2, Shrink: 1, RepeatSigma: 0.25}})
			defer svc.Close()
			exact, shape := estimator.HistoryKeys(sql, h)
			learn := estimator.MarshalBasis(&estimator.Basis{Exact: exact, Shape: shape, LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.NaN()})
			for _, st := range tc.stats {
				estimatorAdapter{svc}.Record(proxy.Completed{State: "FINISHED", Estimate: estimate.Estimate{Learn: learn}, Stats: st})
			}
			svc.Flush()
			if want := map[bool]uint64{true: 2, false: 1}[tc.served]; svc.HistoryStats().Observed != want {
				t.Fatalf("%d completions learned; want %d", svc.HistoryStats().Observed, want)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e, err := svc.EstimateOn(ctx, []string{"http://127.0.0.1:1"}, sql, h)
			if !tc.served {
				if err == nil && e.Source == estimate.SourceHistory {
					t.Fatalf("served %+v from one run", e)
				}
				return
			}
			near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }
			if err != nil || e.Source != estimate.SourceHistory || !near(e.CPUSeconds, 8) || !near(e.PeakMemory.Median, tc.mem) || !near(e.Elapsed.Median, tc.elapsed) {
				t.Fatalf("got %+v %v; want the history's 8 s, %g bytes, %g s", e, err, tc.mem, tc.elapsed)
			}
		})
	}
}

// estimator.decision_bounds reach the cascade in seconds and bytes.
func TestDecisionBoundsReachTheCascade(t *testing.T) {
	e := config.Estimator{Explain: "when-uncertain", DecisionBounds: config.DecisionBounds{
		CPU:        []config.Duration{config.Duration(5 * time.Minute), config.Duration(30 * time.Second)},
		PeakMemory: []config.DataSize{4 << 30},
		Elapsed:    []config.Duration{config.Duration(time.Minute)},
	}}
	co := cascadeOptions(e, config.Routing{Classes: []config.CostClass{{Name: "small", MaxCPUSeconds: 1}, {Name: "large"}}, ClassQuantile: 0.9}, nil)
	if !slices.Equal(co.Bounds[estimate.TargetCPU], []float64{30, 300}) || !slices.Equal(co.Bounds[estimate.TargetMemory], []float64{4 << 30}) ||
		!slices.Equal(co.Bounds[estimate.TargetElapsed], []float64{60}) || !slices.Equal(co.ClassBounds, []float64{1, 0}) {
		t.Fatalf("bounds %v, class bounds %v", co.Bounds, co.ClassBounds)
	}
	// A guardrail's limit is a bound too: a statement it could refuse gets its plan.
	g := []config.Guardrail{{Name: "big", Target: "peak_memory", Limit: "8GB"}, {Name: "slow", Target: "cpu", Limit: "10m"}}
	co = cascadeOptions(e, config.Routing{}, g)
	if !slices.Equal(co.Bounds[estimate.TargetMemory], []float64{4 << 30, 8 << 30}) || !slices.Equal(co.Bounds[estimate.TargetCPU], []float64{30, 300, 600}) {
		t.Fatalf("with guardrails: bounds %v", co.Bounds)
	}
	// So are the classes' memory and elapsed bounds, the last class's too.
	co = cascadeOptions(config.Estimator{}, config.Routing{Classes: []config.CostClass{
		{Name: "small", MaxCPUSeconds: 1, MaxPeakMemory: 1 << 30, MaxElapsed: config.Duration(10 * time.Second)},
		{Name: "large", MaxPeakMemory: 64 << 30}}}, nil)
	if !slices.Equal(co.Bounds[estimate.TargetMemory], []float64{1 << 30, 64 << 30}) || !slices.Equal(co.Bounds[estimate.TargetElapsed], []float64{10}) ||
		co.Bounds[estimate.TargetCPU] != nil {
		t.Fatalf("class bounds per target: %v", co.Bounds)
	}
	if co := cascadeOptions(config.Estimator{Explain: "always"}, config.Routing{}, nil); co.Bounds != nil {
		t.Fatalf("no decision bounds configured: %v; want none", co.Bounds)
	}
}
