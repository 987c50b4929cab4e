// Package protocol holds the pieces of the Trino client protocol the proxy
// needs, in both of its dialects (Trino's X-Trino-* and PrestoDB's
// X-Presto-*: which one a request speaks and its headers under their
// names, dialect.go), as plain functions and values with no server behind them: signed
// route tokens (token.go) and the sealing of saved queries (seal.go), the
// streaming rewrite of QueryResults URIs (rewrite.go), which headers travel
// and which stop at the proxy (headers.go), the cluster tag on transaction
// ids (transaction.go), the proxy's own QUEUED and FAILED pages (pages.go),
// gzip for result pages (gzip.go), which query a path names and what of it
// a log may show (paths.go), whether a failed upstream request reached
// Trino (upstream.go), and query ids: which are valid and the bounded maps
// keyed by them (querymap.go). Trino's duration syntax is
// estimate.TrinoDuration.
//
// It imports no other package of the proxy.
package protocol
