package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prestroid/prestroid/internal/dialect"
)

func TestCollectEngineIsTheFlagOrTheServersVersion(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"nodeVersion":{"version":"0.296-8661b73"}}`)
	}))
	defer srv.Close()
	cases := []struct {
		name, server, engine string
		dryRun               bool
		want                 dialect.Engine
		fails                bool
	}{
		{name: "a PrestoDB version means presto", server: srv.URL, want: dialect.Presto},
		{name: "the flag is taken without asking", server: "http://127.0.0.1:1", engine: "trino", want: dialect.Trino},
		{name: "an unknown flag value fails", server: srv.URL, engine: "prestodb", fails: true},
		{name: "an unreachable server fails a run", server: "http://127.0.0.1:1", fails: true},
		{name: "an unreachable server plans a dry run as Trino", server: "http://127.0.0.1:1", dryRun: true, want: dialect.Trino},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := collectEngine(context.Background(), &collectFlags{server: c.server, engine: c.engine, dryRun: c.dryRun})
			if (err != nil) != c.fails || (!c.fails && got != c.want) {
				t.Fatalf("collectEngine = %v, %v", got, err)
			}
		})
	}
}

func TestCollectSessionFlagIsNameValuePairs(t *testing.T) {
	got, err := parseSessionFlag(" enable_dynamic_filtering=false, join_distribution_type=BROADCAST ")
	if err != nil || len(got) != 2 || got["enable_dynamic_filtering"] != "false" || got["join_distribution_type"] != "BROADCAST" {
		t.Errorf("two properties: %v, %v", got, err)
	}
	if got, err := parseSessionFlag(""); got != nil || err != nil {
		t.Errorf("empty: %v, %v; want none", got, err)
	}
	if got, err := parseSessionFlag("time_zone=America%2FNew_York"); err != nil || got["time_zone"] != "America/New_York" {
		t.Errorf("a URL-encoded value, as in X-Trino-Session: %v, %v", got, err)
	}
	for _, bad := range []string{"enable_dynamic_filtering", "=false", "a=1,,b=2", "a=", "a=1,a=2"} {
		if _, err := parseSessionFlag(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
