package protocol

import (
	"strings"

	"github.com/valyala/fasthttp"
)

// Transactions stick to the cluster that started them without any state in
// the proxy: the transaction id handed to the client (in
// X-Trino-Started-Transaction-Id) is "{cluster}~{trino id}", clients send it
// back in X-Trino-Transaction-Id, and the proxy routes on the prefix and
// forwards only the Trino id. Cluster names cannot hold "~".
const TxSep = "~"

// TransactionCluster is the cluster a request's transaction id names
// (false: none, or a transaction id of no cluster).
func TransactionCluster(h *fasthttp.RequestHeader) (string, bool) {
	v := string(h.Peek("X-Trino-Transaction-Id"))
	i := strings.Index(v, TxSep)
	if v == "" || strings.EqualFold(v, "NONE") || i <= 0 {
		return "", false
	}
	return v[:i], true
}

// StripTransactionCluster turns the client's transaction id back into
// Trino's on an outgoing request.
func StripTransactionCluster(req *fasthttp.Request) {
	v := string(req.Header.Peek("X-Trino-Transaction-Id"))
	if i := strings.Index(v, TxSep); i > 0 {
		req.Header.Set("X-Trino-Transaction-Id", v[i+len(TxSep):])
	}
}

// TagTransaction prefixes a started transaction's id with its cluster.
func TagTransaction(h *fasthttp.ResponseHeader, cluster string) {
	if v := string(h.Peek("X-Trino-Started-Transaction-Id")); v != "" && !strings.Contains(v, TxSep) {
		h.Set("X-Trino-Started-Transaction-Id", cluster+TxSep+v)
	}
}
