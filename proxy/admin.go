package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// The admin surface: GET /metrics, POST /v1/estimate and POST /v1/routing.
// They answer with the proxy's internals (metrics) and plan queries on the
// default cluster (the estimate endpoints), so a deployment may keep them
// off the client-facing listener (Options.AdminSeparate, served by
// ServeAdmin on a listener of their own, e.g. bound to a private address)
// and/or behind a bearer token (Options.AdminToken).
//
// The token is accepted as "Authorization: Bearer TOKEN" (what Prometheus'
// scrape authorization sends) or as "X-Prestroid-Admin-Token: TOKEN".
// The estimate endpoints plan as the caller, whose own credentials travel
// in Authorization: a caller that needs both sends the token in
// X-Prestroid-Admin-Token. Either way the token is removed from the
// request before anything else reads it, so it never reaches a cluster.

// adminTokenHeader carries the admin token beside the caller's own
// Authorization.
const adminTokenHeader = "X-Prestroid-Admin-Token"

// isAdmin reports whether method and path name an admin endpoint.
func isAdmin(method, path string) bool {
	switch path {
	case "/metrics":
		return method == fasthttp.MethodGet
	case "/v1/estimate", "/v1/routing":
		return method == fasthttp.MethodPost
	}
	return false
}

// admin serves an admin endpoint after the token check.
func (s *Server) admin(ctx *fasthttp.RequestCtx) {
	if !s.adminAuthorized(&ctx.Request.Header) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="prestroid-admin"`)
		s.plain(ctx, fasthttp.StatusUnauthorized, "prestroid: this admin endpoint needs the admin token (Authorization: Bearer, or "+adminTokenHeader+")")
		return
	}
	switch string(ctx.Path()) {
	case "/metrics":
		s.serveMx(ctx)
	case "/v1/estimate":
		s.serveEstimate(ctx)
	case "/v1/routing":
		s.serveRouting(ctx)
	}
}

// adminAuthorized checks the admin token (none configured: every request
// passes) and strips it from h.
func (s *Server) adminAuthorized(h *fasthttp.RequestHeader) bool {
	if len(s.adminToken) == 0 {
		h.Del(adminTokenHeader)
		return true
	}
	ok := false
	if v := h.Peek(adminTokenHeader); len(v) > 0 {
		ok = s.tokenMatches(v)
		h.Del(adminTokenHeader)
	}
	if auth := h.Peek(fasthttp.HeaderAuthorization); len(auth) > 7 && bytes.EqualFold(auth[:7], []byte("Bearer ")) {
		if s.tokenMatches(bytes.TrimSpace(auth[7:])) {
			ok = true
			h.Del(fasthttp.HeaderAuthorization) // the admin token, not the caller's credentials
		}
	}
	return ok
}

// tokenMatches compares in constant time (hashes of equal length, so the
// token's length leaks nothing either).
func (s *Server) tokenMatches(v []byte) bool {
	got := sha256.Sum256(v)
	return subtle.ConstantTimeCompare(got[:], s.adminToken) == 1
}

// AdminHandler serves only the admin endpoints and the health endpoints
// (everything else is 404);
// ServeAdmin runs it.
func (s *Server) AdminHandler(ctx *fasthttp.RequestCtx) {
	if isHealth(string(ctx.Method()), string(ctx.Path())) { // probes: no token (healthz.go)
		s.serveHealth(ctx)
		return
	}
	if !isAdmin(string(ctx.Method()), string(ctx.Path())) {
		s.fail(ctx, ErrNotFound, false)
		return
	}
	s.admin(ctx)
}

// ServeAdmin serves the admin endpoints on ln until Shutdown. Call it at
// most once.
func (s *Server) ServeAdmin(ln net.Listener) error {
	s.adminSrv.Store(&fasthttp.Server{
		Handler:               s.AdminHandler,
		Name:                  "prestroid-admin",
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    s.opts.MaxRequestBodyBytes,
		ReadBufferSize:        s.opts.MaxHeaderBytes,
		ReadTimeout:           time.Minute,
		IdleTimeout:           2 * time.Minute,
		CloseOnShutdown:       true,
		Logger:                fasthttpLogger{s.log},
	})
	return s.adminSrv.Load().Serve(ln)
}
