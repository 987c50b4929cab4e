package config

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Guardrail refuses, before it reaches any cluster, a query whose estimate
// of one target at a quantile is over a limit, for the users, groups and
// sources it matches (docs/guardrails.md):
//
//	guardrails:
//	  - name: adhoc-memory
//	    match: {group: analysts, source: "superset|redash"}
//	    target: peak_memory
//	    quantile: 0.9
//	    limit: 8GB
//	    override_tag: big-ok
//	  - {name: no-hour-long, target: elapsed, limit: 1h, dry_run: true}
//
// Every rule a query matches is checked, in order; the first that refuses
// it answers the client. A query with no estimate, or one that does not
// predict the rule's target, passes (fail open, counted).
type Guardrail struct {
	// Name labels the rule in the error, the metrics
	// (prestroid_guardrail_decisions_total{rule}), logs and the console.
	// Empty means "guardrails[i]" (its position). Unique.
	Name string `yaml:"name"`
	// Match says whose queries the rule applies to. The zero value
	// matches every query.
	Match GuardrailMatch `yaml:"match"`
	// Target is what is compared with Limit: "cpu" (CPU time),
	// "peak_memory" (peak user memory) or "elapsed" (wall-clock time from
	// creation to end; estimate.Target's labels). Required.
	Target string `yaml:"target"`
	// Quantile is the quantile of the estimate's log-normal compared with
	// Limit: 0.5 is the point estimate, 0.9 refuses also queries that are
	// only likely to be over. Zero means 0.5; otherwise in (0, 1).
	Quantile float64 `yaml:"quantile"`
	// Limit is the most the estimate may say: a duration ("30s", "2h")
	// for cpu and elapsed, a data size ("8GB", "512MB": DataSize) for
	// peak_memory. Required, positive.
	Limit string `yaml:"limit"`
	// Action is what happens to a query over the limit: "refuse" (a
	// failed query, PRESTROID_GUARDRAIL, that never reaches a cluster).
	// Empty means refuse; it is the only action (docs/guardrails.md says
	// why there is no hold).
	Action string `yaml:"action"`
	// OverrideTag, when set, is a client tag (X-Trino-Client-Tags, or
	// X-Presto-Client-Tags from a PrestoDB client) that lets a query over
	// the limit through; the error names it. Empty means the rule cannot
	// be overridden.
	OverrideTag string `yaml:"override_tag"`
	// DryRun only counts and logs the queries the rule would refuse; they
	// run. False enforces the rule.
	DryRun bool `yaml:"dry_run"`
}

// GuardrailMatch selects queries as routing rules do (rules.go): each set
// field is a regular expression (RE2) that must match the whole of its
// value, so a plain name matches itself ("alice", "alice|bob"). Empty
// means any; all set fields must match.
type GuardrailMatch struct {
	// User is matched against the query's identity (identity: header:
	// X-Trino-User; verified: the user the cluster accepted), Group
	// against the user's group (admission.group_header, else
	// admission.user_groups, else the user) and Source against
	// X-Trino-Source.
	User   string `yaml:"user"`
	Group  string `yaml:"group"`
	Source string `yaml:"source"`
}

// The actions a guardrail may take.
const GuardrailRefuse = "refuse"

// GuardrailTargets are the targets a guardrail may name: the labels of
// package estimate's Targets (config imports no project package; a test
// in proxy/guardrail checks that each parses with estimate.ParseTarget).
// The first two are times, the last a size.
var GuardrailTargets = []string{"cpu", "elapsed", "peak_memory"}

// LimitValue is the rule's limit in its target's unit: seconds for cpu
// and elapsed, bytes for peak_memory.
func (g Guardrail) LimitValue() (float64, error) {
	if !slices.Contains(GuardrailTargets, g.Target) {
		return 0, fmt.Errorf("config: unknown target %q", g.Target)
	}
	if g.Target == "peak_memory" {
		d, err := ParseDataSize(g.Limit)
		return float64(d), err
	}
	d, err := time.ParseDuration(strings.TrimSpace(g.Limit))
	if err != nil {
		return 0, fmt.Errorf("config: a %s limit is a duration (e.g. 90s, 30m, 2h): %w", g.Target, err)
	}
	return d.Seconds(), nil
}

// fillGuardrailDefaults names unnamed rules and fills quantile and action.
func (c *Config) fillGuardrailDefaults() {
	for i := range c.Guardrails {
		g := &c.Guardrails[i]
		setString(&g.Name, "guardrails["+strconv.Itoa(i)+"]")
		setFloat(&g.Quantile, DefaultGuardrailQuantile)
		setString(&g.Action, GuardrailRefuse)
	}
}

func (c *Config) validateGuardrails() error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
	}
	names := map[string]bool{}
	for i, g := range c.Guardrails {
		key := fmt.Sprintf("guardrails[%d]", i)
		if g.Name == "" || names[g.Name] {
			return bad(key+".name", strconv.Quote(g.Name), "want a unique, non-empty name")
		}
		names[g.Name] = true
		if !slices.Contains(GuardrailTargets, g.Target) {
			return bad(key+".target", strconv.Quote(g.Target), "want cpu, peak_memory or elapsed")
		}
		if !(g.Quantile > 0 && g.Quantile < 1) {
			return bad(key+".quantile", g.Quantile, "want a quantile in (0, 1), e.g. 0.5 (the point estimate) or 0.9")
		}
		v, err := g.LimitValue()
		if err != nil {
			return bad(key+".limit", strconv.Quote(g.Limit), err.Error())
		}
		if !(v > 0) {
			return bad(key+".limit", strconv.Quote(g.Limit), "must be positive")
		}
		switch g.Action {
		case GuardrailRefuse:
		case "hold":
			return bad(key+".action", strconv.Quote(g.Action),
				"hold is not an action of guardrails: a query over a limit is as large after waiting; use admission budgets to hold queries until there is room (docs/guardrails.md)")
		default:
			return bad(key+".action", strconv.Quote(g.Action), "want refuse")
		}
		if t := g.OverrideTag; t != strings.TrimSpace(t) || strings.Contains(t, ",") {
			return bad(key+".override_tag", strconv.Quote(t), "a client tag has no comma and no surrounding spaces")
		}
		for field, expr := range map[string]string{"user": g.Match.User, "group": g.Match.Group, "source": g.Match.Source} {
			if _, err := regexp.Compile(expr); err != nil {
				return bad(key+".match."+field, strconv.Quote(expr), "not a regular expression: "+err.Error())
			}
		}
	}
	return nil
}
