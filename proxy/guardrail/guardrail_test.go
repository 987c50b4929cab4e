package guardrail

import (
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
)

func mustNew(t *testing.T, rules ...Rule) *Guard {
	t.Helper()
	g, err := New(rules, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// cpu is an estimated statement of median m CPU seconds and log sigma s.
func cpu(m, s float64) estimate.Estimate {
	return estimate.Estimate{Estimated: true, CPUSeconds: m, Sigma: s, Source: estimate.SourceModel}
}

func TestCheck(t *testing.T) {
	const gib = 1 << 30
	withMem := cpu(1, 0)
	withMem.PeakMemory = estimate.Quantity{Median: 4 * gib, Sigma: 0.5}
	withElapsed := cpu(1, 0)
	withElapsed.Elapsed = estimate.Quantity{Median: 100}
	cases := []struct {
		name string
		rule Rule
		in   Input
		want Outcome // of the rule (Pass: nothing counted)
	}{
		{"a CPU estimate over the limit is refused",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 10}, Input{Estimate: cpu(20, 0)}, Refused},
		{"a CPU estimate at the limit passes",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 20}, Input{Estimate: cpu(20, 0)}, Pass},
		{"the median under the limit passes at quantile 0.5",
			Rule{Name: "r", Target: estimate.TargetCPU, Quantile: 0.5, Limit: 10}, Input{Estimate: cpu(5, 1)}, Pass},
		{"the same estimate is refused at quantile 0.9 (5·e^1.28 ≈ 18 s)",
			Rule{Name: "r", Target: estimate.TargetCPU, Quantile: 0.9, Limit: 10}, Input{Estimate: cpu(5, 1)}, Refused},
		{"a cheap statement's zero CPU is a prediction under any limit",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 0.001}, Input{Estimate: cpu(0, 0)}, Pass},
		{"peak memory over the limit at quantile 0.9 is refused",
			Rule{Name: "r", Target: estimate.TargetMemory, Quantile: 0.9, Limit: 6 * gib}, Input{Estimate: withMem}, Refused},
		{"peak memory's median under the limit passes",
			Rule{Name: "r", Target: estimate.TargetMemory, Limit: 6 * gib}, Input{Estimate: withMem}, Pass},
		{"a target the estimate does not predict fails open",
			Rule{Name: "r", Target: estimate.TargetMemory, Limit: 1}, Input{Estimate: cpu(100, 0)}, FailOpen},
		{"elapsed over the limit is refused",
			Rule{Name: "r", Target: estimate.TargetElapsed, Limit: 60}, Input{Estimate: withElapsed}, Refused},
		{"a statement not estimated fails open",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 1}, Input{Estimate: estimate.Estimate{Reason: "SET SESSION"}}, FailOpen},
		{"a failed estimate (the zero Estimate) fails open",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 1}, Input{}, FailOpen},
		{"a NaN estimate fails open",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 1}, Input{Estimate: cpu(math.NaN(), 0)}, FailOpen},
		{"the override tag lets a query over the limit through",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 10, OverrideTag: "big-ok"}, Input{Estimate: cpu(20, 0), ClientTags: []string{"etl", "big-ok"}}, Override},
		{"another tag does not override",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 10, OverrideTag: "big-ok"}, Input{Estimate: cpu(20, 0), ClientTags: []string{"big-ok2"}}, Refused},
		{"a dry-run rule counts and lets through",
			Rule{Name: "r", Target: estimate.TargetCPU, Limit: 10, DryRun: true}, Input{Estimate: cpu(20, 0)}, DryRun},
		{"a user the pattern does not match is not checked",
			Rule{Name: "r", User: "ana|bob", Target: estimate.TargetCPU, Limit: 10}, Input{User: "alice", Estimate: cpu(20, 0)}, Pass},
		{"the pattern must match the whole user",
			Rule{Name: "r", User: "al", Target: estimate.TargetCPU, Limit: 10}, Input{User: "alice", Estimate: cpu(20, 0)}, Pass},
		{"a user the pattern matches is checked",
			Rule{Name: "r", User: "ana|alice", Target: estimate.TargetCPU, Limit: 10}, Input{User: "alice", Estimate: cpu(20, 0)}, Refused},
		{"group and source must both match",
			Rule{Name: "r", Group: "analysts", Source: "superset.*", Target: estimate.TargetCPU, Limit: 10},
			Input{Group: "analysts", Source: "trino-cli", Estimate: cpu(20, 0)}, Pass},
		{"group and source matching is checked",
			Rule{Name: "r", Group: "analysts", Source: "superset.*", Target: estimate.TargetCPU, Limit: 10},
			Input{Group: "analysts", Source: "superset-7", Estimate: cpu(20, 0)}, Refused},
		{"a rule that matches without an estimate fails open; one that does not match counts nothing",
			Rule{Name: "r", User: "bob", Target: estimate.TargetCPU, Limit: 10}, Input{User: "alice"}, Pass},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := mustNew(t, c.rule)
			v := g.Check(c.in, time.Now())
			wantVerdict := Pass
			if c.want == Refused {
				wantVerdict = Refused
			}
			if v.Outcome != wantVerdict {
				t.Fatalf("verdict %s, want %s", v.Outcome, wantVerdict)
			}
			for _, o := range []Outcome{Refused, DryRun, Override, FailOpen} {
				want := 0.0
				if o == c.want {
					want = 1
				}
				if got := testutil.ToFloat64(g.decisions.WithLabelValues("r", o.String())); got != want {
					t.Errorf("%s counted %v, want %v", o, got, want)
				}
			}
			_, n := g.Recent().Snapshot(10)
			if wantN := uint64(0); c.want == Refused || c.want == DryRun {
				if n != 1 {
					t.Errorf("ring holds %d events, want 1", n)
				}
			} else if n != wantN {
				t.Errorf("ring holds %d events, want 0", n)
			}
		})
	}
}

func TestCheckRulesInOrder(t *testing.T) {
	g := mustNew(t,
		Rule{Name: "shadow", Target: estimate.TargetCPU, Limit: 1, DryRun: true},
		Rule{Name: "adhoc", Target: estimate.TargetCPU, Limit: 10, OverrideTag: "ok"},
		Rule{Name: "hard", Target: estimate.TargetCPU, Limit: 15},
		Rule{Name: "after", Target: estimate.TargetCPU, Limit: 1})
	t.Run("every matching rule is counted until the first refusal, which answers", func(t *testing.T) {
		v := g.Check(Input{User: "u", Estimate: cpu(20, 0), ClientTags: []string{"ok"}}, time.Now())
		if v.Outcome != Refused || v.Rule.Name != "hard" || v.Value != 20 {
			t.Fatalf("%+v", v)
		}
		for rule, o := range map[string]Outcome{"shadow": DryRun, "adhoc": Override, "hard": Refused} {
			if testutil.ToFloat64(g.decisions.WithLabelValues(rule, o.String())) != 1 {
				t.Errorf("%s: %s not counted", rule, o)
			}
		}
		if testutil.ToFloat64(g.decisions.WithLabelValues("after", Refused.String())) != 0 {
			t.Error("a rule after the refusing one was checked")
		}
		evs, _ := g.Recent().Snapshot(10)
		if len(evs) != 2 || evs[0].Rule != "hard" || evs[0].Outcome != "refused" || evs[1].Outcome != "dry_run" {
			t.Errorf("ring %+v", evs)
		}
	})
}

func TestMessage(t *testing.T) {
	g := mustNew(t, Rule{Name: "adhoc-memory", Target: estimate.TargetMemory, Quantile: 0.9, Limit: 8 << 30, OverrideTag: "big-ok"},
		Rule{Name: "no-override", Target: estimate.TargetCPU, Limit: 0.001})
	e := cpu(2, 0)
	e.PeakMemory = estimate.Quantity{Median: 12 << 30}
	v := g.Check(Input{Estimate: e}, time.Now())
	want := `prestroid: guardrail "adhoc-memory" refused the query: its estimated peak memory at quantile 0.9 is 12GB, over the limit of 8GB; the query was not sent. ` +
		`To run it anyway, add the client tag "big-ok" (e.g. --client-tags=big-ok, or X-Trino-Client-Tags: big-ok)`
	if got := v.Message(); got != want {
		t.Errorf("message\n got %s\nwant %s", got, want)
	}
	v = g.Check(Input{Estimate: cpu(0.25, 0), ClientTags: []string{"big-ok"}}, time.Now())
	if m := v.Message(); !strings.Contains(m, `"no-override"`) || !strings.Contains(m, "CPU time at quantile 0.5 is 250ms, over the limit of 1ms") ||
		!strings.Contains(m, "no override tag") {
		t.Errorf("message %s", m)
	}
}

func TestNewRefusesBadRules(t *testing.T) {
	for name, r := range map[string][]Rule{
		"an unnamed rule":    {{Target: estimate.TargetCPU, Limit: 1}},
		"a duplicate name":   {{Name: "a", Limit: 1}, {Name: "a", Limit: 2}},
		"a zero limit":       {{Name: "a"}},
		"a bad user pattern": {{Name: "a", Limit: 1, User: "("}},
	} {
		if _, err := New(r, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestFromConfigAndBounds(t *testing.T) {
	cfg := config.Config{Guardrails: []config.Guardrail{
		{Name: "mem", Match: config.GuardrailMatch{Group: "analysts"}, Target: "peak_memory", Quantile: 0.9, Limit: "8GB", OverrideTag: "big"},
		{Target: "elapsed", Limit: "1h", DryRun: true},
		{Name: "cpu", Target: "cpu", Limit: "90s"},
		{Name: "cpu2", Target: "cpu", Limit: "1m30s"},
	}}
	cfg.FillDefaults()
	rules := FromConfig(cfg.Guardrails)
	if len(rules) != 4 || rules[0] != (Rule{Name: "mem", Group: "analysts", Target: estimate.TargetMemory, Quantile: 0.9, Limit: 8 << 30, OverrideTag: "big"}) ||
		rules[1] != (Rule{Name: "guardrails[1]", Target: estimate.TargetElapsed, Quantile: 0.5, Limit: 3600, DryRun: true}) {
		t.Fatalf("%+v", rules)
	}
	got := Bounds(rules)
	want := []Bound{{estimate.TargetMemory, 8 << 30, 0.9}, {estimate.TargetElapsed, 3600, 0.5}, {estimate.TargetCPU, 90, 0.5}}
	if len(got) != len(want) {
		t.Fatalf("bounds %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bound %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestSnippet(t *testing.T) {
	cases := map[string]string{
		"SELECT *\n  FROM t\tWHERE name = 'alice'  AND x = 1": "SELECT * FROM t WHERE name = '?' AND x = 1",
		"SELECT 'it''s'": "SELECT '?''?'",
		"  SELECT 1  ":   "SELECT 1",
	}
	for in, want := range cases {
		if got := Snippet([]byte(in)); got != want {
			t.Errorf("Snippet(%q) = %q, want %q", in, got, want)
		}
	}
	long := Snippet([]byte("SELECT " + strings.Repeat("é", 400)))
	if !strings.HasSuffix(long, "…") || len(long) > SnippetBytes+len("…")+4 {
		t.Errorf("long snippet %d bytes: %q", len(long), long)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		t    estimate.Target
		v    float64
		want string
	}{
		{estimate.TargetCPU, 0.001, "1ms"}, {estimate.TargetCPU, 90, "1m30s"}, {estimate.TargetElapsed, 1.23456, "1.235s"},
		{estimate.TargetCPU, 0.0123456, "12.346ms"}, {estimate.TargetMemory, 8 << 30, "8GB"}, {estimate.TargetMemory, 1.5 * (1 << 30), "1.5GB"}, {estimate.TargetMemory, 7775 << 20, "7.59GB"}, {estimate.TargetMemory, 100, "100B"},
	} {
		if got := Format(c.t, c.v); got != c.want {
			t.Errorf("Format(%s, %v) = %q, want %q", c.t, c.v, got, c.want)
		}
	}
}

func TestConfigTargetsAreEstimateTargets(t *testing.T) {
	if len(config.GuardrailTargets) != len(estimate.Targets) {
		t.Errorf("config names %d targets, estimate has %d", len(config.GuardrailTargets), len(estimate.Targets))
	}
	for _, name := range config.GuardrailTargets {
		tg, ok := estimate.ParseTarget(name)
		if !ok {
			t.Errorf("config's target %q is not an estimate.Target", name)
			continue
		}
		v, err := config.Guardrail{Target: name, Limit: map[bool]string{true: "2kB", false: "2s"}[tg.Unit() == "bytes"]}.LimitValue()
		if err != nil || (v != 2048 && v != 2) {
			t.Errorf("%s: limit %v, %v", name, v, err)
		}
	}
}

// FuzzSnippet: any statement's snippet is valid UTF-8 when the statement
// is, bounded, and holds no byte of a closed string literal.
func FuzzSnippet(f *testing.F) {
	for _, s := range []string{"SELECT 'a'", "SELECT 'it''s' FROM t", "x'", "\n\t 'é'  é", strings.Repeat("ab 'c' ", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		got := Snippet([]byte(sql))
		if utf8.ValidString(sql) && !utf8.ValidString(got) {
			t.Errorf("Snippet(%q) = %q: not UTF-8", sql, got)
		}
		if len(got) > SnippetBytes+len("…")+utf8.UTFMax {
			t.Errorf("Snippet(%q) is %d bytes", sql, len(got))
		}
		// A literal of the fuzzed text (quotes dropped) never shows.
		lit := strings.ReplaceAll(sql, "'", "")
		if wrapped := Snippet([]byte("SELECT x = '" + lit + "'")); wrapped != "SELECT x = '?'" {
			t.Errorf("the literal %q shows: %q", lit, wrapped)
		}
	})
}

// BenchmarkCheckPass is the cost every statement pays with guardrails
// configured: three rules, one matching, within its limit.
func BenchmarkCheckPass(b *testing.B) {
	g, err := New([]Rule{
		{Name: "a", User: "etl-.*", Target: estimate.TargetCPU, Limit: 10},
		{Name: "b", Group: "analysts", Source: "superset", Target: estimate.TargetMemory, Quantile: 0.9, Limit: 8 << 30},
		{Name: "c", Target: estimate.TargetCPU, Quantile: 0.9, Limit: 3600, OverrideTag: "big"},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	in := Input{User: "alice", Group: "analysts", Source: "trino-cli", Estimate: cpu(2, 0.8), SQL: []byte("SELECT 1")}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if g.Check(in, now).Outcome != Pass {
			b.Fatal("refused")
		}
	}
}
