// Package proxy is Prestroid's Trino-protocol reverse proxy, for Trino and
// PrestoDB clusters alike (each client only to clusters of its own
// engine): it forwards the client protocol to configured clusters, streams result pages while
// rewriting their URIs to signed routed URIs (stateless routing), and keeps
// every session header intact.
//
// It imports neither the estimator nor ONNX; cost-aware behaviour plugs in
// through the small interfaces it declares.
package proxy

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/console"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/gateway"
	"github.com/prestroid/prestroid/proxy/guardrail"
	"github.com/prestroid/prestroid/proxy/health"
	"github.com/prestroid/prestroid/proxy/metrics"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/prestroid/prestroid/proxy/usage"
)

// Server is the proxy. Create it with New; it is safe for concurrent use.
type Server struct {
	opts     Options
	clusters []*cluster
	byName   map[string]*cluster
	signer   *protocol.Signer
	queries  *protocol.BoundedMap[string]   // query id -> cluster name
	tracked  *protocol.BoundedMap[*tracked] // query id -> what the proxy knows of it, until its last page
	ident    *frontdoor.Verifier            // the identity a query counts against (identity.go)
	metrics  *metrics.Set
	registry *prometheus.Registry
	selector routing.Selector
	serveMx  fasthttp.RequestHandler // GET /metrics
	gateway  *gateway.Handler        // POST /v1/routing
	// monitor keeps the clusters' Health current; it closes the probe
	// clients' connections when it stops, so that Shutdown does not wait
	// out a hanging probe.
	monitor    routing.Monitor
	admit      admission.Store        // nil without admission control
	ring       *console.Ring          // the console's recent decisions, fed by respond and complete; nil: console off
	console    *console.Handler       // nil: console off
	rate       *admission.RateLimiter // nil without rate limits
	guard      *guardrail.Guard       // nil without guardrails (guardrail_flow.go)
	usage      *usage.Recorder        // cost accounting (usage_flow.go); nil: off
	ahead      *readAhead             // result pages read ahead (readahead.go); nil: off
	adminToken frontdoor.AdminToken   // guards the admin endpoints (admin.go)
	adminSrv   atomic.Pointer[fasthttp.Server]
	health     healthState // /readyz (healthz.go)
	log        *slog.Logger
	srv        *fasthttp.Server
	mu         sync.Mutex
	extra      []*fasthttp.Server // the redirect listener's, shut down with srv
	stop       context.CancelFunc
	done       chan struct{}
}

// New builds a Server from o, whose settings come filled and validated
// (OptionsFrom a configuration, or Defaults with fields set on top): New
// checks only what it must to build the clusters' clients.
func New(o Options) (*Server, error) {
	if len(o.Clusters) == 0 {
		return nil, errors.New("proxy: no clusters configured")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Signer == nil {
		sg, err := protocol.NewSigner(nil)
		if err != nil {
			return nil, err
		}
		o.Signer = sg
	}
	o.PublicURL = strings.TrimRight(o.PublicURL, "/")
	s := &Server{opts: o, byName: map[string]*cluster{}, signer: o.Signer, queries: protocol.NewBoundedMap[string](o.QueryMapSize),
		tracked: protocol.NewBoundedMap[*tracked](10000), ident: &frontdoor.Verifier{Mode: o.Identity, Claim: o.IdentityClaim, TTL: o.CredentialTTL, Tokens: o.TokenVerifier, Log: o.Logger},
		metrics: metrics.New(), log: o.Logger, adminToken: frontdoor.NewAdminToken(o.AdminToken), ahead: newReadAhead(o.PageReadAheadBytes)}
	var err error
	if s.selector, err = newSelector(o); err != nil {
		return nil, err
	}
	if err := s.addClusters(o); err != nil {
		return nil, err
	}
	s.srv = s.clientServer(o)
	if err := s.newAdmission(o); err != nil {
		return nil, err
	}
	if err := s.newMetrics(o); err != nil {
		return nil, err
	}
	if err := s.newGuardrails(o); err != nil {
		return nil, err
	}
	if err := s.newUsage(o); err != nil {
		return nil, err
	}
	s.newConsole(o)
	s.gateway = s.newGateway()
	s.start(o)
	return s, nil
}

// newSelector is o.Selector, else a CostPolicy over o's classes, behind a
// RulePolicy when o has rules.
func newSelector(o Options) (routing.Selector, error) {
	if o.Selector != nil {
		return o.Selector, nil
	}
	cost := &routing.CostPolicy{Classes: o.Classes, Fallback: o.Fallback, Shadow: o.Shadow, Quantile: o.ClassQuantile}
	if len(o.Rules) == 0 {
		return cost, nil
	}
	return routing.NewRulePolicy(o.Rules, cost)
}

// clientServer is the fasthttp server of the client listener.
func (s *Server) clientServer(o Options) *fasthttp.Server {
	return &fasthttp.Server{
		Handler:               s.Handler,
		ErrorHandler:          s.errorHandler,
		Name:                  "prestroid",
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
		NoDefaultContentType:  true,
		MaxRequestBodySize:    o.MaxRequestBodyBytes,
		ReadBufferSize:        o.MaxHeaderBytes,
		ReadTimeout:           5 * time.Minute,
		IdleTimeout:           2 * time.Minute,
		CloseOnShutdown:       true,
		Logger:                frontdoor.FastHTTPLogger{L: o.Logger},
		SecureErrorLogMessage: true, // never quote request bytes (credentials) in errors
	}
}

// newAdmission opens the admission store and the rate limits o asks for
// (none when its budgets and rates are all zero).
func (s *Server) newAdmission(o Options) error {
	if o.Admission.Enabled() {
		st, err := admission.NewStore(*o.Admission, s.metrics.Store(), o.Logger)
		if err != nil {
			return err
		}
		s.admit = st
	}
	if o.Admission != nil && o.Admission.Rate.Enabled() {
		rl, err := admission.NewRateLimiter(*o.Admission, s.admit, s.metrics.Store(), o.Logger)
		if err != nil {
			return err
		}
		s.rate = rl
	}
	return nil
}

// newMetrics registers the metrics on o.Registry (or a registry of the
// server's own) and makes the /metrics handler.
func (s *Server) newMetrics(o Options) error {
	s.registry = o.Registry
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
	}
	if err := s.metrics.Register(s.registry, metricsView{s}, o.EstimatorStats); err != nil {
		return err
	}
	s.serveMx = metrics.Handler(s.registry, o.Logger)
	return nil
}

// newConsole makes the web console and the ring of recent decisions it
// shows; none when o.ConsoleDecisions is not positive.
func (s *Server) newConsole(o Options) {
	if o.ConsoleDecisions <= 0 {
		return
	}
	names := make([]string, len(s.clusters))
	for i, c := range s.clusters {
		names[i] = c.name
	}
	s.ring = console.NewRing(o.ConsoleDecisions, names)
	s.console = console.New(console.Options{Ring: s.ring, Proxy: consoleView{s}, Monitor: o.MonitorInterval > 0,
		Store: s.admit, Budgets: o.Admission, Guard: s.guard, Estimator: o.Estimator != nil, EstimatorStats: o.EstimatorStats, Logger: s.log,
		Usage: s.usageAPI()})
}

// start runs the background loops, the admission sweeper and the health
// monitor, until Shutdown.
func (s *Server) start(o Options) {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop, s.done = cancel, make(chan struct{})
	go func() {
		defer close(s.done)
		var wg sync.WaitGroup
		if s.admit != nil {
			wg.Add(1)
			go func() { defer wg.Done(); s.runSweeper(ctx) }()
		}
		if s.usage != nil {
			wg.Add(1)
			go func() { defer wg.Done(); s.usage.Run(ctx) }()
		}
		if o.MonitorInterval > 0 {
			s.monitor.Run(ctx, o.MonitorInterval)
		}
		wg.Wait()
	}()
}

// Serve accepts connections on ln until Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	s.health.serving.Store(true)
	return s.srv.Serve(frontdoor.GuardListener{Listener: ln})
}

// Shutdown stops accepting connections and waits for open ones to finish
// (or ctx to end).
func (s *Server) Shutdown(ctx context.Context) error {
	s.health.stopping.Store(true)
	s.stop()
	s.mu.Lock()
	extra := s.extra
	s.mu.Unlock()
	for _, x := range extra {
		_ = x.ShutdownWithContext(ctx)
	}
	if a := s.adminSrv.Load(); a != nil {
		_ = a.ShutdownWithContext(ctx)
	}
	err := s.srv.ShutdownWithContext(ctx)
	select {
	case <-s.done:
	case <-ctx.Done():
	}
	if s.admit != nil {
		_ = s.admit.Close()
	}
	if s.rate != nil {
		_ = s.rate.Close()
	}
	if s.usage != nil {
		_ = s.usage.Close(ctx) // after the last page: what the drain completed is counted
	}
	return err
}

// Registry is the registry GET /metrics serves (Options.Registry, or the
// server's own). Callers may register more collectors on it, e.g. the
// estimator's.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// DefaultCluster is the name of the first configured cluster.
func (s *Server) DefaultCluster() string { return s.clusters[0].name }

// publicBase is the proxy's base URL for this request. Without PublicURL
// the Handler has already refused a Host that frontdoor.HostAllowed does not accept.
func (s *Server) publicBase(ctx *fasthttp.RequestCtx) string {
	if s.opts.PublicURL != "" {
		return s.opts.PublicURL
	}
	scheme := "http://"
	if ctx.IsTLS() {
		scheme = "https://"
	}
	return scheme + string(ctx.Host())
}

// Handler is the fasthttp request handler.
func (s *Server) Handler(ctx *fasthttp.RequestCtx) {
	raw := string(ctx.Request.Header.RequestURI())
	method := string(ctx.Method())
	if health.Is(method, string(ctx.Path())) { // probes: no Host check, never forwarded
		s.serveHealth(ctx)
		return
	}
	if s.opts.PublicURL == "" && !frontdoor.HostAllowed(ctx, string(ctx.Host()), s.opts.AllowedHosts) {
		s.fail(ctx, frontdoor.ErrUnknownHost, false)
		return
	}
	if method == fasthttp.MethodTrace || method == fasthttp.MethodConnect {
		// Never forwarded: TRACE echoes the request (credentials
		// included) back (RFC 9110 §9.3.8), CONNECT would tunnel.
		ctx.Response.Header.Set("Allow", "GET, HEAD, POST, PUT, DELETE")
		s.plain(ctx, fasthttp.StatusMethodNotAllowed, "prestroid: method not allowed")
		return
	}
	if token, target, ok := protocol.SplitRouted(raw); ok {
		s.routed(ctx, method, token, target)
		return
	}
	path := string(ctx.Path())
	switch {
	case path == "/v1/statement" && method == fasthttp.MethodPost:
		s.statement(ctx)
	case path == "/v1/statement" && method == fasthttp.MethodHead:
		s.forward(ctx, s.defaultCluster(), raw, modeRaw)
	case strings.HasPrefix(path, "/v1/query/"):
		s.queryResource(ctx, method, strings.TrimPrefix(path, "/v1/query/"))
	case isAdmin(method, path):
		if s.opts.AdminSeparate {
			s.fail(ctx, ErrNotFound, false) // served on the admin listener only
			return
		}
		s.admin(ctx)
	case path == "/v1/info" || strings.HasPrefix(path, "/v1/info/"):
		// A client that names its dialect learns of a cluster of its
		// engine; any other of the default cluster.
		c := s.defaultFor(protocol.Dialect(&ctx.Request.Header))
		if c == nil {
			c = s.defaultCluster()
		}
		s.forward(ctx, c, raw, modeRaw)
	case strings.HasPrefix(path, uiQueryAPI):
		s.uiQuery(ctx, raw)
	case path == "/ui" || strings.HasPrefix(path, "/ui/"), strings.HasPrefix(path, "/oauth2/"):
		// The web UI (its /ui/api/* login redirects) and Trino's OAuth2
		// endpoints (the identity provider's callback comes back here)
		// belong to the default cluster; redirects and challenges that
		// point at it are routed back through the proxy.
		s.forward(ctx, s.clusters[0], raw, modeRaw)
	case strings.HasPrefix(path, "/v1/spooled/"):
		// Segment URIs are always handed out routed; an unrouted one can
		// only be meant for the default cluster.
		s.forward(ctx, s.clusters[0], raw, modeRaw)
	default:
		s.fail(ctx, ErrNotFound, false)
	}
}

// statement places a new query (route.go) and forwards it.
func (s *Server) statement(ctx *fasthttp.RequestCtx) {
	start := time.Now()
	if s.rate != nil && !s.allowRate(ctx) {
		return // refused with 503 and Retry-After before anything reached Trino
	}
	d, err := s.decide(ctx)
	if err != nil {
		s.fail(ctx, err, false)
		return
	}
	d.took = time.Since(start)
	s.recordDecision(d)
	if !s.guarded(ctx, d) {
		return // refused by a guardrail before anything reached a cluster
	}
	// Statements inside a transaction count too: they stay on their
	// cluster but wait like any other (else a made-up transaction id would
	// skip admission).
	if s.admit != nil && !s.opts.Shadow {
		id, now := s.admitOrQueue(ctx, d)
		if !now {
			return // queued (or refused): the client has its answer
		}
		d.admitID = id
	}
	d.cluster.CountSent()
	s.forwardPlaced(ctx, d.cluster, "/v1/statement", modeStatementPOST, d)
	if d.admitID != "" && ctx.Response.StatusCode() != fasthttp.StatusOK {
		s.releaseSlot(d.admitID)
	}
}

// routed serves a URI the proxy handed out: verify, then forward to the
// cluster the token names. A bad token never reaches any cluster.
func (s *Server) routed(ctx *fasthttp.RequestCtx, method, token, target string) {
	name, err := s.signer.Verify(token, target)
	if err != nil {
		s.fail(ctx, err, false)
		return
	}
	if name == localCluster && strings.HasPrefix(target, queuedPrefix) {
		s.queuedPoll(ctx, method, target)
		return
	}
	if method == fasthttp.MethodDelete && strings.HasPrefix(target, "/v1/statement/") {
		if id := protocol.StatementQueryID(target); id != "" {
			s.ahead.drop(id, nil) // a cancelled query's page read ahead goes
			if s.admit != nil {
				s.finishQuery(id) // a cancelled query frees its budget
			}
		}
	}
	c, ok := s.byName[name]
	if !ok {
		s.fail(ctx, ErrUnknownCluster, false)
		return
	}
	switch {
	case strings.HasPrefix(target, "/v1/statement/"):
		if method == fasthttp.MethodGet {
			s.poll(ctx, c, target)
		} else {
			s.forward(ctx, c, target, modeRaw)
		}
	case method == fasthttp.MethodDelete && strings.HasPrefix(target, "/v1/stage/"):
		// PrestoDB's partialCancelUri: DELETE /v1/stage/{query id}.{stage}.
		s.forward(ctx, c, target, modeRaw)
	case strings.HasPrefix(target, "/v1/spooled/"), strings.HasPrefix(target, "/ui/"), target == "/ui",
		strings.HasPrefix(target, "/oauth2/"): // the OAuth2 flow's URIs of a WWW-Authenticate challenge
		s.forward(ctx, c, target, modeRaw)
	default:
		s.fail(ctx, ErrNotFound, false)
	}
}

// queryResource serves GET/DELETE /v1/query/{id}: to the cluster that ran
// the query, from the query map or, failing that, by asking each cluster.
func (s *Server) queryResource(ctx *fasthttp.RequestCtx, method, id string) {
	if !protocol.ValidQueryID(id) {
		s.fail(ctx, fmt.Errorf("%w: bad query id", ErrBadRequest), false)
		return
	}
	if method == fasthttp.MethodDelete {
		s.ahead.drop(id, nil)
	}
	if s.admit != nil {
		c, cancel := admission.StoreCtx()
		defer cancel()
		if method == fasthttp.MethodDelete {
			if ok, _ := s.admit.Cancel(c, id, cancelByClient); ok {
				ctx.SetStatusCode(fasthttp.StatusNoContent)
				return
			}
		}
		if up, ok := s.admit.Upstream(c, id); ok {
			id = up // the proxy's queued id, now running on Trino
		}
		if method == fasthttp.MethodDelete {
			// After the DELETE is forwarded, with a budget of its own (the
			// forward may outlast c's).
			defer func() { s.finishQuery(id) }()
		}
	}
	target := "/v1/query/" + id
	if q := ctx.URI().QueryString(); len(q) > 0 {
		target += "?" + string(q)
	}
	if name, ok := s.queries.Get(id); ok {
		if c, ok := s.byName[name]; ok {
			s.forward(ctx, c, target, modeRaw)
			return
		}
	}
	for _, c := range s.clusters {
		s.forward(ctx, c, target, modeRaw)
		if ctx.Response.StatusCode() != fasthttp.StatusNotFound {
			s.queries.Put(id, c.name)
			return
		}
	}
	s.fail(ctx, ErrUnknownQuery, false)
}

// uiQueryAPI is where Trino's web UI reads one query (its query.html
// page fetches this absolute path).
const uiQueryAPI = "/ui/api/query/"

// uiQuery serves Trino's web UI's read of one query from the cluster
// that ran it (the query map), so the UI's query page works through the
// proxy for a query of any cluster; unknown ids go to the first cluster,
// which serves the rest of the unrouted UI.
func (s *Server) uiQuery(ctx *fasthttp.RequestCtx, raw string) {
	id := strings.TrimPrefix(string(ctx.Path()), uiQueryAPI)
	if i := strings.IndexByte(id, '/'); i >= 0 {
		id = id[:i]
	}
	c := s.clusters[0]
	if name, ok := s.queries.Get(id); ok {
		if named, ok := s.byName[name]; ok {
			c = named
		}
	}
	s.forward(ctx, c, raw, modeRaw)
}

type fwdMode uint8

const (
	modeRaw           fwdMode = iota // stream the body through untouched
	modeJSON                         // QueryResults: rewrite URIs while streaming
	modeStatementPOST                // a new query: modeJSON plus POST error rules
)

// forward sends the client's request to c at target and streams the answer
// back. The incoming request is read-only here; the outgoing one is built
// fresh. Nothing of ctx is kept past the handler except through the body
// stream, which owns the upstream response and releases it on Close.
func (s *Server) forward(ctx *fasthttp.RequestCtx, c *cluster, target string, mode fwdMode) {
	s.forwardPlaced(ctx, c, target, mode, nil)
}

// poll serves a client's poll of a running query (GET nextUri): from the
// page read ahead for it when there is one (readahead.go), else from
// Trino.
func (s *Server) poll(ctx *fasthttp.RequestCtx, c *cluster, target string) {
	next, prev := s.ahead.take(c.name, target)
	if next != nil {
		next.wait()
		switch {
		case next.page != nil && next.publicBase == s.publicBase(ctx):
			s.metrics.ReadAhead.WithLabelValues("served").Inc()
			s.sendAhead(ctx, c, next)
			return
		case next.resp != nil:
			s.metrics.ReadAhead.WithLabelValues("served").Inc()
			s.respond(ctx, c, next.resp, modeJSON, nil)
			return
		}
		next.freePage() // rewritten for another host: Trino serves it again
		// The fetch failed: Trino serves the page again, or fails as it
		// would have.
	}
	if prev != nil {
		// A retry of the page the client had: Trino has dropped it.
		s.metrics.ReadAhead.WithLabelValues("retry").Inc()
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentTypeBytes(prev.prevType)
		s.writeBody(ctx, prev.prev)
		return
	}
	s.forward(ctx, c, target, modeJSON)
}

// forwardPlaced is forward for a new query placed by decision d (nil for
// every other request).
func (s *Server) forwardPlaced(ctx *fasthttp.RequestCtx, c *cluster, target string, mode fwdMode, d *decision) {
	req := s.upstreamRequest(ctx, c, target, mode)
	defer fasthttp.ReleaseRequest(req)
	if d != nil && !s.opts.Shadow {
		s.annotate(req, d)
	}

	resp := fasthttp.AcquireResponse()
	if ctx.IsHead() {
		resp.SkipBody = true
	}
	err := c.client.Do(req, resp)
	// A cluster that could not be reached (nothing was sent) is marked
	// down; a new query then goes to another healthy cluster: the same
	// class first, then the default.
	// A cluster with every connection busy is slow, not down: nothing was
	// sent, and the client is told to retry (a connection limit is no
	// health signal).
	for err != nil && protocol.NotSent(err) && !errors.Is(err, fasthttp.ErrNoFreeConns) {
		c.MarkDown(err)
		if d == nil || d.Kind == routing.KindTransaction {
			break
		}
		next := s.failover(d, c)
		if next == nil {
			break
		}
		s.log.Warn("cluster unreachable; query sent to another", "cluster", c.name, "to", next.name, "error", err)
		s.metrics.Failover.WithLabelValues(c.name).Inc()
		d.Failovers = append(d.Failovers, c.name)
		d.Cluster = next.name
		d.cluster, c = next, next
		c.CountSent()
		req.SetRequestURI(c.url + target)
		req.Header.SetHost(c.host)
		resp.Reset()
		err = c.client.Do(req, resp)
	}
	if err != nil && ctx.IsDelete() && protocol.NotSent(err) && !errors.Is(err, fasthttp.ErrNoFreeConns) {
		// A cancel for a cluster nobody can reach: its queries died with
		// it (or are abandoned once nobody polls), and a 503 would have
		// clients retry the DELETE for as long as it stays down.
		fasthttp.ReleaseResponse(resp)
		s.log.Warn("cancel not delivered: cluster unreachable", "cluster", c.name, "path", protocol.RedactPath(target), "error", err)
		ctx.Response.Reset()
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		s.fail(ctx, &protocol.UpstreamError{Cluster: c.name, Sent: !protocol.NotSent(err), Poll: mode == modeJSON && !errors.Is(err, fasthttp.ErrNoFreeConns), Err: err}, mode == modeStatementPOST)
		if d != nil {
			decisionHeaders(&ctx.Response.Header, d) // where it went, even when that failed
		}
		return
	}
	s.respond(ctx, c, resp, mode, d)
	if d != nil {
		decisionHeaders(&ctx.Response.Header, d)
	}
}

// upstreamRequest is the request to c at target for the client's request
// in ctx (its headers, method and body); the caller releases it.
func (s *Server) upstreamRequest(ctx *fasthttp.RequestCtx, c *cluster, target string, mode fwdMode) *fasthttp.Request {
	req := fasthttp.AcquireRequest()
	protocol.CopyRequestHeaders(&req.Header, &ctx.Request.Header, s.opts.ForwardedHeaders)
	req.Header.SetMethodBytes(ctx.Method())
	req.SetRequestURI(c.url + target)
	req.Header.SetHost(c.host)
	if mode != modeRaw {
		// The body is scanned, so ask for it uncompressed (gzip is still
		// handled below if a server sends it anyway).
		req.Header.Set("Accept-Encoding", "identity")
	}
	if s.opts.ForwardedHeaders {
		req.Header.Add("X-Forwarded-For", ctx.RemoteIP().String())
		req.Header.Set("X-Forwarded-Host", string(ctx.Host()))
		if ctx.IsTLS() {
			req.Header.Set("X-Forwarded-Proto", "https")
		} else {
			req.Header.Set("X-Forwarded-Proto", "http")
		}
	}
	if body := ctx.Request.Body(); len(body) > 0 {
		req.SetBodyRaw(body)
	}
	protocol.StripTransactionCluster(req)
	return req
}

// respond copies status and headers and hands the body stream to fasthttp.
func (s *Server) respond(ctx *fasthttp.RequestCtx, c *cluster, resp *fasthttp.Response, mode fwdMode, d *decision) {
	release := func() error {
		err := resp.CloseBodyStream()
		fasthttp.ReleaseResponse(resp)
		return err
	}
	rewrite := mode != modeRaw && isJSON(resp.Header.ContentType())
	gz := rewrite && strings.EqualFold(string(resp.Header.ContentEncoding()), "gzip")

	ctx.Response.Reset()
	ctx.SetStatusCode(resp.StatusCode())
	protocol.CopyResponseHeaders(&ctx.Response.Header, &resp.Header, gz)
	s.rewriteLocation(ctx, c)
	s.rewriteAuthenticate(ctx, c)
	protocol.TagTransaction(&ctx.Response.Header, c.name)

	stream := resp.BodyStream()
	if stream == nil || ctx.IsHead() {
		body := append([]byte(nil), resp.Body()...)
		_ = release()
		ctx.Response.SkipBody = ctx.IsHead()
		ctx.SetBody(body)
		return
	}
	if !rewrite {
		ctx.SetBodyStream(&releasingReader{r: stream, close: release}, resp.Header.ContentLength())
		return
	}
	var src io.Reader = stream
	if gz {
		zr, err := gzip.NewReader(stream)
		if err != nil {
			_ = release()
			s.fail(ctx, &protocol.UpstreamError{Cluster: c.name, Sent: true, Err: fmt.Errorf("bad gzip body: %w", err)}, mode == modeStatementPOST)
			return
		}
		src = zr
	}
	info := &protocol.PageInfo{}
	m := &protocol.URIMapper{Signer: s.signer, Cluster: c.name, UpstreamBase: c.base, PublicBase: s.publicBase(ctx)}
	cname := c.name
	var admitID string
	var tr *tracked
	if d != nil {
		admitID = d.admitID
		tr = newTracked(ctx, d, c)
		if !s.opts.FeedbackPlans {
			tr.c.Estimate.Plan = nil
		}
		tr.c.Group = s.opts.Admission.GroupOf(tr.c.User, &ctx.Request.Header)
	}
	aborted := false // the page failed upstream: it tells nothing
	rw := protocol.NewJSONRewriter(src, func() error {
		if aborted {
			return release()
		}
		if info.ID != "" && mode == modeStatementPOST {
			s.queries.Put(info.ID, cname)
			if tr != nil {
				if s.ring != nil {
					tr.seq = s.ring.Add(consoleRecord(info.ID, &tr.c, d, time.Now())) // the console's one write
				}
				if s.opts.Handoff != nil && info.HasNextURI && len(tr.c.Estimate.Learn) > 0 {
					tr.left = s.opts.Handoff.Leave(info.ID, tr.c.Estimate.Learn) // another replica may see its last page
				}
				s.tracked.Put(info.ID, tr)
			}
			if admitID != "" {
				c, cancel := admission.StoreCtx()
				if err := s.admit.Bind(c, admitID, info.ID); err != nil {
					s.log.Warn("admission: binding the query failed; its slot is freed when its lease runs out", "error", err)
				}
				cancel()
			}
		}
		s.pageDone(info, cname)
		return release()
	}, m, info)
	var whole func([]byte)
	if mode == modeJSON && s.ahead != nil {
		whole = func(sent []byte) { s.readAheadFrom(ctx, c, info, sent) }
	}
	if err := s.sendPage(ctx, rw, func() { aborted = true }, whole); err != nil {
		if admitID != "" {
			// The client gets an error, not this query: free its budget.
			s.releaseSlot(admitID)
		}
		s.fail(ctx, &protocol.UpstreamError{Cluster: c.name, Sent: true, Poll: mode == modeJSON, Err: err}, mode == modeStatementPOST)
	}
}

// pageDone is what a whole page tells, once it is the client's: a
// running query's admission lease is renewed, a last page completes it.
func (s *Server) pageDone(info *protocol.PageInfo, cluster string) {
	if info.ID != "" && s.admit != nil {
		if info.HasNextURI {
			s.admit.Touch(info.ID)
		} else {
			s.finishQuery(info.ID)
		}
	}
	if info.ID != "" && !info.HasNextURI {
		s.complete(info, cluster)
	}
}

// rewriteLocation points redirects at the cluster back through the proxy.
func (s *Server) rewriteLocation(ctx *fasthttp.RequestCtx, c *cluster) {
	loc := string(ctx.Response.Header.Peek("Location"))
	if loc == "" {
		return
	}
	base, target, ok := protocol.SplitBase(loc)
	if !ok || !strings.EqualFold(base, c.base) {
		return
	}
	if c == s.clusters[0] && (target == "/ui" || strings.HasPrefix(target, "/ui/")) {
		// The first cluster serves the unrouted /ui/, whose path its
		// login cookie (Path=/ui) matches: a routed redirect there would
		// never carry the cookie and loop back to the login page.
		ctx.Response.Header.Set("Location", s.publicBase(ctx)+target)
		return
	}
	ctx.Response.Header.Set("Location", s.publicBase(ctx)+s.signer.RoutedPath(c.name, target))
}

func isJSON(ct []byte) bool {
	return len(ct) >= 16 && strings.EqualFold(string(ct[:16]), "application/json")
}

// releasingReader streams an upstream body and releases the upstream
// response when fasthttp closes it.
type releasingReader struct {
	r     io.Reader
	close func() error
}

func (r *releasingReader) Read(p []byte) (int, error) { return r.r.Read(p) }

func (r *releasingReader) Close() error {
	if r.close == nil {
		return nil
	}
	c := r.close
	r.close = nil
	return c()
}
