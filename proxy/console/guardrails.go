package console

import (
	"github.com/prestroid/prestroid/proxy/guardrail"
)

// The guardrails view: the configured rules and the queries they refused
// (or, in dry run, would have), newest first, from the guard's own ring
// (refused queries never reach a cluster, so the decisions ring never
// sees them).

type guardrailsView struct {
	// Rules are the configured guardrails, in order; empty when none.
	Rules []ruleView `json:"rules"`
	// Total is the number of refusals and dry-run hits since the process
	// started; Events the most recent of them, newest first.
	Total  uint64            `json:"total"`
	Events []guardrail.Event `json:"events"`
}

type ruleView struct {
	Name        string  `json:"name"`
	User        string  `json:"user,omitempty"`
	Group       string  `json:"group,omitempty"`
	Source      string  `json:"source,omitempty"`
	Target      string  `json:"target"`
	Quantile    float64 `json:"quantile"`
	Limit       float64 `json:"limit"` // in the target's unit: seconds or bytes
	LimitText   string  `json:"limit_text"`
	OverrideTag string  `json:"override_tag,omitempty"`
	DryRun      bool    `json:"dry_run"`
}

func guardrails(g *guardrail.Guard, limit int) guardrailsView {
	out := guardrailsView{Rules: []ruleView{}, Events: []guardrail.Event{}}
	if g == nil {
		return out
	}
	for _, r := range g.Rules() {
		q := r.Quantile
		if !(q > 0 && q < 1) {
			q = 0.5
		}
		out.Rules = append(out.Rules, ruleView{Name: r.Name, User: r.User, Group: r.Group, Source: r.Source,
			Target: r.Target.String(), Quantile: q, Limit: r.Limit, LimitText: guardrail.Format(r.Target, r.Limit),
			OverrideTag: r.OverrideTag, DryRun: r.DryRun})
	}
	out.Events, out.Total = g.Recent().Snapshot(limit)
	for i := range out.Events {
		out.Events[i].Estimate = finite(out.Events[i].Estimate)
	}
	return out
}
