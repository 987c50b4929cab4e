package routing

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

// Table tests of the routing policies over plain values: no server, no
// request, no clock.

var twoClasses = []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}}
var threeClasses = []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "medium", MaxCPUSeconds: 100}, {Name: "large"}}

// states builds cluster states from "name:class:healthy:load" shorthands;
// the first is the default.
func states(t *testing.T, specs ...string) []ClusterState {
	t.Helper()
	var cs []ClusterState
	for i, s := range specs {
		f := strings.Split(s, ":")
		if len(f) != 4 {
			t.Fatalf("bad spec %q", s)
		}
		load, _ := strconv.ParseFloat(f[3], 64)
		cs = append(cs, ClusterState{Name: f[0], Class: f[1], Healthy: f[2] == "up", Load: int64(load), Default: i == 0})
	}
	return cs
}

func estimated(cpu float64) (Outcome, estimate.Estimate) {
	return Estimated, estimate.Estimate{Estimated: true, CPUSeconds: cpu}
}

func TestCostPolicy(t *testing.T) {
	type tc struct {
		name     string
		policy   CostPolicy
		outcome  Outcome
		est      estimate.Estimate
		clusters []string
		want     Decision
		header   string
	}
	o, e := estimated(1)
	oBig, eBig := estimated(900)
	oMid, eMid := estimated(50)
	cases := []tc{
		{name: "a query with no estimator goes to the default cluster",
			policy: CostPolicy{Classes: twoClasses}, outcome: NoEstimator,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindNoEstimator, Cluster: "a"}, header: "no-estimator"},
		{name: "a failed estimate fails open to the default cluster",
			policy: CostPolicy{Classes: twoClasses}, outcome: EstimateFailed,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindFailOpen, Cluster: "a", Reason: ReasonEstimateFailed}, header: "fail-open: estimate failed"},
		{name: "a slow estimate fails open to the default cluster",
			policy: CostPolicy{Classes: twoClasses}, outcome: EstimateTimedOut,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindFailOpen, Cluster: "a", Reason: ReasonEstimateOverBudget}, header: "fail-open: estimate over budget"},
		{name: "a statement the model does not score goes to the default cluster with its reason",
			policy: CostPolicy{Classes: twoClasses}, outcome: NotEstimated, est: estimate.Estimate{Reason: "SET SESSION"},
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindNotEstimated, Cluster: "a", Reason: "SET SESSION"}, header: "not-estimated: SET SESSION"},
		{name: "with no classes an estimated query goes to the default cluster",
			policy: CostPolicy{}, outcome: o, est: e,
			clusters: []string{"a::up:0", "b::up:0"},
			want:     Decision{Kind: KindEstimated, Cluster: "a"}, header: "estimated"},
		{name: "the default cluster is the state marked default, not the first",
			policy: CostPolicy{}, outcome: o, est: e,
			clusters: nil, // set below
			want:     Decision{Kind: KindEstimated, Cluster: "b"}, header: "estimated"},
		{name: "a light query goes to the small class",
			policy: CostPolicy{Classes: twoClasses}, outcome: o, est: e,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "a heavy query goes to the large class",
			policy: CostPolicy{Classes: twoClasses}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "b", Class: "large"}, header: "routed: class large"},
		{name: "a query over every bound takes the last class",
			policy: CostPolicy{Classes: []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large", MaxCPUSeconds: 100}}}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "b", Class: "large"}, header: "routed: class large"},
		{name: "the least loaded cluster of the class wins",
			policy: CostPolicy{Classes: twoClasses}, outcome: o, est: e,
			clusters: []string{"a:small:up:5", "b:small:up:2", "c:small:up:3"},
			want:     Decision{Kind: KindRouted, Cluster: "b", Class: "small"}, header: "routed: class small"},
		{name: "a load tie goes to the first cluster in configuration order",
			policy: CostPolicy{Classes: twoClasses}, outcome: o, est: e,
			clusters: []string{"x:large:up:0", "a:small:up:2", "b:small:up:2"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "an unhealthy cluster is skipped even when it is idle",
			policy: CostPolicy{Classes: twoClasses}, outcome: o, est: e,
			clusters: []string{"a:small:down:0", "b:small:up:9"},
			want:     Decision{Kind: KindRouted, Cluster: "b", Class: "small"}, header: "routed: class small"},
		{name: "the larger fallback takes the next larger class with a healthy cluster",
			policy: CostPolicy{Classes: threeClasses, Fallback: FallbackLarger}, outcome: o, est: e,
			clusters: []string{"a:small:down:0", "b:medium:down:0", "c:large:up:0"},
			want:     Decision{Kind: KindFallback, Cluster: "c", Class: "small", Fallback: FallbackLarger, FallbackClass: "large"},
			header:   "fallback: no healthy small cluster; class large"},
		{name: "an empty fallback policy means larger",
			policy: CostPolicy{Classes: twoClasses}, outcome: o, est: e,
			clusters: []string{"a:small:down:0", "b:large:up:0"},
			want:     Decision{Kind: KindFallback, Cluster: "b", Class: "small", Fallback: FallbackLarger, FallbackClass: "large"},
			header:   "fallback: no healthy small cluster; class large"},
		{name: "the larger fallback never goes to a smaller class",
			policy: CostPolicy{Classes: threeClasses, Fallback: FallbackLarger}, outcome: oMid, est: eMid,
			clusters: []string{"a:small:up:0", "b:medium:down:0", "c:large:down:0"},
			want:     Decision{Kind: KindFallback, Cluster: "a", Class: "medium"},
			header:   "fallback: no healthy cluster; default"},
		{name: "the default fallback sends the query to the default cluster",
			policy: CostPolicy{Classes: twoClasses, Fallback: FallbackDefault}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:0", "b:large:down:0"},
			want:     Decision{Kind: KindFallback, Cluster: "a", Class: "large", Fallback: FallbackDefault},
			header:   "fallback: no healthy large cluster; default"},
		{name: "the any fallback takes the least loaded healthy cluster of any class",
			policy: CostPolicy{Classes: threeClasses, Fallback: FallbackAny}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:4", "b:medium:up:1", "c:large:down:0"},
			want:     Decision{Kind: KindFallback, Cluster: "b", Class: "large", Fallback: FallbackAny},
			header:   "fallback: no healthy large cluster; any"},
		{name: "the any fallback with nothing healthy goes to the default cluster",
			policy: CostPolicy{Classes: twoClasses, Fallback: FallbackAny}, outcome: o, est: e,
			clusters: []string{"a:small:down:0", "b:large:down:0"},
			want:     Decision{Kind: KindFallback, Cluster: "a", Class: "small"},
			header:   "fallback: no healthy cluster; default"},
		{name: "shadow mode serves on the default cluster and names the one it would use",
			policy: CostPolicy{Classes: twoClasses, Shadow: true}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindShadow, Cluster: "a", Class: "large", Wanted: "b"},
			header:   "shadow: would route to b"},
		{name: "shadow mode with no healthy cluster of the class says none",
			policy: CostPolicy{Classes: twoClasses, Shadow: true}, outcome: oBig, est: eBig,
			clusters: []string{"a:small:up:0", "b:large:down:0"},
			want:     Decision{Kind: KindShadow, Cluster: "a", Class: "large", Wanted: "none"},
			header:   "shadow: would route to none"},
		{name: "shadow mode does not apply to queries without an estimate",
			policy: CostPolicy{Classes: twoClasses, Shadow: true}, outcome: EstimateFailed,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindFailOpen, Cluster: "a", Reason: ReasonEstimateFailed},
			header:   "fail-open: estimate failed"},
		{name: "planners at their EXPLAIN bound fail open at once",
			policy: CostPolicy{Classes: twoClasses}, outcome: EstimateBusy,
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindFailOpen, Cluster: "a", Reason: ReasonPlannersBusy},
			header:   "fail-open: planners busy"},
		// Uncertainty-aware class choice: the quantile of the estimate, not
		// its median, picks the class (bound 10 s).
		{name: "an uncertain estimate whose median fits the small class goes large at the 0.9 quantile",
			policy: CostPolicy{Classes: twoClasses, Quantile: 0.9}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 1, Source: estimate.SourceModel}, // q90 = 5·e^1.28 = 18 s
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "b", Class: "large"}, header: "routed: class large"},
		{name: "a confident history estimate with the same median stays small at the 0.9 quantile",
			policy: CostPolicy{Classes: twoClasses, Quantile: 0.9}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 0.1, Source: estimate.SourceHistory}, // q90 = 5.7 s
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "quantile 0.5 routes the uncertain estimate on its median",
			policy: CostPolicy{Classes: twoClasses, Quantile: 0.5}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 1, Source: estimate.SourceModel},
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "no quantile set routes on the median",
			policy: CostPolicy{Classes: twoClasses}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 1, Source: estimate.SourceModel},
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "a low quantile can move a large median into the small class",
			policy: CostPolicy{Classes: twoClasses, Quantile: 0.1}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 20, Sigma: 1, Source: estimate.SourceOptimizer}, // q10 = 5.6 s
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
		{name: "an estimate without an interval is its point at any quantile",
			policy: CostPolicy{Classes: twoClasses, Quantile: 0.99}, outcome: Estimated,
			est:      estimate.Estimate{Estimated: true, CPUSeconds: 9, Source: estimate.SourceCheap},
			clusters: []string{"a:small:up:0", "b:large:up:0"},
			want:     Decision{Kind: KindRouted, Cluster: "a", Class: "small"}, header: "routed: class small"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := states(t, c.clusters...)
			if c.clusters == nil {
				cs = []ClusterState{{Name: "a", Healthy: false}, {Name: "b", Healthy: true, Default: true}}
			}
			in := Input{Outcome: c.outcome, Estimate: c.est, User: "alice", Clusters: cs}
			got := c.policy.Select(in)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Select = %+v\nwant     %+v", got, c.want)
			}
			if got.String() != c.header {
				t.Errorf("header %q, want %q", got.String(), c.header)
			}
		})
	}
}

func TestRulePolicy(t *testing.T) {
	rules := []Rule{
		{Name: "etl", ClientTags: []string{"etl"}, Class: "large"},
		{User: "dash-.*", Source: "superset", Class: "small"},
		{Group: "analysts", Class: "medium"},
	}
	rp, err := NewRulePolicy(rules, &CostPolicy{Classes: threeClasses})
	if err != nil {
		t.Fatal(err)
	}
	shadow, err := NewRulePolicy(rules, &CostPolicy{Classes: threeClasses, Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"s:small:up:0", "m:medium:up:0", "l:large:up:0"}
	type tc struct {
		name     string
		policy   *RulePolicy
		in       Input
		clusters []string
		want     Decision
		header   string
	}
	o, e := estimated(1)
	oBig, eBig := estimated(900)
	cases := []tc{
		{name: "a client tag rule sends a light query to the large class",
			policy: rp, in: Input{Outcome: o, Estimate: e, ClientTags: []string{"x", "etl"}}, clusters: all,
			want: Decision{Kind: KindRule, Cluster: "l", Class: "large", Rule: "etl"}, header: "rule: etl; class large"},
		{name: "a rule applies even when the estimate failed",
			policy: rp, in: Input{Outcome: EstimateFailed, ClientTags: []string{"etl"}}, clusters: all,
			want: Decision{Kind: KindRule, Cluster: "l", Class: "large", Rule: "etl"}, header: "rule: etl; class large"},
		{name: "a rule needs every condition: user alone is not enough",
			policy: rp, in: Input{Outcome: oBig, Estimate: eBig, User: "dash-1", Source: "cli"}, clusters: all,
			want: Decision{Kind: KindRouted, Cluster: "l", Class: "large"}, header: "routed: class large"},
		{name: "user and source patterns match the whole value",
			policy: rp, in: Input{Outcome: oBig, Estimate: eBig, User: "dash-1", Source: "superset"}, clusters: all,
			want: Decision{Kind: KindRule, Cluster: "s", Class: "small", Rule: "rules[1]"}, header: "rule: rules[1]; class small"},
		{name: "a pattern does not match a value that only contains it",
			policy: rp, in: Input{Outcome: oBig, Estimate: eBig, User: "xdash-1", Source: "superset"}, clusters: all,
			want: Decision{Kind: KindRouted, Cluster: "l", Class: "large"}, header: "routed: class large"},
		{name: "a group rule matches the user's group",
			policy: rp, in: Input{Outcome: o, Estimate: e, User: "bob", Group: "analysts"}, clusters: all,
			want: Decision{Kind: KindRule, Cluster: "m", Class: "medium", Rule: "rules[2]"}, header: "rule: rules[2]; class medium"},
		{name: "the first matching rule wins",
			policy: rp, in: Input{Outcome: o, Estimate: e, Group: "analysts", ClientTags: []string{"etl"}}, clusters: all,
			want: Decision{Kind: KindRule, Cluster: "l", Class: "large", Rule: "etl"}, header: "rule: etl; class large"},
		{name: "a query no rule matches is routed by cost",
			policy: rp, in: Input{Outcome: o, Estimate: e, User: "carol"}, clusters: all,
			want: Decision{Kind: KindRouted, Cluster: "s", Class: "small"}, header: "routed: class small"},
		{name: "a query no rule matches and with no estimate fails open as before",
			policy: rp, in: Input{Outcome: EstimateTimedOut, User: "carol"}, clusters: all,
			want: Decision{Kind: KindFailOpen, Cluster: "s", Reason: ReasonEstimateOverBudget}, header: "fail-open: estimate over budget"},
		{name: "a rule's class with no healthy cluster falls back by the cost policy",
			policy: rp, in: Input{Outcome: o, Estimate: e, Group: "analysts"}, clusters: []string{"s:small:up:0", "m:medium:down:0", "l:large:up:0"},
			want:   Decision{Kind: KindFallback, Cluster: "l", Class: "medium", Fallback: FallbackLarger, FallbackClass: "large", Rule: "rules[2]"},
			header: "fallback: no healthy medium cluster; class large; rule rules[2]"},
		{name: "a rule in shadow mode only reports",
			policy: shadow, in: Input{Outcome: o, Estimate: e, ClientTags: []string{"etl"}}, clusters: all,
			want: Decision{Kind: KindShadow, Cluster: "s", Class: "large", Wanted: "l", Rule: "etl"}, header: "shadow: would route to l; rule etl"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.in.Clusters = states(t, c.clusters...)
			got := c.policy.Select(c.in)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Select = %+v\nwant     %+v", got, c.want)
			}
			if got.String() != c.header {
				t.Errorf("header %q, want %q", got.String(), c.header)
			}
		})
	}
}

func TestNewRulePolicyRejectsBadRules(t *testing.T) {
	cost := &CostPolicy{Classes: twoClasses}
	for _, c := range []struct {
		name string
		rule Rule
		want string
	}{
		{"a rule naming an unknown class is refused", Rule{User: "a", Class: "huge"}, `rules[0]: class "huge"`},
		{"a rule with no condition is refused", Rule{Class: "small"}, "no condition"},
		{"a rule with a bad pattern is refused", Rule{Name: "r", Source: "(", Class: "small"}, "routing: rule r: bad source pattern"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := NewRulePolicy([]Rule{c.rule}, cost)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

func TestDecisionString(t *testing.T) {
	for _, c := range []struct {
		name string
		d    Decision
		want string
	}{
		{"a transaction says so", Decision{Kind: KindTransaction}, "transaction"},
		{"a queued query ends in queued", Decision{Kind: KindRouted, Class: "small", Queued: true}, "routed: class small; queued"},
		{"each failover is named in order", Decision{Kind: KindRouted, Class: "small", Failovers: []string{"a", "b"}},
			"routed: class small; failover: a unreachable; failover: b unreachable"},
		{"queued comes before failover", Decision{Kind: KindEstimated, Queued: true, Failovers: []string{"a"}},
			"estimated; queued; failover: a unreachable"},
		{"an unknown kind is named unknown", Decision{}, "unknown"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.d.String(); got != c.want {
				t.Errorf("String() = %q, want %q", got, c.want)
			}
		})
	}
}

func BenchmarkCostPolicySelect(b *testing.B) {
	p := &CostPolicy{Classes: threeClasses}
	in := Input{Outcome: Estimated, Estimate: estimate.Estimate{Estimated: true, CPUSeconds: 50}, User: "alice",
		Clusters: []ClusterState{{Name: "s", Class: "small", Healthy: true, Default: true},
			{Name: "m1", Class: "medium", Healthy: true, Load: 3}, {Name: "m2", Class: "medium", Healthy: true, Load: 1},
			{Name: "l", Class: "large", Healthy: true}}}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Select(in); d.Cluster != "m2" {
			b.Fatal(d)
		}
	}
}

func BenchmarkRulePolicySelect(b *testing.B) {
	p, err := NewRulePolicy([]Rule{{User: "etl-.*", Class: "large"}, {ClientTags: []string{"etl"}, Class: "large"}},
		&CostPolicy{Classes: threeClasses})
	if err != nil {
		b.Fatal(err)
	}
	in := Input{Outcome: Estimated, Estimate: estimate.Estimate{Estimated: true, CPUSeconds: 1}, User: "alice", ClientTags: []string{"a", "b"},
		Clusters: []ClusterState{{Name: "s", Class: "small", Healthy: true, Default: true}, {Name: "l", Class: "large", Healthy: true}}}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Select(in); d.Cluster != "s" {
			b.Fatal(d)
		}
	}
}
