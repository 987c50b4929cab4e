package health

import (
	"strings"
	"testing"
)

func TestReady(t *testing.T) {
	base := State{Clusters: 2, Estimator: true, Serving: true, Healthy: []string{"small"}}
	for _, tc := range []struct {
		name   string
		change func(*State)
		ready  bool
		detail string // in the checks' details
	}{
		{"one healthy cluster of two is ready", func(*State) {}, true, "1 of 2 healthy: small"},
		{"not serving yet", func(s *State) { s.Serving = false }, false, "not serving yet"},
		{"shutting down", func(s *State) { s.Stopping = true }, false, "shutting down"},
		{"no cluster checked yet", func(s *State) { s.Healthy, s.Unchecked = nil, []string{"small", "large"} }, false, "not checked yet: small,large"},
		{"every cluster down", func(s *State) { s.Healthy = nil }, false, "no healthy cluster"},
		{"a shared store that is down is reported, not required", func(s *State) { s.Store, s.StoreDown = "redis", true }, true, "redis unreachable"},
		{"no estimator is reported, not required", func(s *State) { s.Estimator = false }, true, "not estimated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := base
			tc.change(&st)
			r := Ready(st)
			if (r.Status == "ready") != tc.ready {
				t.Errorf("status %q, want ready=%v: %+v", r.Status, tc.ready, r.Checks)
			}
			var details []string
			for _, c := range r.Checks {
				details = append(details, c.Detail)
			}
			if !strings.Contains(strings.Join(details, "|"), tc.detail) {
				t.Errorf("no check says %q: %v", tc.detail, details)
			}
		})
	}
}

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		want         bool
	}{{"GET", "/healthz", true}, {"HEAD", "/readyz", true}, {"POST", "/readyz", false}, {"GET", "/readyz/x", false}} {
		if got := Is(tc.method, tc.path); got != tc.want {
			t.Errorf("Is(%s %s) = %v", tc.method, tc.path, got)
		}
	}
}
