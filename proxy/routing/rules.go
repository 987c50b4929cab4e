package routing

import (
	"fmt"
	"regexp"
	"strconv"
)

// Rule fixes the class of the queries it matches, before cost is
// considered: what Trino Gateway users configure as routing rules (ETL
// tools to the large cluster, a dashboard's source to the small one).
// A rule matches when every condition it sets holds; at least one must be
// set.
type Rule struct {
	// Name labels the rule in X-Prestroid-Decision and logs. Empty means
	// "rules[i]" (its position in the list).
	Name string
	// User, Group and Source are regular expressions that must match the
	// whole of X-Trino-User, the user's group (see Input.Group) and
	// X-Trino-Source respectively, as in Trino's resource-group
	// selectors. Empty means any.
	User, Group, Source string
	// ClientTags must all be among the request's X-Trino-Client-Tags.
	// Empty means any.
	ClientTags []string
	// Class is the cost class the matching queries take. Required; one of
	// the policy's classes.
	Class string
}

// RulePolicy routes by the first matching rule, then by cost: a rule fixes
// the class (whatever the estimate says, and even when there is none), and
// the cost policy picks the cluster within it, applies its fallback and
// shadow mode. Queries no rule matches are routed by Cost alone.
type RulePolicy struct {
	cost  *CostPolicy
	rules []compiledRule
}

type compiledRule struct {
	name                string
	user, group, source *regexp.Regexp
	tags                []string
	class               int // index into cost.Classes
}

// NewRulePolicy checks and compiles rules over cost. Errors name the rule
// and the bad field.
func NewRulePolicy(rules []Rule, cost *CostPolicy) (*RulePolicy, error) {
	p := &RulePolicy{cost: cost}
	for i, r := range rules {
		cr := compiledRule{name: r.Name, tags: r.ClientTags, class: -1}
		if cr.name == "" {
			cr.name = "rules[" + strconv.Itoa(i) + "]"
		}
		for ci, c := range cost.Classes {
			if c.Name == r.Class {
				cr.class = ci
			}
		}
		if cr.class < 0 {
			return nil, fmt.Errorf("routing: rule %s: class %q is not a cost class", cr.name, r.Class)
		}
		if r.User == "" && r.Group == "" && r.Source == "" && len(r.ClientTags) == 0 {
			return nil, fmt.Errorf("routing: rule %s: no condition (set user, group, source or client_tags)", cr.name)
		}
		for _, f := range []struct {
			field, expr string
			re          **regexp.Regexp
		}{{"user", r.User, &cr.user}, {"group", r.Group, &cr.group}, {"source", r.Source, &cr.source}} {
			if f.expr == "" {
				continue
			}
			re, err := regexp.Compile(`^(?:` + f.expr + `)$`)
			if err != nil {
				return nil, fmt.Errorf("routing: rule %s: bad %s pattern: %w", cr.name, f.field, err)
			}
			*f.re = re
		}
		p.rules = append(p.rules, cr)
	}
	return p, nil
}

// Select implements Selector.
func (p *RulePolicy) Select(in Input) Decision {
	for _, r := range p.rules {
		if !r.matches(in) {
			continue
		}
		d := p.cost.place(in, r.class)
		d.Rule = r.name
		if d.Kind == KindRouted {
			d.Kind = KindRule
		}
		return d
	}
	return p.cost.Select(in)
}

func (r *compiledRule) matches(in Input) bool {
	if (r.user != nil && !r.user.MatchString(in.User)) ||
		(r.group != nil && !r.group.MatchString(in.Group)) ||
		(r.source != nil && !r.source.MatchString(in.Source)) {
		return false
	}
	for _, want := range r.tags {
		found := false
		for _, t := range in.ClientTags {
			if t == want {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
