package proxy

import (
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/console"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/gateway"
	"github.com/prestroid/prestroid/proxy/health"
	"github.com/prestroid/prestroid/proxy/metrics"
	"github.com/valyala/fasthttp"
)

// The admin surface: GET /metrics, POST /v1/estimate, POST /v1/routing and
// the web console under /prestroid/ (package console). They answer with the
// proxy's internals (metrics, the console) and plan queries on the default
// cluster (the estimate endpoints), so a deployment may keep them
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

// isAdmin reports whether method and path name an admin endpoint (the
// console's paths whatever the method: it answers 405 itself).
func isAdmin(method, path string) bool {
	switch path {
	case "/metrics":
		return method == fasthttp.MethodGet
	case "/v1/estimate", "/v1/routing":
		return method == fasthttp.MethodPost
	}
	return console.Match(path)
}

// admin serves an admin endpoint after the token check; the console's
// page files need none (they hold no data).
func (s *Server) admin(ctx *fasthttp.RequestCtx) {
	path := string(ctx.Path())
	if console.Match(path) {
		if s.console == nil {
			s.fail(ctx, ErrNotFound, false) // console.decisions < 0
			return
		}
		if s.console.ServePage(ctx) {
			return
		}
	}
	if !s.adminToken.Authorize(&ctx.Request.Header) {
		ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="prestroid-admin"`)
		s.plain(ctx, fasthttp.StatusUnauthorized, "prestroid: this admin endpoint needs the admin token (Authorization: Bearer, or "+frontdoor.AdminTokenHeader+")")
		return
	}
	switch path {
	case "/metrics":
		s.serveMx(ctx)
	case "/v1/estimate":
		s.serveEstimate(ctx)
	case "/v1/routing":
		s.gateway.Serve(ctx)
	default:
		s.console.ServeAPI(ctx)
	}
}

// newGateway is Trino Gateway's routing endpoint over s's estimator
// (estimateFor: the default cluster, Options.EstimateTimeout) and options;
// New makes it once.
func (s *Server) newGateway() *gateway.Handler {
	g := &gateway.Handler{ErrBusy: ErrEstimatorBusy, Groups: s.opts.RoutingGroups, ClassQuantile: s.opts.ClassQuantile,
		KeepClientEstimate: s.opts.KeepClientEstimate, ClassTag: s.opts.ClassTag, Log: s.log}
	if s.opts.Estimator != nil {
		// Trino Gateway speaks for Trino clients; its headers name no
		// dialect of their own here, so the plan is the default cluster's.
		g.Estimate = func(sql string, h http.Header) (estimate.Estimate, error) {
			return s.estimateFor(sql, h, dialect.Unknown)
		}
	}
	return g
}

// AdminHandler serves only the admin endpoints, the health endpoints
// and, with the console on, "/" (a redirect to it) and Trino's web UI of
// the first cluster (/ui/, its own login in front), where the console's
// query links point; everything else is 404. ServeAdmin runs it.
func (s *Server) AdminHandler(ctx *fasthttp.RequestCtx) {
	method, path := string(ctx.Method()), string(ctx.Path())
	ui := method == fasthttp.MethodGet || method == fasthttp.MethodHead || method == fasthttp.MethodPost // the UI's login form posts
	switch {
	case health.Is(method, path): // probes: no token (healthz.go)
		s.serveHealth(ctx)
	case isAdmin(method, path):
		s.admin(ctx)
	case s.console != nil && path == "/" && (method == fasthttp.MethodGet || method == fasthttp.MethodHead):
		ctx.Redirect(console.Prefix, fasthttp.StatusFound)
	case s.console != nil && ui && strings.HasPrefix(path, uiQueryAPI):
		s.uiQuery(ctx, string(ctx.Request.Header.RequestURI()))
	case s.console != nil && ui && (path == "/ui" || strings.HasPrefix(path, "/ui/")):
		s.forward(ctx, s.clusters[0], string(ctx.Request.Header.RequestURI()), modeRaw)
	default:
		s.fail(ctx, ErrNotFound, false)
	}
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
		Logger:                frontdoor.FastHTTPLogger{L: s.log},
	})
	return s.adminSrv.Load().Serve(ln)
}

// consoleView is what the console reads of s (console.Proxy).
type consoleView struct{ s *Server }

var _ console.Proxy = consoleView{}

// Clusters implements console.Proxy.
func (v consoleView) Clusters() []console.ClusterState {
	out := make([]console.ClusterState, len(v.s.clusters))
	for i, c := range v.s.clusters {
		cs := console.ClusterState{Name: c.name, URL: c.url, Class: c.class, Engine: c.Engine().String(), Healthy: c.Healthy(), Load: c.Load()}
		if st := c.State(); st != nil {
			cs.Checked, cs.Err, cs.LoadErr, cs.Running, cs.Queued = st.Checked, st.Err, st.LoadErr, st.Running, st.Queued
		}
		out[i] = cs
	}
	return out
}

// TablesScanned implements console.Proxy.
func (v consoleView) TablesScanned() (known, unknown uint64) {
	return v.s.metrics.Known.Load(), v.s.metrics.Unknown.Load()
}

// metricsView is the server as the metrics' scrape-time gauges read it
// (metrics.State).
type metricsView struct{ s *Server }

var _ metrics.State = metricsView{}

// Clusters implements metrics.State.
func (v metricsView) Clusters() []metrics.Cluster {
	out := make([]metrics.Cluster, len(v.s.clusters))
	for i, c := range v.s.clusters {
		out[i] = metrics.Cluster{Name: c.name, Class: c.class, Engine: c.Engine().String(), Healthy: c.Healthy(), Load: c.Load()}
	}
	return out
}

// Queue implements metrics.State.
func (v metricsView) Queue() (queued, inflight int, ok bool) {
	if v.s.admit == nil {
		return 0, 0, false
	}
	c, cancel := admission.StoreCtx()
	defer cancel()
	q, in, err := v.s.admit.Lengths(c)
	return q, in, err == nil
}
