package routing

import (
	"math"
	"reflect"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

// Classes on peak memory and elapsed time as well as CPU: ClassFor and
// what the cost policy makes of it.

const gib = 1 << 30

// memClasses bound CPU and memory: small holds 10s and 4 GiB, medium 100s
// and 32 GiB, large any CPU and 128 GiB.
var memClasses = []CostClass{
	{Name: "small", MaxCPUSeconds: 10, MaxPeakMemory: 4 * gib},
	{Name: "medium", MaxCPUSeconds: 100, MaxPeakMemory: 32 * gib},
	{Name: "large", MaxPeakMemory: 128 * gib},
}

func withTargets(cpu float64, mem, elapsed estimate.Quantity) estimate.Estimate {
	return estimate.Estimate{Estimated: true, CPUSeconds: cpu, PeakMemory: mem, Elapsed: elapsed}
}

func TestClassFor(t *testing.T) {
	timeClasses := []CostClass{{Name: "fast", MaxCPUSeconds: 10, MaxElapsed: 5}, {Name: "slow", MaxElapsed: 600}}
	cases := []struct {
		name    string
		classes []CostClass
		e       estimate.Estimate
		q       float64
		want    string
		over    []estimate.Target
	}{
		{name: "a CPU-only estimate is placed by its CPU alone",
			classes: memClasses, e: withTargets(50, estimate.Quantity{}, estimate.Quantity{}), want: "medium"},
		{name: "small CPU and small memory stay in the small class",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: gib}, estimate.Quantity{}), want: "small"},
		{name: "small CPU but more memory than the small class holds goes to the medium class",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: 8 * gib}, estimate.Quantity{}), want: "medium"},
		{name: "memory decides even when CPU would fit a smaller class",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: 100 * gib}, estimate.Quantity{}), want: "large"},
		{name: "CPU decides when memory would fit a smaller class",
			classes: memClasses, e: withTargets(500, estimate.Quantity{Median: gib}, estimate.Quantity{}), want: "large"},
		{name: "memory over every class's bound goes to the largest class, flagged",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: 200 * gib}, estimate.Quantity{}),
			want: "large", over: []estimate.Target{estimate.TargetMemory}},
		{name: "memory within the bound at the median but over it at the class quantile moves up",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: 3 * gib, Sigma: 1}, estimate.Quantity{}), q: 0.9, want: "medium"},
		{name: "at the median the same estimate stays small",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: 3 * gib, Sigma: 1}, estimate.Quantity{}), q: 0.5, want: "small"},
		{name: "a class that does not bound memory holds any memory",
			classes: []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large", MaxPeakMemory: gib}},
			e:       withTargets(1, estimate.Quantity{Median: 100 * gib}, estimate.Quantity{}), want: "small"},
		{name: "memory over the only bounded class is not over every class when another is unbounded",
			classes: []CostClass{{Name: "small", MaxCPUSeconds: 10, MaxPeakMemory: gib}, {Name: "large"}},
			e:       withTargets(1, estimate.Quantity{Median: 100 * gib}, estimate.Quantity{}), want: "large"},
		{name: "elapsed time bounds a class like memory",
			classes: timeClasses, e: withTargets(1, estimate.Quantity{}, estimate.Quantity{Median: 30}), want: "slow"},
		{name: "elapsed time within the fast class's bound stays fast",
			classes: timeClasses, e: withTargets(1, estimate.Quantity{}, estimate.Quantity{Median: 2}), want: "fast"},
		{name: "elapsed time over every class's bound is flagged",
			classes: timeClasses, e: withTargets(1, estimate.Quantity{}, estimate.Quantity{Median: 3600}),
			want: "slow", over: []estimate.Target{estimate.TargetElapsed}},
		{name: "both flags when memory and time are over every bound",
			classes: []CostClass{{Name: "only", MaxPeakMemory: gib, MaxElapsed: 60}},
			e:       withTargets(1, estimate.Quantity{Median: 2 * gib}, estimate.Quantity{Median: 120}),
			want:    "only", over: []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed}},
		{name: "CPU over every bound goes to the largest class unflagged, as before",
			classes: []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large", MaxCPUSeconds: 100}},
			e:       withTargets(1000, estimate.Quantity{}, estimate.Quantity{}), want: "large"},
		{name: "an infinite memory median is not a prediction and does not constrain",
			classes: memClasses, e: withTargets(1, estimate.Quantity{Median: math.Inf(1)}, estimate.Quantity{}), want: "small"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			i, over := ClassFor(c.classes, c.e, c.q)
			if i < 0 || c.classes[i].Name != c.want || !reflect.DeepEqual(over, c.over) {
				got := "none"
				if i >= 0 {
					got = c.classes[i].Name
				}
				t.Errorf("class %s over %v, want %s over %v", got, over, c.want, c.over)
			}
		})
	}
	if i, over := ClassFor(nil, withTargets(1, estimate.Quantity{}, estimate.Quantity{}), 0.9); i != -1 || over != nil {
		t.Errorf("no classes: %d %v", i, over)
	}
}

// ClassFor places CPU-only estimates by CPU alone (the first class whose
// CPU bound holds the class quantile): memory and time bounds change nothing.
func TestClassForCPUOnlyIgnoresOtherBounds(t *testing.T) {
	bounds := []float64{0.1, 1, 10, 100, 0}
	var classes []CostClass
	for _, b := range bounds {
		classes = append(classes, CostClass{Name: "c", MaxCPUSeconds: b, MaxPeakMemory: gib})
	}
	for _, cpu := range []float64{0, 0.05, 0.1, 0.5, 1, 9.99, 10, 50, 100, 1e6} {
		for _, sigma := range []float64{0, 0.5, 2} {
			e := estimate.Estimate{Estimated: true, CPUSeconds: cpu, Sigma: sigma}
			got, over := ClassFor(classes, e, 0.9)
			// The first class whose CPU bound holds the 90% quantile, else the last.
			want, q := len(bounds)-1, e.Quantile(0.9)
			for i, b := range bounds {
				if !(b > 0) || q <= b {
					want = i
					break
				}
			}
			if got != want || over != nil {
				t.Errorf("cpu %g sigma %g: class %d over %v, want %d", cpu, sigma, got, over, want)
			}
		}
	}
}

func TestCostPolicyOnMemory(t *testing.T) {
	cs := states(t, "a:small:up:0", "b:medium:up:0", "c:large:up:0")
	p := CostPolicy{Classes: memClasses, Quantile: 0.9}
	cases := []struct {
		name   string
		e      estimate.Estimate
		header string
		over   []estimate.Target
	}{
		{name: "a light query with little memory is routed small",
			e: withTargets(1, estimate.Quantity{Median: 100 << 20, Sigma: 0.3}, estimate.Quantity{}), header: "routed: class small"},
		{name: "a light query predicted to need more memory than small holds is routed medium",
			e: withTargets(1, estimate.Quantity{Median: 10 * gib, Sigma: 0.3}, estimate.Quantity{}), header: "routed: class medium"},
		{name: "a query over every class's memory is routed to the largest and flagged",
			e:      withTargets(1, estimate.Quantity{Median: 500 * gib}, estimate.Quantity{}),
			header: "routed: class large; over every class's peak_memory", over: []estimate.Target{estimate.TargetMemory}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := p.Select(Input{Outcome: Estimated, Estimate: c.e, Clusters: cs})
			if d.String() != c.header || !reflect.DeepEqual(d.Over, c.over) {
				t.Errorf("decision %q over %v, want %q over %v", d.String(), d.Over, c.header, c.over)
			}
		})
	}
	t.Run("with the large class down the flagged query falls back to the default and keeps its flag", func(t *testing.T) {
		down := states(t, "a:small:up:0", "b:medium:up:0", "c:large:down:0")
		d := p.Select(Input{Outcome: Estimated, Estimate: withTargets(1, estimate.Quantity{Median: 500 * gib}, estimate.Quantity{}), Clusters: down})
		if d.Cluster != "a" || d.String() != "fallback: no healthy cluster; default; over every class's peak_memory" {
			t.Errorf("%s on %s", d, d.Cluster)
		}
	})
	t.Run("in shadow mode the flag is still reported", func(t *testing.T) {
		sp := p
		sp.Shadow = true
		d := sp.Select(Input{Outcome: Estimated, Estimate: withTargets(1, estimate.Quantity{Median: 500 * gib}, estimate.Quantity{}), Clusters: cs})
		if d.String() != "shadow: would route to c; over every class's peak_memory" {
			t.Errorf("%s", d)
		}
	})
}

// TestClassForOnCPU: an estimate of CPU alone (no memory, no elapsed
// time) is placed by its CPU against the classes' CPU bounds.
func TestClassForOnCPU(t *testing.T) {
	small, medium, unbounded := []float64{1, 10}, []float64{1, 10, 0}, []float64{0}
	for _, tc := range []struct {
		name   string
		bounds []float64
		cpu    float64
		want   int
	}{
		{"no classes: -1", nil, 5, -1},
		{"below the first bound: the first class", small, 0.5, 0},
		{"exactly on a bound: the class it bounds", small, 1, 0},
		{"just above a bound: the next class", small, 1.0000001, 1},
		{"exactly on the last bound: the last class", small, 10, 1},
		{"above every bound: the last class takes it", small, 11, 1},
		{"above every bound with an unbounded last class: that class", medium, 11, 2},
		{"on a bound below an unbounded class: the class it bounds", medium, 10, 1},
		{"+Inf: the last class", medium, math.Inf(1), 2},
		{"zero CPU: the first class", small, 0, 0},
		{"negative CPU: the first class", small, -1, 0},
		{"NaN CPU: the last class, not a small one on a guess", small, math.NaN(), 1},
		{"NaN CPU with an unbounded last class: that class", medium, math.NaN(), 2},
		{"one unbounded class holds everything", unbounded, 1e9, 0},
		{"one unbounded class holds NaN", unbounded, math.NaN(), 0},
		{"a negative bound is unbounded", []float64{-1}, 5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var classes []CostClass
			for _, b := range tc.bounds {
				classes = append(classes, CostClass{MaxCPUSeconds: b})
			}
			got, over := ClassFor(classes, estimate.Estimate{Estimated: true, CPUSeconds: tc.cpu}, 0)
			if got != tc.want || over != nil {
				t.Errorf("ClassFor(%v, %g s) = %d, %v; want %d", tc.bounds, tc.cpu, got, over, tc.want)
			}
		})
	}
}
