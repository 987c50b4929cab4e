package guardrail

import (
	"fmt"
	"log/slog"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
)

// ErrorName is the Trino error name of a refusal (a USER_ERROR: the query
// as sent is over a limit its user may not cross).
const ErrorName = "PRESTROID_GUARDRAIL"

// Rule is one guardrail as plain values (config.Guardrail, checked and
// filled by config; FromConfig maps it).
type Rule struct {
	// Name labels the rule in the error, metrics, logs and the console.
	// Required, unique within a Guard.
	Name string
	// User, Group and Source are regular expressions (RE2) that must match
	// the whole of Input.User, Group and Source. Empty means any.
	User, Group, Source string
	// Target is the estimate's target compared with Limit.
	Target estimate.Target
	// Quantile is the quantile of the target's log-normal compared with
	// Limit; outside (0, 1) (zero included) it is the median.
	Quantile float64
	// Limit is the most the estimate may say, in Target's unit (seconds or
	// bytes). Must be positive.
	Limit float64
	// OverrideTag, when set, is the client tag that lets a query over the
	// limit through. Empty means the rule cannot be overridden.
	OverrideTag string
	// DryRun counts and logs what the rule would refuse and refuses
	// nothing.
	DryRun bool
}

// FromConfig maps the configuration's rules (filled and validated) onto
// Rules.
func FromConfig(gs []config.Guardrail) []Rule {
	out := make([]Rule, 0, len(gs))
	for _, g := range gs {
		t, _ := estimate.ParseTarget(g.Target) // valid: config checked it
		limit, _ := g.LimitValue()
		out = append(out, Rule{Name: g.Name, User: g.Match.User, Group: g.Match.Group, Source: g.Match.Source,
			Target: t, Quantile: g.Quantile, Limit: limit, OverrideTag: g.OverrideTag, DryRun: g.DryRun})
	}
	return out
}

// Outcome is what a rule did with a query it matched.
type Outcome uint8

const (
	// Pass: the estimate is within the limit (not counted).
	Pass Outcome = iota
	// Refused: over the limit; the query is refused.
	Refused
	// DryRun: over the limit of a dry-run rule; the query runs.
	DryRun
	// Override: over the limit, and the client sent the rule's override
	// tag; the query runs.
	Override
	// FailOpen: the query has no estimate of the rule's target (none at
	// all, failed, or the target not predicted); the query runs.
	FailOpen
)

var outcomeNames = [...]string{Pass: "pass", Refused: "refused", DryRun: "dry_run", Override: "override", FailOpen: "fail_open"}

// String is the outcome's label in the metrics and the console.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Input is what a Guard decides from: plain values the proxy read from the
// request and the estimate. Nothing of it is kept past Check: the ring
// takes copies.
type Input struct {
	// User is the query's identity, Group the user's group, Source its
	// X-Trino-Source (X-Presto-Source).
	User, Group, Source string
	// ClientTags are the request's client tags, split and trimmed.
	ClientTags []string
	// Estimate is the query's estimate; Estimated false (not estimated,
	// failed, no estimator) means none: every matching rule fails open.
	Estimate estimate.Estimate
	// SQL is the statement, for the console's snippet (Snippet): read
	// only while Check runs and only for a refusal or a dry-run hit, so
	// the proxy hands the request body itself, uncopied.
	SQL []byte
}

// Verdict is a Guard's answer for one query: Outcome Refused with the rule
// that refused it, else Pass (whatever other rules counted).
type Verdict struct {
	Outcome Outcome
	// Rule is the refusing rule (nil unless Refused).
	Rule *Rule
	// Value is the estimate of Rule.Target at Rule.Quantile.
	Value float64
}

// Message is the refusal's error message: the rule, its target, the
// estimate at the quantile against the limit, and how to override it.
func (v Verdict) Message() string {
	r := v.Rule
	if r == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "prestroid: guardrail %q refused the query: its estimated %s at quantile %s is %s, over the limit of %s; the query was not sent",
		r.Name, targetName(r.Target), strconv.FormatFloat(quantileOf(r.Quantile), 'g', -1, 64), Format(r.Target, v.Value), Format(r.Target, r.Limit))
	if r.OverrideTag != "" {
		fmt.Fprintf(&b, ". To run it anyway, add the client tag %q (e.g. --client-tags=%s, or X-Trino-Client-Tags: %s)", r.OverrideTag, r.OverrideTag, r.OverrideTag)
	} else {
		b.WriteString(". This rule has no override tag: ask the operator, or make the query smaller")
	}
	return b.String()
}

// targetName is a target as the error message names it.
func targetName(t estimate.Target) string {
	switch t {
	case estimate.TargetMemory:
		return "peak memory"
	case estimate.TargetElapsed:
		return "elapsed time"
	}
	return "CPU time"
}

// quantileOf is the quantile a rule compares: q, or the median outside (0, 1).
func quantileOf(q float64) float64 {
	if q > 0 && q < 1 {
		return q
	}
	return 0.5
}

// Format is value in t's unit as people read it: a duration ("1m30s",
// "250ms") or a data size in Trino's syntax ("8GB", "7.59GB").
func Format(t estimate.Target, value float64) string {
	if t == estimate.TargetMemory {
		return dataSize(value)
	}
	d := time.Duration(value * float64(time.Second))
	switch {
	case d >= time.Second:
		d = d.Round(time.Millisecond)
	case d >= time.Millisecond:
		d = d.Round(time.Microsecond)
	}
	return d.String()
}

// dataSize is bytes in the largest unit of Trino's data size syntax that
// keeps it at least 1, with up to three significant digits ("8GB",
// "7.59GB", "512MB", "100B"); units are 1024 times the one before.
func dataSize(bytes float64) string {
	units := [...]string{"B", "kB", "MB", "GB", "TB", "PB"}
	u := 0
	for u < len(units)-1 && bytes >= 1024 {
		bytes /= 1024
		u++
	}
	return strconv.FormatFloat(roundSig(bytes, 3), 'f', -1, 64) + units[u]
}

// roundSig rounds v to n significant digits.
func roundSig(v float64, n int) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*p) / p
}

// Guard checks queries against compiled rules. Create it with New; it is
// safe for concurrent use.
type Guard struct {
	rules     []compiled
	decisions *prometheus.CounterVec // rule, outcome
	recent    *Recent
	log       *slog.Logger
}

type compiled struct {
	Rule
	user, group, source *regexp.Regexp
}

// RecentSize is how many refusals and dry-run hits a Guard keeps for the
// console.
const RecentSize = 200

// New compiles rules; errors name the rule and the bad field. The
// decisions counter starts at zero for every rule and outcome (a
// dashboard's rate() sees the first one). log receives a line for each
// refusal, dry-run hit and override; nil means slog.Default().
func New(rules []Rule, log *slog.Logger) (*Guard, error) {
	if log == nil {
		log = slog.Default()
	}
	g := &Guard{log: log,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "prestroid_guardrail_decisions_total",
			Help: "Guardrail decisions on queries a rule matched that were over its limit (refused, dry_run: would have been, override: let through by the client tag) or had no estimate of its target (fail_open), by rule."},
			[]string{"rule", "outcome"}),
		recent: NewRecent(RecentSize),
	}
	seen := map[string]bool{}
	for _, r := range rules {
		if r.Name == "" || seen[r.Name] {
			return nil, fmt.Errorf("guardrail: rule name %q: want a unique, non-empty name", r.Name)
		}
		seen[r.Name] = true
		if !(r.Limit > 0) {
			return nil, fmt.Errorf("guardrail: rule %s: limit %v is not positive", r.Name, r.Limit)
		}
		c := compiled{Rule: r}
		for _, f := range []struct {
			field, expr string
			re          **regexp.Regexp
		}{{"user", r.User, &c.user}, {"group", r.Group, &c.group}, {"source", r.Source, &c.source}} {
			if f.expr == "" {
				continue
			}
			re, err := regexp.Compile(`^(?:` + f.expr + `)$`)
			if err != nil {
				return nil, fmt.Errorf("guardrail: rule %s: bad %s pattern: %w", r.Name, f.field, err)
			}
			*f.re = re
		}
		g.rules = append(g.rules, c)
		for _, o := range []Outcome{Refused, DryRun, Override, FailOpen} {
			g.decisions.WithLabelValues(r.Name, o.String())
		}
	}
	return g, nil
}

// Collector is the decisions counter, for the proxy's registry.
func (g *Guard) Collector() prometheus.Collector { return g.decisions }

// Recent is the ring of recent refusals and dry-run hits.
func (g *Guard) Recent() *Recent { return g.recent }

// Rules are the guard's rules, in order (copies).
func (g *Guard) Rules() []Rule {
	out := make([]Rule, len(g.rules))
	for i, c := range g.rules {
		out[i] = c.Rule
	}
	return out
}

// Check runs every rule that matches in against its estimate, in order,
// counting each rule's outcome, and returns the first refusal, else Pass.
// Rules after a refusing one are not checked. Dry-run hits and refusals
// are written to the ring (now is their time).
func (g *Guard) Check(in Input, now time.Time) Verdict {
	for i := range g.rules {
		r := &g.rules[i]
		if !r.matches(in) {
			continue
		}
		o, v := r.judge(in)
		if o == Pass {
			continue
		}
		g.decisions.WithLabelValues(r.Name, o.String()).Inc()
		if o != FailOpen {
			g.log.Info("guardrail: over the limit", "rule", r.Name, "outcome", o.String(), "user", in.User,
				"target", r.Target.String(), "estimate", Format(r.Target, v), "limit", Format(r.Target, r.Limit))
		}
		if o == Refused || o == DryRun {
			g.recent.add(Event{Time: now, Rule: r.Name, Outcome: o.String(), User: in.User, Group: in.Group, Source: in.Source,
				Target: r.Target.String(), Quantile: quantileOf(r.Quantile), Estimate: v, Limit: r.Limit,
				EstimateText: Format(r.Target, v), LimitText: Format(r.Target, r.Limit), OverrideTag: r.OverrideTag, SQL: Snippet(in.SQL)})
		}
		if o == Refused {
			return Verdict{Outcome: Refused, Rule: &r.Rule, Value: v}
		}
	}
	return Verdict{Outcome: Pass}
}

func (r *compiled) matches(in Input) bool {
	return (r.user == nil || r.user.MatchString(in.User)) &&
		(r.group == nil || r.group.MatchString(in.Group)) &&
		(r.source == nil || r.source.MatchString(in.Source))
}

// judge is the rule's outcome for a query it matches and the estimate of
// its target at its quantile.
func (r *compiled) judge(in Input) (Outcome, float64) {
	e := in.Estimate
	if !e.Estimated {
		return FailOpen, 0
	}
	q := e.Of(r.Target)
	// An estimated statement's CPU is a prediction even at zero (a cheap
	// statement's constant, estimate.Of); the other targets only when
	// predicted.
	if !q.Known() && !(r.Target == estimate.TargetCPU && q.Median == 0) {
		return FailOpen, 0
	}
	v := q.Quantile(quantileOf(r.Quantile))
	if !(v > r.Limit) { // NaN: fail open below
		if v != v {
			return FailOpen, 0
		}
		return Pass, v
	}
	if r.OverrideTag != "" && slices.Contains(in.ClientTags, r.OverrideTag) {
		return Override, v
	}
	if r.DryRun {
		return DryRun, v
	}
	return Refused, v
}
