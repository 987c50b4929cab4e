package callerhdr

import (
	"net/http"
	"reflect"
	"testing"
)

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

func TestCopyKeepsWhatGoesWithTheCaller(t *testing.T) {
	h := http.Header{"x-trino-user": {"alice"}, "Authorization": {"Bearer t"}, "Cookie": {"c"},
		"X-Trino-Session": {"a=1", "b=2"}, "X-Trino-Transaction-Id": {"x~y"}}
	got := Copy(h, 1)
	want := http.Header{"X-Trino-User": {"alice"}, "Authorization": {"Bearer t"}, "X-Trino-Session": {"a=1", "b=2"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Copy = %v, want %v", got, want)
	}
	got["X-Trino-Session"][0] = "changed"
	if h["X-Trino-Session"][0] != "a=1" {
		t.Error("Copy shares its value slices with the caller's headers")
	}
}
