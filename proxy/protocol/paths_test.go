package protocol

import (
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestPaths(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	const id = "20260101_000000_00001_abcde"
	routed := s.RoutedPath("small", "/v1/statement/executing/"+id+"/ysecretslug/3")
	t.Run("a routed poll names its query", func(t *testing.T) {
		if got := PolledQueryID(routed); got != id {
			t.Errorf("PolledQueryID = %q", got)
		}
		if got := PolledQueryID("/v1/statement/executing/" + id + "/y/1"); got != "" {
			t.Errorf("an unrouted path named %q", got)
		}
	})
	t.Run("statement paths", func(t *testing.T) {
		for target, want := range map[string]string{
			"/v1/statement/queued/" + id + "/x/1":                  id,
			"/v1/statement/executing/partialCancel/" + id + "/1/x": "",
			"/v1/statement": "",
		} {
			if got := StatementQueryID(target); got != want {
				t.Errorf("StatementQueryID(%s) = %q, want %q", target, got, want)
			}
		}
	})
	t.Run("logs keep the shape, never the token or the slug", func(t *testing.T) {
		got := RedactPath(routed + "?x=1")
		if got != "/v1/statement/executing/"+id+"/…" || strings.Contains(got, "ysecretslug") {
			t.Errorf("RedactPath = %q", got)
		}
		if got := RedactPath("/v1/spooled/download/handle-secret"); strings.Contains(got, "handle-secret") {
			t.Errorf("a segment handle logged: %q", got)
		}
	})
}

func TestNotSent(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a refused dial", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
		{"no free connection", fasthttp.ErrNoFreeConns, true},
		{"a read that failed after the request went out", &net.OpError{Op: "read", Err: errors.New("reset")}, false},
		{"a timeout waiting for the answer", fasthttp.ErrTimeout, false},
	} {
		if got := NotSent(tc.err); got != tc.want {
			t.Errorf("%s: NotSent = %v", tc.name, got)
		}
	}
}
