package routing

import (
	"strings"

	"github.com/prestroid/prestroid/estimate"
)

// Selector is a routing policy. Select may read in but must not keep its
// slices past its return, and must return a Decision whose Cluster names
// one of in.Clusters. It is called concurrently.
type Selector interface {
	Select(in Input) Decision
}

// Compile-time guards: both policies are Selectors.
var (
	_ Selector = (*CostPolicy)(nil)
	_ Selector = (*RulePolicy)(nil)
)

// Fallback policies when a class has no healthy cluster.
const (
	FallbackLarger  = "larger"  // the next larger class that has a healthy cluster (default)
	FallbackDefault = "default" // the default cluster
	FallbackAny     = "any"     // the least loaded healthy cluster of any class
)

// Outcome is what became of a query's estimate.
type Outcome uint8

const (
	// NoEstimator: no estimator is configured; Input.Estimate is zero.
	NoEstimator Outcome = iota
	// Estimated: Input.Estimate holds a model estimate.
	Estimated
	// NotEstimated: the estimator does not score this statement (SET
	// SESSION, SHOW, ...); Input.Estimate.Reason says why.
	NotEstimated
	// EstimateFailed: the estimator returned an error.
	EstimateFailed
	// EstimateTimedOut: the estimate ran past its time budget.
	EstimateTimedOut
	// EstimateBusy: the estimator could not estimate without waiting
	// (the proxy's ErrEstimatorBusy: every planner at its EXPLAIN bound).
	EstimateBusy
)

// Input is everything a policy may look at for one query. It is a plain
// value: a policy may read it but not keep its slices.
type Input struct {
	Outcome  Outcome
	Estimate estimate.Estimate
	// User is the query's identity (X-Trino-User, or in identity:
	// verified mode the user the cluster accepted); Group the user's group
	// (the admission settings' GroupHeader or UserGroups, else the user);
	// Source X-Trino-Source; ClientTags the X-Trino-Client-Tags, split and
	// trimmed.
	User, Group, Source string
	ClientTags          []string
	// Clusters in configuration order.
	Clusters []ClusterState
}

// ClusterState is what a policy knows of one cluster.
type ClusterState struct {
	Name    string
	Class   string // cost class served; "" for none
	Healthy bool
	Load    int64 // running + queued queries, plus those sent since the last check
	// Default marks the cluster that plans queries and serves those not
	// routed by cost (the first healthy one in configuration order). When
	// no state is marked, the first cluster is the default.
	Default bool
}

// DecisionKind says how a query was placed. Its String is the kind label of
// prestroid_decisions_total and the start of X-Prestroid-Decision.
type DecisionKind uint8

const (
	// KindTransaction: the query belongs to a transaction and goes to the
	// cluster that started it, unestimated.
	KindTransaction DecisionKind = iota + 1
	// KindNoEstimator: no estimator; the default cluster.
	KindNoEstimator
	// KindFailOpen: the estimate failed or ran over budget (Reason says
	// which); the default cluster, unannotated.
	KindFailOpen
	// KindNotEstimated: a statement the estimator does not score (Reason
	// is the estimator's); the default cluster.
	KindNotEstimated
	// KindEstimated: estimated, but no classes are configured; the
	// default cluster.
	KindEstimated
	// KindShadow: shadow mode; the default cluster serves and Wanted names
	// the cluster the policy would have chosen ("none" when none).
	KindShadow
	// KindRouted: a healthy cluster of the query's class.
	KindRouted
	// KindFallback: the class had no healthy cluster; Fallback says where
	// the query went instead.
	KindFallback
	// KindRule: a routing rule fixed the class (Rule names it) and a
	// healthy cluster of it serves.
	KindRule
)

var kindNames = [...]string{
	KindTransaction:  "transaction",
	KindNoEstimator:  "no-estimator",
	KindFailOpen:     "fail-open",
	KindNotEstimated: "not-estimated",
	KindEstimated:    "estimated",
	KindShadow:       "shadow",
	KindRouted:       "routed",
	KindFallback:     "fallback",
	KindRule:         "rule",
}

func (k DecisionKind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "unknown"
}

// Fail-open reasons (Decision.Reason of KindFailOpen).
const (
	ReasonEstimateFailed     = "estimate failed"
	ReasonEstimateOverBudget = "estimate over budget"
	ReasonPlannersBusy       = "planners busy"
)

// Decision is where a query goes and why. String renders it for the
// X-Prestroid-Decision header; clients and tests parse that text, so its
// forms are fixed:
//
//	transaction | no-estimator | estimated
//	fail-open: estimate failed | fail-open: estimate over budget | fail-open: planners busy
//	not-estimated: REASON
//	shadow: would route to NAME
//	routed: class CLASS
//	fallback: no healthy CLASS cluster; class LARGER | default | any
//	fallback: no healthy cluster; default
//	rule: RULE; class CLASS
//
// followed by "; over every class's TARGET" for each target the estimate
// is predicted over every class's bound on (peak_memory, elapsed), then
// "; rule RULE" when a rule fixed the class of a fallback or shadow
// decision, "; queued" when the query waited for admission and
// "; failover: NAME unreachable" for each cluster that refused it.
type Decision struct {
	Kind DecisionKind
	// Cluster is the name of the cluster that serves the query.
	Cluster string
	// Class is the query's cost class; "" when none was chosen.
	Class string
	// Reason explains KindFailOpen and KindNotEstimated.
	Reason string
	// Wanted is, for KindShadow, the cluster the policy would route to
	// ("none" when it has none).
	Wanted string
	// Fallback is, for KindFallback, the policy that placed the query
	// (FallbackLarger, FallbackDefault, FallbackAny), or "" when nothing
	// healthy was left and the default cluster took it; FallbackClass is
	// the class FallbackLarger found.
	Fallback      string
	FallbackClass string
	// Rule names the routing rule that fixed Class; "" when none did.
	Rule string
	// Over are the targets (estimate.TargetMemory, TargetElapsed) the
	// estimate is predicted over every class's bound on (ClassFor): the
	// largest class took the query, which may still not fit. Nil when
	// none.
	Over []estimate.Target
	// Queued is set when the query waited in the admission queue.
	Queued bool
	// Failovers are the clusters that refused the connection, in order.
	Failovers []string
}

// String is the X-Prestroid-Decision text.
func (d Decision) String() string {
	var b strings.Builder
	b.WriteString(d.Kind.String())
	switch d.Kind {
	case KindFailOpen, KindNotEstimated:
		b.WriteString(": " + d.Reason)
	case KindShadow:
		b.WriteString(": would route to " + d.Wanted)
	case KindRouted:
		b.WriteString(": class " + d.Class)
	case KindRule:
		b.WriteString(": " + d.Rule + "; class " + d.Class)
	case KindFallback:
		switch d.Fallback {
		case FallbackLarger:
			b.WriteString(": no healthy " + d.Class + " cluster; class " + d.FallbackClass)
		case FallbackDefault, FallbackAny:
			b.WriteString(": no healthy " + d.Class + " cluster; " + d.Fallback)
		default:
			b.WriteString(": no healthy cluster; default")
		}
	}
	for _, t := range d.Over {
		b.WriteString("; over every class's " + t.String())
	}
	if d.Rule != "" && d.Kind != KindRule {
		b.WriteString("; rule " + d.Rule)
	}
	if d.Queued {
		b.WriteString("; queued")
	}
	for _, f := range d.Failovers {
		b.WriteString("; failover: " + f + " unreachable")
	}
	return b.String()
}

// ClusterPicker chooses a cluster within a class: the second step of
// routing, after the class. It returns the index into cs of a healthy
// cluster serving class (any class when class is ""), or -1.
type ClusterPicker interface {
	Pick(class string, cs []ClusterState) int
}

// LeastLoaded picks the healthy cluster with the least load; ties go to the
// first in configuration order.
type LeastLoaded struct{}

var _ ClusterPicker = LeastLoaded{}

// Pick implements ClusterPicker.
func (LeastLoaded) Pick(class string, cs []ClusterState) int {
	best := -1
	for i, c := range cs {
		if (class != "" && c.Class != class) || !c.Healthy {
			continue
		}
		if best < 0 || c.Load < cs[best].Load {
			best = i
		}
	}
	return best
}

// CostPolicy routes by predicted cost: the class from the estimate
// (ClassFor: CPU time, and peak memory and elapsed time where predicted), a cluster within the class (Picker), and when the
// class has no healthy cluster the Fallback policy. Queries without an estimate go to
// the default cluster.
type CostPolicy struct {
	// Classes in increasing order of their bounds. Empty means no
	// routing by cost: estimated queries go to the default cluster.
	Classes []CostClass
	// Fallback is FallbackLarger (also when empty), FallbackDefault or
	// FallbackAny.
	Fallback string
	// Shadow reports the decision without acting on it: the default
	// cluster serves.
	Shadow bool
	// Picker chooses within a class. Nil means LeastLoaded.
	Picker ClusterPicker
	// Quantile is the quantile of the estimate that picks the class
	// (Estimate.Quantile): 0.5 is the point estimate (the median); above
	// it, an uncertain estimate (a new shape, the optimizer's) goes to a
	// larger class than its median would, while a confident one (a
	// statement's own history, with a small Sigma) stays where its median
	// puts it. Zero means the median, as for every class quantile in code
	// (package estimate); config fills routing.class_quantile's default.
	Quantile float64
}

// Select implements Selector.
func (p *CostPolicy) Select(in Input) Decision {
	def := in.Clusters[defaultIndex(in.Clusters)].Name
	switch in.Outcome {
	case NoEstimator:
		return Decision{Kind: KindNoEstimator, Cluster: def}
	case EstimateFailed:
		return Decision{Kind: KindFailOpen, Cluster: def, Reason: ReasonEstimateFailed}
	case EstimateTimedOut:
		return Decision{Kind: KindFailOpen, Cluster: def, Reason: ReasonEstimateOverBudget}
	case EstimateBusy:
		return Decision{Kind: KindFailOpen, Cluster: def, Reason: ReasonPlannersBusy}
	case NotEstimated:
		return Decision{Kind: KindNotEstimated, Cluster: def, Reason: in.Estimate.Reason}
	}
	if len(p.Classes) == 0 {
		return Decision{Kind: KindEstimated, Cluster: def}
	}
	ci, over := ClassFor(p.Classes, in.Estimate, p.Quantile)
	d := p.place(in, ci)
	d.Over = over
	return d
}

// place puts a query of class index ci on a cluster: shadow, routed or
// fallback.
func (p *CostPolicy) place(in Input, ci int) Decision {
	cs := in.Clusters
	def := cs[defaultIndex(cs)].Name
	pick := p.Picker
	if pick == nil {
		pick = LeastLoaded{}
	}
	d := Decision{Class: p.Classes[ci].Name}
	i := pick.Pick(d.Class, cs)
	if p.Shadow {
		d.Kind, d.Cluster, d.Wanted = KindShadow, def, "none"
		if i >= 0 {
			d.Wanted = cs[i].Name
		}
		return d
	}
	if i >= 0 {
		d.Kind, d.Cluster = KindRouted, cs[i].Name
		return d
	}
	d.Kind = KindFallback
	switch p.Fallback {
	case FallbackDefault:
		d.Fallback, d.Cluster = FallbackDefault, def
	case FallbackAny:
		if j := pick.Pick("", cs); j >= 0 {
			d.Fallback, d.Cluster = FallbackAny, cs[j].Name
		}
	default:
		for k := ci + 1; k < len(p.Classes); k++ {
			if j := pick.Pick(p.Classes[k].Name, cs); j >= 0 {
				d.Fallback, d.FallbackClass, d.Cluster = FallbackLarger, p.Classes[k].Name, cs[j].Name
				break
			}
		}
	}
	if d.Cluster == "" {
		d.Fallback, d.Cluster = "", def
	}
	return d
}

// defaultIndex is the index of the state marked Default, else 0.
func defaultIndex(cs []ClusterState) int {
	for i, c := range cs {
		if c.Default {
			return i
		}
	}
	return 0
}
