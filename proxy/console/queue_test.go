package console

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/proxy/admission"
)

func TestHeldBy(t *testing.T) {
	o := &admission.Options{MaxQueries: 2, MaxCPUSeconds: 100, UserMaxQueries: 1, GroupMaxCPUSeconds: 10}
	for _, tc := range []struct {
		name string
		q    admission.Queued
		want []string
	}{
		{"nothing in flight holds nothing, whatever the query's size", admission.Queued{User: "u", Group: "g", CPU: 1e6}, nil},
		{"the global query budget", admission.Queued{User: "u", Group: "g", Use: [3]admission.Usage{{Queries: 2, CPU: 1}}},
			[]string{"admission.max_queries global 2/2+1"}},
		{"the user's query budget and the global CPU budget",
			admission.Queued{User: "u", Group: "g", CPU: 60, Use: [3]admission.Usage{{Queries: 1, CPU: 50}, {Queries: 1, CPU: 50}}},
			[]string{"admission.max_cpu_seconds global 50/100+60", "admission.user_max_queries user u 1/1+1"}},
		{"a scope with nothing in flight admits one", admission.Queued{User: "u", Group: "g", CPU: 60, Use: [3]admission.Usage{{Queries: 1, CPU: 1}}}, nil},
		{"the group's CPU budget", admission.Queued{User: "u", Group: "g", CPU: 6, Use: [3]admission.Usage{{Queries: 1, CPU: 5}, {}, {Queries: 1, CPU: 5}}},
			[]string{"admission.group_max_cpu_seconds group g 5/10+6"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, h := range heldBy(o, tc.q) {
				got = append(got, fmt.Sprintf("%s %s %g/%g+%g", h.Budget, h.Scope, h.InFlight, h.Limit, h.Needs))
			}
			if strings.Join(got, "; ") != strings.Join(tc.want, "; ") {
				t.Errorf("held by %q, want %q", got, tc.want)
			}
		})
	}
}
