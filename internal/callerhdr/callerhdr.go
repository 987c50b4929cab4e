// Package callerhdr is the one rule for which of a caller's request headers
// go with the EXPLAIN that Prestroid runs on the caller's behalf.
//
// The EXPLAIN must run as the caller, in the caller's session (docs/design.md §2.1):
// user, credentials, catalog, schema, path, session properties, roles,
// prepared statements, client tags and info all travel as X-Trino-* headers
// or Authorization. Two X-Trino-* headers must not:
//   - X-Trino-Query-Data-Encoding turns on the spooling protocol, whose
//     segments the EXPLAIN client does not read (the plan is one small row);
//   - X-Trino-Transaction-Id: the id a client holds is the proxy's
//     "cluster~trino-id" form, and a plan needs no transaction.
//
// The proxy (estimates for routing and /v1/estimate) and the estimator's
// EXPLAIN client both apply this rule; neither keeps a copy of it.
package callerhdr

import (
	"net/http"
	"strings"
)

const trinoPrefix = "X-Trino-"

// Forward reports whether a request header named name (any case) goes with
// the caller's EXPLAIN. Hop-by-hop headers are the caller's business to drop
// first; none of them is Authorization or X-Trino-*.
func Forward(name string) bool {
	if strings.EqualFold(name, "Authorization") {
		return true
	}
	if len(name) <= len(trinoPrefix) || !strings.EqualFold(name[:len(trinoPrefix)], trinoPrefix) {
		return false
	}
	return !strings.EqualFold(name, "X-Trino-Query-Data-Encoding") &&
		!strings.EqualFold(name, "X-Trino-Transaction-Id")
}

// Copy returns the headers of h that Forward lets through, under their
// canonical names, each value slice copied (h is only read): what a
// request made on the caller's behalf carries. extra reserves room for
// headers the caller of Copy adds.
func Copy(h http.Header, extra int) http.Header {
	out := make(http.Header, len(h)+extra)
	for k, vs := range h {
		if Forward(k) {
			out[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
		}
	}
	return out
}
