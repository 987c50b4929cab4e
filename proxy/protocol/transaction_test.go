package protocol

import (
	"testing"

	"github.com/valyala/fasthttp"
)

func TestTransactions(t *testing.T) {
	t.Run("a started transaction is tagged with its cluster once", func(t *testing.T) {
		var h fasthttp.ResponseHeader
		h.Set("X-Trino-Started-Transaction-Id", "abc")
		TagTransaction(&h, "small")
		TagTransaction(&h, "small")
		if got := string(h.Peek("X-Trino-Started-Transaction-Id")); got != "small~abc" {
			t.Errorf("got %q", got)
		}
	})
	t.Run("the client's id names the cluster, and Trino gets its own id back", func(t *testing.T) {
		var req fasthttp.Request
		req.Header.Set("X-Trino-Transaction-Id", "small~abc")
		if c, ok := TransactionCluster(&req.Header); !ok || c != "small" {
			t.Errorf("cluster %q %v", c, ok)
		}
		StripTransactionCluster(&req)
		if got := string(req.Header.Peek("X-Trino-Transaction-Id")); got != "abc" {
			t.Errorf("forwarded %q", got)
		}
	})
	for _, v := range []string{"", "NONE", "abc", "~abc"} {
		var h fasthttp.RequestHeader
		if v != "" {
			h.Set("X-Trino-Transaction-Id", v)
		}
		if c, ok := TransactionCluster(&h); ok {
			t.Errorf("%q names cluster %q", v, c)
		}
	}
}
