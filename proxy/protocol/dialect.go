package protocol

import (
	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/internal/dialect"
)

// Dialect is the dialect of a client request, read from its header names
// (dialect.OfNames): Trino when it carries any X-Trino-* header, else
// Presto when it carries any X-Presto-* header, else Unknown. h is only
// read.
func Dialect(h *fasthttp.RequestHeader) dialect.Engine {
	return dialect.OfNames(func(yield func(string) bool) {
		for k := range h.All() {
			if !yield(string(k)) {
				return
			}
		}
	})
}

// Peek is the value of the protocol header suffix ("User", "Source", ...)
// under the name of the request's dialect e: X-Presto-User for a PrestoDB
// client, X-Trino-User otherwise. The slice is h's (valid until h changes).
func Peek(h *fasthttp.RequestHeader, e dialect.Engine, suffix string) []byte {
	return h.Peek(e.Header(suffix))
}

// PeekAll is Peek for every value of a repeated header, in order.
func PeekAll(h *fasthttp.RequestHeader, e dialect.Engine, suffix string) [][]byte {
	return h.PeekAll(e.Header(suffix))
}
