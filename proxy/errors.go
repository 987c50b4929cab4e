package proxy

import (
	"errors"
	"fmt"

	"github.com/prestroid/prestroid/internal/dialect"
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
	// ErrEngineMismatch: the client speaks one engine's dialect and no
	// cluster it may go to runs that engine (the proxy translates nothing;
	// docs/routing.md). A *mismatchError says which.
	ErrEngineMismatch = errors.New("proxy: no cluster of the client's engine")
)

// mismatchError is ErrEngineMismatch for a client of dialect client: no
// cluster serves it, or (cluster set) its transaction's cluster runs
// engine.
type mismatchError struct {
	client  dialect.Engine
	cluster string
	engine  dialect.Engine
}

func (e *mismatchError) Error() string {
	who := fmt.Sprintf("a %s client (%s* headers)", engineName(e.client), e.client.Prefix())
	if e.cluster != "" {
		return fmt.Sprintf("prestroid: %s cannot continue a transaction of cluster %s, which runs %s; the query was not sent",
			who, e.cluster, engineName(e.engine))
	}
	return fmt.Sprintf("prestroid: %s needs a %s cluster, and this proxy has none; the query was not sent (the proxy does not translate between Trino and PrestoDB)",
		who, engineName(e.client))
}

func (e *mismatchError) Is(target error) bool { return target == ErrEngineMismatch }

// engineName is an engine as people name it.
func engineName(e dialect.Engine) string {
	switch e {
	case dialect.Presto:
		return "PrestoDB"
	case dialect.Trino:
		return "Trino"
	}
	return "unknown"
}

// fail is the one error path: it turns an internal error into the right
// HTTP status or a well-formed Trino QueryResults error. statementPOST says
// the failed request was the query's POST /v1/statement.
func (s *Server) fail(ctx *fasthttp.RequestCtx, err error, statementPOST bool) {
	ctx.Response.Reset()
	var ue *protocol.UpstreamError
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
	case errors.Is(err, ErrEngineMismatch):
		// A failed query, as the client's own engine would report one:
		// every client shows its message.
		s.trinoError(ctx, "PRESTROID_ENGINE_MISMATCH", "USER_ERROR", err.Error())
	case errors.As(err, &ue) && statementPOST && ue.Sent:
		// Trino may have the query: answer with a failed query, never with
		// a status the client would retry.
		s.trinoError(ctx, "PRESTROID_UPSTREAM_ERROR", "EXTERNAL",
			fmt.Sprintf("prestroid: cluster %s failed after receiving the query; it was not resubmitted: %v", ue.Cluster, ue.Err))
	case errors.As(err, &ue) && ue.Poll:
		id := protocol.PolledQueryID(string(ctx.Path()))
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
	s.log.Warn("request failed", "method", string(ctx.Method()), "path", protocol.RedactPath(string(ctx.Path())), "error", err)
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
