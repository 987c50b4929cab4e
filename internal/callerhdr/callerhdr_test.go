package callerhdr

import "testing"

func TestForward(t *testing.T) {
	cases := []struct {
		name string
		want bool
	}{
		{"Authorization", true},
		{"authorization", true},
		{"X-Trino-User", true},
		{"x-trino-session", true},
		{"X-Trino-Prepared-Statement", true},
		{"X-Trino-Client-Tags", true},
		{"X-Trino-Query-Data-Encoding", false},
		{"x-trino-query-data-encoding", false},
		{"X-Trino-Transaction-Id", false},
		{"X-Trino-", false},
		{"X-Trino", false},
		{"X-Presto-User", false},
		{"Cookie", false},
		{"Proxy-Authorization", false},
		{"Connection", false},
		{"X-Forwarded-For", false},
		{"", false},
	}
	for _, c := range cases {
		if got := Forward(c.name); got != c.want {
			t.Errorf("Forward(%q) = %v, want %v", c.name, got, c.want)
		}
	}
}
