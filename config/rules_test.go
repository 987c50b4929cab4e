package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRoutingRules(t *testing.T) {
	withClasses := func() *Config {
		c := valid()
		c.Routing.Classes = []CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}}
		return c
	}
	for _, tc := range []struct {
		name  string
		rule  RoutingRule
		wants []string
	}{
		{"a rule naming an unknown class", RoutingRule{User: "a", Class: "huge"}, []string{"routing.rules[0].class", `"huge"`}},
		{"a rule without a class", RoutingRule{User: "a"}, []string{"routing.rules[0].class"}},
		{"a rule with no condition", RoutingRule{Class: "small"}, []string{"routing.rules[0]", "at least one"}},
		{"a rule with a bad pattern", RoutingRule{Source: "(", Class: "small"}, []string{"routing.rules[0].source", `"("`}},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := withClasses()
			c.Routing.Rules = []RoutingRule{tc.rule}
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
	t.Run("rules load from YAML in the documented syntax", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "prestroid.yaml")
		os.WriteFile(p, []byte(`clusters:
  - {name: small, url: "http://a:1", class: small}
  - {name: large, url: "http://b:1", class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: 30}
    - {name: large}
  rules:
    - {name: etl, client_tags: [etl], class: large}
    - {user: "dash-.*", source: superset, class: small}
`), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		r := c.Routing.Rules
		if len(r) != 2 || r[0].Name != "etl" || len(r[0].ClientTags) != 1 || r[0].ClientTags[0] != "etl" || r[0].Class != "large" ||
			r[1].User != "dash-.*" || r[1].Source != "superset" || r[1].Class != "small" {
			t.Errorf("rules = %+v", r)
		}
	})
}
