package admission

import (
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestIDs(t *testing.T) {
	a, b := NewID(), NewID()
	if a == b {
		t.Fatal("two ids alike")
	}
	if d := time.Since(IDTime(a)); d < 0 || d > time.Minute {
		t.Errorf("IDTime(%s) is %v ago", a, d)
	}
	if !IDTime("junk").IsZero() {
		t.Error("a time read from junk")
	}
}

func TestGroupOf(t *testing.T) {
	o := &Options{GroupHeader: "X-Team", UserGroups: map[string]string{"alice": "data"}}
	hdr := func(v string) Header {
		var h fasthttp.RequestHeader
		if v != "" {
			h.Set("X-Team", v)
		}
		return &h
	}
	for _, tc := range []struct {
		name         string
		o            *Options
		user, header string
		want         string
	}{
		{"the header wins", o, "alice", "ops", "ops"},
		{"else the mapping", o, "alice", "", "data"},
		{"else the user is their own group", o, "bob", "", "bob"},
		{"no admission: the user", nil, "bob", "ops", "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.GroupOf(tc.user, hdr(tc.header)); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
