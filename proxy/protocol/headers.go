package protocol

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/internal/callerhdr"
	"github.com/prestroid/prestroid/internal/dialect"
)

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 plus the legacy
// ones that proxies still meet. They describe one connection, so they are
// never forwarded in either direction. Headers named in the Connection
// header are hop-by-hop too and are removed first (see connectionTokens).
var hopHeaders = []string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by some old clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te", // only "trailers" would survive (Go's httputil keeps it); fasthttp does not do trailers upstream, so drop it
	"Trailer",
	"Transfer-Encoding", // fasthttp frames bodies itself
	"Upgrade",
}

func isHop(key []byte, conn [][]byte) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(h, string(key)) {
			return true
		}
	}
	for _, t := range conn {
		if bytes.EqualFold(t, key) {
			return true
		}
	}
	return false
}

// connectionTokens returns the header names listed in Connection values.
func connectionTokens(values [][]byte) [][]byte {
	var out [][]byte
	for _, v := range values {
		for _, t := range bytes.Split(v, []byte{','}) {
			t = bytes.TrimSpace(t)
			if len(t) > 0 && !bytes.EqualFold(t, []byte("close")) && !bytes.EqualFold(t, []byte("keep-alive")) {
				out = append(out, t)
			}
		}
	}
	return out
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && strings.EqualFold(string(b[:len(prefix)]), prefix)
}

// CopyRequestHeaders copies every end-to-end header of in to out, every
// value of a repeated header in order. Host, framing and hop-by-hop headers
// are left to the caller; X-Forwarded-* and Forwarded are dropped unless
// forwarded is true, because Trino 451+ answers 406 to them by default
// (airlift http-server.process-forwarded=REJECT). out must be fresh.
func CopyRequestHeaders(out, in *fasthttp.RequestHeader, forwarded bool) {
	conn := connectionTokens(in.PeekAll("Connection"))
	for k, v := range in.All() {
		switch {
		case isHop(k, conn):
		case strings.EqualFold(string(k), "Host"), strings.EqualFold(string(k), "Content-Length"):
		case !forwarded && (hasPrefixFold(k, "X-Forwarded-") || strings.EqualFold(string(k), "Forwarded")):
		default:
			out.AddBytesKV(k, v)
		}
	}
}

// CopyResponseHeaders copies every end-to-end header of in to out, keeping
// every value of multi-valued headers (X-Trino-Set-Session,
// X-Trino-Added-Prepare, their X-Presto-* twins from PrestoDB, ...) in
// order, whatever their dialect. skipEncoding drops Content-Encoding
// when the proxy decoded the body.
func CopyResponseHeaders(out, in *fasthttp.ResponseHeader, skipEncoding bool) {
	conn := connectionTokens(in.PeekAll("Connection"))
	for k, v := range in.All() {
		switch {
		case isHop(k, conn):
		case strings.EqualFold(string(k), "Content-Length"): // fasthttp frames the body it sends (a streamed body is chunked)
		case skipEncoding && strings.EqualFold(string(k), "Content-Encoding"):
		case strings.EqualFold(string(k), "Content-Type"):
			out.SetContentTypeBytes(v)
		default:
			out.AddBytesKV(k, v)
		}
	}
}

// CallerHeaders is the caller's identity and session that an estimate's
// EXPLAIN carries (docs/design.md §2.1), for routing estimates and the estimate
// endpoints alike: the end-to-end headers of in (hop-by-hop ones and those
// named in Connection dropped first) that callerhdr.Forward lets through,
// every value of a repeated header in order. They are under Trino's names,
// the canonical form inside Prestroid: a PrestoDB client's X-Presto-*
// headers come back as X-Trino-* (dialect.Canonical), and the EXPLAIN
// client renames them for the coordinator it asks (dialect.For). The
// result is a fresh copy the estimator may keep; in is only read.
func CallerHeaders(in *fasthttp.RequestHeader) http.Header {
	h := http.Header{}
	presto := Dialect(in) == dialect.Presto
	conn := connectionTokens(in.PeekAll("Connection"))
	for k, v := range in.All() {
		name := string(k)
		if presto {
			name = dialect.Rename(name, dialect.Trino)
		}
		if !isHop(k, conn) && callerhdr.Forward(name) {
			h.Add(name, string(v))
		}
	}
	return h
}
