package protocol

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCallerHeaders: the one rule for the headers an estimate's EXPLAIN
// carries, used by routing estimates and the estimate endpoints alike.
func TestCallerHeaders(t *testing.T) {
	var req fasthttp.Request
	h := &req.Header
	h.Set("Connection", "keep-alive, X-Trino-Hop-Named")
	h.Set("X-Trino-Hop-Named", "named in Connection: hop-by-hop")
	h.Set("Keep-Alive", "timeout=5")
	h.Set("Proxy-Authorization", "Basic cHJveHk6c2VjcmV0")
	h.Set("Te", "trailers")
	h.Set("Authorization", "Bearer caller-token")
	h.Set("X-Trino-User", "alice")
	h.Add("X-Trino-Session", "a=1")
	h.Add("X-Trino-Session", "b=2")
	h.Add("X-Trino-Prepared-Statement", "q1=SELECT+1")
	h.Add("X-Trino-Prepared-Statement", "q2=SELECT+2")
	h.Set("X-Trino-Transaction-Id", "large~tx-1")
	h.Set("X-Trino-Query-Data-Encoding", "json")
	h.Set("Cookie", "session=1")
	h.Set("User-Agent", "trino-cli")

	got := CallerHeaders(h)
	want := http.Header{
		"Authorization":              {"Bearer caller-token"},
		"X-Trino-User":               {"alice"},
		"X-Trino-Session":            {"a=1", "b=2"},
		"X-Trino-Prepared-Statement": {"q1=SELECT+1", "q2=SELECT+2"},
	}
	for _, c := range []struct{ name, header string }{
		{"a header named in Connection is dropped", "X-Trino-Hop-Named"},
		{"a hop-by-hop header is dropped", "Keep-Alive"},
		{"the proxy's own credentials are dropped", "Proxy-Authorization"},
		{"the transaction id is dropped", "X-Trino-Transaction-Id"},
		{"the spooling encoding is dropped", "X-Trino-Query-Data-Encoding"},
		{"a header that is not the caller's identity or session is dropped", "Cookie"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if v, ok := got[c.header]; ok {
				t.Errorf("%s kept: %q", c.header, v)
			}
		})
	}
	t.Run("authorization, the user and every value of repeated headers are kept in order", func(t *testing.T) {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("CallerHeaders = %v\nwant %v", got, want)
		}
	})
	t.Run("the result is a copy that outlives the request", func(t *testing.T) {
		req.Reset()
		if got.Get("X-Trino-User") != "alice" {
			t.Errorf("copy changed with the request: %v", got)
		}
	})
}
