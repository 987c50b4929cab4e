package config

import (
	"fmt"
	"regexp"
	"strconv"
)

// RoutingRule fixes the class of the queries it matches, before cost is
// considered (what Trino Gateway users configure as routing rules):
//
//	routing:
//	  rules:
//	    - {name: etl, client_tags: [etl], class: large}
//	    - {user: "dash-.*", source: superset, class: small}
//
// A rule matches when every condition it sets holds; it must set at least
// one. Rules are tried in order and the first match wins; a query no rule
// matches is routed by its estimate.
type RoutingRule struct {
	// Name labels the rule in X-Prestroid-Decision ("rule: NAME; class
	// CLASS") and logs. Empty means "rules[i]".
	Name string `yaml:"name"`
	// User, Group and Source are regular expressions (RE2) that must match
	// the whole of X-Trino-User, the user's group (admission.group_header
	// or admission.user_groups, else the user) and X-Trino-Source, as
	// Trino's resource-group selectors do. Empty means any. X-Trino-User
	// is the caller's claim, not an authenticated identity.
	User   string `yaml:"user"`
	Group  string `yaml:"group"`
	Source string `yaml:"source"`
	// ClientTags must all be among the request's X-Trino-Client-Tags.
	// Empty means any.
	ClientTags []string `yaml:"client_tags"`
	// Class is the routing.classes name the matching queries take.
	// Required.
	Class string `yaml:"class"`
}

// validateRules checks rules against the class names.
func validateRules(rules []RoutingRule, classes map[string]bool) error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
	}
	for i, r := range rules {
		key := fmt.Sprintf("routing.rules[%d]", i)
		if !classes[r.Class] {
			return bad(key+".class", strconv.Quote(r.Class), "not a name in routing.classes")
		}
		if r.User == "" && r.Group == "" && r.Source == "" && len(r.ClientTags) == 0 {
			return bad(key, "{}", "set at least one of user, group, source, client_tags")
		}
		for field, expr := range map[string]string{"user": r.User, "group": r.Group, "source": r.Source} {
			if _, err := regexp.Compile(expr); err != nil {
				return bad(key+"."+field, strconv.Quote(expr), "not a regular expression: "+err.Error())
			}
		}
	}
	return nil
}
