package protocol

import (
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/internal/dialect"
)

// Transactions stick to the cluster that started them without any state in
// the proxy: the transaction id handed to the client (in
// X-Trino-Started-Transaction-Id, X-Presto-Started-Transaction-Id from a
// PrestoDB coordinator) is "{cluster}~{coordinator's id}", clients send it
// back in X-Trino-Transaction-Id (X-Presto-Transaction-Id), and the proxy
// routes on the prefix and forwards only the coordinator's id. Cluster
// names cannot hold "~".
const TxSep = "~"

// TransactionCluster is the cluster a request's transaction id names
// (false: none, or a transaction id of no cluster), read under the name of
// the request's dialect.
func TransactionCluster(h *fasthttp.RequestHeader) (string, bool) {
	v := string(Peek(h, Dialect(h), "Transaction-Id"))
	i := strings.Index(v, TxSep)
	if v == "" || strings.EqualFold(v, "NONE") || i <= 0 {
		return "", false
	}
	return v[:i], true
}

// StripTransactionCluster turns the client's transaction id back into the
// coordinator's on an outgoing request, under whichever dialect's name the
// request carries it.
func StripTransactionCluster(req *fasthttp.Request) {
	for _, e := range engines {
		k := e.Header("Transaction-Id")
		v := string(req.Header.Peek(k))
		if i := strings.Index(v, TxSep); i > 0 {
			req.Header.Set(k, v[i+len(TxSep):])
		}
	}
}

// TagTransaction prefixes a started transaction's id with its cluster,
// under whichever dialect's name the coordinator answered with (a cluster
// whose engine is not known yet is tagged all the same).
func TagTransaction(h *fasthttp.ResponseHeader, cluster string) {
	for _, e := range engines {
		k := e.Header("Started-Transaction-Id")
		if v := string(h.Peek(k)); v != "" && !strings.Contains(v, TxSep) {
			h.Set(k, cluster+TxSep+v)
		}
	}
}

// engines are the two dialects, for the rules that apply to both names.
var engines = [...]dialect.Engine{dialect.Trino, dialect.Presto}
