package protocol

import "strings"

// Reading the proxy's and Trino's paths: which query a path names, and
// what of it a log may show.

// StatementQueryID extracts {id} from /v1/statement/{queued|executing}/{id}/...
// ("" for Trino's .../executing/partialCancel/{id}/...). A query string is
// ignored: PrestoDB carries the slug there
// (/v1/statement/executing/{id}/{token}?slug=…).
func StatementQueryID(target string) string {
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	parts := strings.Split(target, "/")
	// "", v1, statement, phase, id | partialCancel, id
	if len(parts) < 5 {
		return ""
	}
	if parts[4] == "partialCancel" {
		return ""
	}
	return parts[4]
}

// PolledQueryID is the Trino query id of a routed poll's path
// (/r/{token}/v1/statement/{phase}/{id}/…), or "".
func PolledQueryID(path string) string {
	_, target, ok := SplitRouted(path)
	if !ok {
		return ""
	}
	if id := StatementQueryID(target); ValidQueryID(id) {
		return id
	}
	return ""
}

// RedactPath keeps an URI's shape for logs but drops route tokens, slugs and
// segment handles, which are bearer capabilities (docs/design.md §6):
// /r/{token}/v1/statement/executing/{id}/{slug}/{n} logs as
// /v1/statement/executing/{id}/…, and PrestoDB's
// /v1/statement/executing/{id}/{n}?slug=… the same.
func RedactPath(p string) string {
	if _, target, ok := SplitRouted(p); ok {
		p = target
	}
	if i := strings.IndexByte(p, '?'); i >= 0 {
		p = p[:i]
	}
	keep := 5 // "", v1, statement, executing, {id}
	if strings.HasPrefix(p, "/v1/spooled/") {
		keep = 3
	}
	parts := strings.SplitN(p, "/", keep+1)
	if len(parts) > keep {
		return strings.Join(parts[:keep], "/") + "/…"
	}
	return p
}
