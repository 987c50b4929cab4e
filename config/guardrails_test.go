package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestGuardrails(t *testing.T) {
	t.Run("guardrails load from YAML in the documented syntax, with their defaults", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "prestroid.yaml")
		os.WriteFile(p, []byte(`clusters:
  - {name: default, url: "http://a:1"}
guardrails:
  - name: adhoc-memory
    match: {group: analysts, source: "superset|redash"}
    target: peak_memory
    quantile: 0.9
    limit: 8GB
    override_tag: big-ok
  - {target: elapsed, limit: 1h, dry_run: true}
`), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		c.FillDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		g := c.Guardrails
		if len(g) != 2 || g[0].Name != "adhoc-memory" || g[0].Match.Group != "analysts" || g[0].Match.Source != "superset|redash" ||
			g[0].Quantile != 0.9 || g[0].OverrideTag != "big-ok" || g[0].Action != GuardrailRefuse || g[0].DryRun {
			t.Errorf("first rule %+v", g[0])
		}
		if g[1].Name != "guardrails[1]" || g[1].Quantile != DefaultGuardrailQuantile || !g[1].DryRun || g[1].Action != GuardrailRefuse {
			t.Errorf("second rule %+v", g[1])
		}
		if v, _ := g[0].LimitValue(); v != 8<<30 {
			t.Errorf("8GB is %v bytes", v)
		}
		if v, _ := g[1].LimitValue(); v != 3600 {
			t.Errorf("1h is %v seconds", v)
		}
	})
	for _, tc := range []struct {
		name  string
		rule  Guardrail
		wants []string
	}{
		{"an unknown target", Guardrail{Target: "memory", Limit: "1GB"}, []string{"guardrails[0].target", `"memory"`, "peak_memory"}},
		{"a quantile of 1", Guardrail{Target: "cpu", Limit: "1s", Quantile: 1}, []string{"guardrails[0].quantile", "(0, 1)"}},
		{"a missing limit", Guardrail{Target: "cpu"}, []string{"guardrails[0].limit"}},
		{"a data size for a time target", Guardrail{Target: "cpu", Limit: "8GB"}, []string{"guardrails[0].limit", `"8GB"`, "a cpu limit is a duration"}},
		{"a duration for memory", Guardrail{Target: "peak_memory", Limit: "10s"}, []string{"guardrails[0].limit", "data size"}},
		{"a zero limit", Guardrail{Target: "elapsed", Limit: "0s"}, []string{"guardrails[0].limit", "positive"}},
		{"the hold action", Guardrail{Target: "cpu", Limit: "1s", Action: "hold"}, []string{"guardrails[0].action", "admission"}},
		{"an unknown action", Guardrail{Target: "cpu", Limit: "1s", Action: "kill"}, []string{"guardrails[0].action", "want refuse"}},
		{"an override tag with a comma", Guardrail{Target: "cpu", Limit: "1s", OverrideTag: "a,b"}, []string{"guardrails[0].override_tag"}},
		{"a bad pattern", Guardrail{Target: "cpu", Limit: "1s", Match: GuardrailMatch{User: "("}}, []string{"guardrails[0].match.user", `"("`}},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := valid()
			c.Guardrails = []Guardrail{tc.rule}
			c.FillDefaults()
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	t.Run("two rules of one name are refused", func(t *testing.T) {
		c := valid()
		c.Guardrails = []Guardrail{{Name: "a", Target: "cpu", Limit: "1s"}, {Name: "a", Target: "cpu", Limit: "2s"}}
		c.FillDefaults()
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "guardrails[1].name") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestDataSize(t *testing.T) {
	for in, want := range map[string]DataSize{
		"8GB": 8 << 30, "8gb": 8 << 30, "8GiB": 8 << 30, "512MB": 512 << 20, "1.5GB": 3 << 29, "100": 100, "100B": 100,
		"1kB": 1024, "2 TB": 2 << 40,
	} {
		got, err := ParseDataSize(in)
		if err != nil || got != want {
			t.Errorf("ParseDataSize(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseDataSize(got.String()); err != nil || back != got {
			t.Errorf("%q: String %q reads back as %v, %v", in, got.String(), back, err)
		}
	}
	for _, in := range []string{"", "GB", "8XB", "-1GB", "1e400GB", "eight"} {
		if _, err := ParseDataSize(in); err == nil {
			t.Errorf("ParseDataSize(%q) accepted", in)
		}
	}
	if s := DataSize(1536 << 20).String(); s != "1536MB" {
		t.Errorf("1.5 GiB prints %q", s)
	}
}
