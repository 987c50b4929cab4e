package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// Errors the proxy maps to responses in one place (Server.fail).
var (
	// ErrNotFound: the path is not one the proxy serves.
	ErrNotFound = errors.New("proxy: no such endpoint")
	// ErrUnknownCluster: a verified token names a cluster that is no longer
	// configured (the configuration changed under a running query).
	ErrUnknownCluster = errors.New("proxy: unknown cluster")
	// ErrUnknownQuery: no configured cluster knows the query id.
	ErrUnknownQuery = errors.New("proxy: unknown query")
	// ErrBadRequest: the request itself is malformed.
	ErrBadRequest = errors.New("proxy: bad request")
)

// UpstreamError is a failed exchange with a cluster. Sent says whether the
// request may have reached Trino: after a POST /v1/statement reached Trino,
// the client must not be told to retry (429/502/503/504), or the query would
// be submitted twice.
//
// Poll says the request was a poll of a running query (GET nextUri). A
// query does not outlive its coordinator, and a poll that failed cannot be
// told apart from a dead one, so such a failure is a well-formed Trino
// error at once, never a 503 that clients retry for minutes against a
// query that is gone. (A cluster whose connections are all busy is not a
// failure of this kind: Poll is false, and the client retries.)
type UpstreamError struct {
	Cluster string
	Sent    bool
	Poll    bool
	Err     error
}

func (e *UpstreamError) Error() string {
	return fmt.Sprintf("proxy: cluster %s: %v", e.Cluster, e.Err)
}

func (e *UpstreamError) Unwrap() error { return e.Err }

// notSent reports whether err happened before the request left the proxy:
// a failed dial, a dial timeout, no free connection, or a TLS handshake
// that failed (an https cluster whose certificate is not trusted: nothing
// was written on the connection).
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var rh tls.RecordHeaderError
	if errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &rh) {
		return true
	}
	return errors.Is(err, fasthttp.ErrDialTimeout) || errors.Is(err, fasthttp.ErrNoFreeConns) ||
		errors.Is(err, fasthttp.ErrTLSHandshakeTimeout)
}

// fail is the one error path: it turns an internal error into the right
// HTTP status or a well-formed Trino QueryResults error. statementPOST says
// the failed request was the query's POST /v1/statement.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error, statementPOST bool) {
	ctx.Response.Reset()
	var ue *UpstreamError
	var ae *frontdoor.AuthError
	switch {
	case errors.As(err, &ae):
		s.refuseCredentials(ctx, ae) // Trino's own 401/403; nothing to log
		return
	case errors.Is(err, frontdoor.ErrUnverified):
		// Nothing was sent for the query: the client may retry.
		ctx.Response.Header.Set("Retry-After", "1")
		s.plain(ctx, fasthttp.StatusServiceUnavailable, "prestroid: the cluster did not answer whether it accepts these credentials; retry")
	case errors.Is(err, protocol.ErrBadToken):
		s.plain(ctx, fasthttp.StatusForbidden, "prestroid: invalid or tampered route token; this URI was not issued by this proxy")
	case errors.Is(err, ErrUnknownCluster):
		s.plain(ctx, fasthttp.StatusNotFound, "prestroid: the cluster of this query is no longer configured")
	case errors.Is(err, ErrUnknownQuery):
		s.plain(ctx, fasthttp.StatusNotFound, "prestroid: no configured cluster knows this query")
	case errors.Is(err, ErrNotFound):
		s.plain(ctx, fasthttp.StatusNotFound, "prestroid: not found")
	case errors.Is(err, frontdoor.ErrUnknownHost):
		s.plain(ctx, fasthttp.StatusBadRequest, "prestroid: the Host header names no host this proxy answers to; set public_url (or allowed_hosts) to the address clients use")
	case errors.Is(err, ErrBadRequest):
		s.plain(ctx, fasthttp.StatusBadRequest, err.Error())
	case errors.As(err, &ue) && statementPOST && ue.Sent:
		// Trino may have the query: answer with a failed query, never with
		// a status the client would retry.
		s.trinoError(ctx, "PRESTROID_UPSTREAM_ERROR", "EXTERNAL",
			fmt.Sprintf("prestroid: cluster %s failed after receiving the query; it was not resubmitted: %v", ue.Cluster, ue.Err))
	case errors.As(err, &ue) && ue.Poll:
		id := polledQueryID(ctx)
		s.trinoErrorFor(ctx, id, "PRESTROID_UPSTREAM_ERROR", "EXTERNAL",
			fmt.Sprintf("prestroid: cluster %s failed while the query ran; the query is lost: %v", ue.Cluster, ue.Err))
		if id != "" && s.admit != nil {
			s.finishQuery(id) // the query is gone: free its budget
		}
	case errors.As(err, &ue):
		ctx.Response.Header.Set("Retry-After", "1")
		s.plain(ctx, fasthttp.StatusServiceUnavailable, fmt.Sprintf("prestroid: cluster %s unavailable: %v", ue.Cluster, ue.Err))
	default:
		s.plain(ctx, fasthttp.StatusInternalServerError, "prestroid: internal error")
	}
	s.log.Warn("request failed", "method", string(ctx.Method()), "path", redactPath(string(ctx.Path())), "error", err)
}

func (s *Server) plain(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(msg + "\n")
}

// trinoError answers with a terminal QueryResults whose error object has the
// shape of io.trino.client.QueryError, so every client reports it as a
// failed query.
func (s *Server) trinoError(ctx *fasthttp.RequestCtx, name, typ, msg string) {
	s.trinoErrorFor(ctx, "", name, typ, msg)
}

// trinoErrorFor is trinoError for query id (a synthetic id when empty).
func (s *Server) trinoErrorFor(ctx *fasthttp.RequestCtx, id, name, typ, msg string) {
	if id == "" {
		id = protocol.SyntheticQueryID()
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(protocol.ErrorPage(id, s.publicBase(ctx)+"/ui/query.html?"+id, name, typ, msg))
}

// polledQueryID is the Trino query id of a routed poll
// (/r/{token}/v1/statement/{phase}/{id}/…), or "".
func polledQueryID(ctx *fasthttp.RequestCtx) string {
	_, target, ok := protocol.SplitRouted(string(ctx.Path()))
	if !ok {
		return ""
	}
	if id := statementQueryID(target); protocol.ValidQueryID(id) {
		return id
	}
	return ""
}

// redactPath keeps an URI's shape for logs but drops route tokens, slugs and
// segment handles, which are bearer capabilities (docs/design.md §6):
// /r/{token}/v1/statement/executing/{id}/{slug}/{n} logs as
// /v1/statement/executing/{id}/….
func redactPath(p string) string {
	if _, target, ok := protocol.SplitRouted(p); ok {
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
