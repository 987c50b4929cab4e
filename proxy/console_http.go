package proxy

import (
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"mime"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy/admission"
)

// The web console (issue 19): one page under consolePrefix on the admin
// surface (the admin listener when there is one, else the client listener)
// that reads the JSON endpoints below. The page's files (HTML, script,
// style, the vendored chart library) hold no data and are served to
// anyone who reaches the surface, since a browser cannot send a bearer
// header when it loads a page; the JSON and the cancel button need the
// admin token (adminAuthorized) when one is configured, which the page
// asks for once and sends as X-Prestroid-Admin-Token on every fetch.
//
//	GET  /prestroid/api/clusters?minutes=N  health, class, load, queries routed in the last N minutes
//	GET  /prestroid/api/decisions?limit=N   the most recent placed queries, newest first
//	GET  /prestroid/api/queue               the admission queue and the budgets holding each query
//	POST /prestroid/api/queue/cancel        {"id": ID}: remove a waiting query
//	GET  /prestroid/api/estimator           model, caches, history, q-error, drift
//
// Every endpoint answers JSON; README.md ("Web console") documents the
// fields.

const (
	consolePrefix = "/prestroid/"
	consoleAPI    = consolePrefix + "api/"
)

//go:embed console
var consoleFiles embed.FS

// consoleAssets is the page's directory (index.html at its root).
var consoleAssets, _ = fs.Sub(consoleFiles, "console")

// isConsole reports whether path is the console's.
func isConsole(path string) bool {
	return path == "/prestroid" || strings.HasPrefix(path, consolePrefix)
}

// newConsoleRing is the ring of Options.ConsoleDecisions records (nil:
// the console is off).
func newConsoleRing(n int, clusters []*cluster) *decisionRing {
	if n <= 0 {
		return nil
	}
	names := make([]string, len(clusters))
	for i, c := range clusters {
		names[i] = c.name
	}
	return newDecisionRing(n, names)
}

// consoleShell serves the page's files, which need no token; it reports
// false for the JSON endpoints, which do.
func (s *Server) consoleShell(ctx *fasthttp.RequestCtx, p string) bool {
	if strings.HasPrefix(p, consoleAPI) {
		return false
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		s.plain(ctx, fasthttp.StatusMethodNotAllowed, "prestroid: method not allowed")
		return true
	}
	if p == "/prestroid" {
		ctx.Redirect(consolePrefix, fasthttp.StatusPermanentRedirect)
		return true
	}
	name := strings.TrimPrefix(p, consolePrefix)
	if name == "" {
		name = "index.html"
	}
	b, err := fs.ReadFile(consoleAssets, name) // fs paths: no "..", no leading "/"
	if err != nil || path.Clean(name) != name {
		s.plain(ctx, fasthttp.StatusNotFound, "prestroid: not found")
		return true
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "text/plain; charset=utf-8"
	}
	h := &ctx.Response.Header
	consoleHeaders(h)
	h.Set("Cache-Control", "no-cache")
	if strings.HasSuffix(name, ".html") {
		// Everything the page loads comes from here: no inline script, no
		// other origin, no framing.
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(ct)
	ctx.SetBody(b)
	return true
}

// consoleHeaders are set on every console answer.
func consoleHeaders(h *fasthttp.ResponseHeader) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// consoleJSON serves the JSON endpoints (after the token check).
func (s *Server) consoleJSON(ctx *fasthttp.RequestCtx, p string) {
	name := strings.TrimPrefix(p, consoleAPI)
	if name == "queue/cancel" {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			s.consoleError(ctx, fasthttp.StatusMethodNotAllowed, "use POST")
			return
		}
		s.consoleCancel(ctx)
		return
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		s.consoleError(ctx, fasthttp.StatusMethodNotAllowed, "use GET")
		return
	}
	now := time.Now()
	args := ctx.QueryArgs()
	switch name {
	case "clusters":
		minutes := 15
		if v, err := args.GetUint("minutes"); err == nil {
			minutes = min(max(v, 1), routedMinutes)
		}
		s.writeJSON(ctx, s.consoleClusters(now, minutes))
	case "decisions":
		limit := 200
		if v, err := args.GetUint("limit"); err == nil {
			limit = v
		}
		s.writeJSON(ctx, consoleDecisions{Capacity: s.ring.capacity(), Decisions: s.consoleDecisions(s.ring.snapshot(limit))})
	case "queue":
		s.writeJSON(ctx, s.consoleQueue(now))
	case "estimator":
		s.writeJSON(ctx, s.consoleEstimator(s.ring.snapshot(s.ring.capacity())))
	default:
		s.consoleError(ctx, fasthttp.StatusNotFound, "no such console endpoint")
	}
}

func (s *Server) writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		s.log.Error("console: encoding JSON", "error", err)
		s.consoleError(ctx, fasthttp.StatusInternalServerError, "encoding failed")
		return
	}
	consoleHeaders(&ctx.Response.Header)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (s *Server) consoleError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": "prestroid: " + msg})
	consoleHeaders(&ctx.Response.Header)
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// finite is v, or 0 when JSON cannot hold it (NaN, ±Inf).
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// ---- clusters

type consoleClusters struct {
	WindowMinutes int              `json:"window_minutes"` // what routed counts over
	Monitor       bool             `json:"monitor"`        // health and load are checked (routing.monitor_interval > 0)
	Clusters      []consoleCluster `json:"clusters"`
}

type consoleCluster struct {
	Name    string     `json:"name"`
	URL     string     `json:"url"`
	Class   string     `json:"class,omitempty"`
	Default bool       `json:"default"` // the first configured: plans, serves unrouted /ui/ and unestimated queries
	Healthy bool       `json:"healthy"`
	Checked *time.Time `json:"checked,omitempty"` // the last health check; absent before the first
	Error   string     `json:"error,omitempty"`   // why it is unhealthy
	// LoadError says why Running and Queued could not be read.
	LoadError string `json:"load_error,omitempty"`
	Running   int    `json:"running"`
	Queued    int    `json:"queued"`
	Load      int64  `json:"load"`   // running + queued + sent by this proxy since the check: what routing compares
	Routed    int64  `json:"routed"` // queries this proxy routed there in the window
}

func (s *Server) consoleClusters(now time.Time, minutes int) consoleClusters {
	out := consoleClusters{WindowMinutes: minutes, Monitor: s.opts.MonitorInterval > 0, Clusters: make([]consoleCluster, len(s.clusters))}
	for i, c := range s.clusters {
		cc := consoleCluster{Name: c.name, URL: c.url, Class: c.class, Default: i == 0, Healthy: c.Healthy(), Load: c.Load(),
			Routed: s.ring.routedSince(c.name, now, minutes)}
		if st := c.State(); st != nil {
			t := st.Checked
			cc.Checked, cc.Error, cc.LoadError, cc.Running, cc.Queued = &t, st.Err, st.LoadErr, st.Running, st.Queued
		}
		out.Clusters[i] = cc
	}
	return out
}

// ---- decisions

type consoleDecisions struct {
	Capacity  int               `json:"capacity"` // the ring's size (console.decisions)
	Decisions []consoleDecision `json:"decisions"`
}

type consoleDecision struct {
	Time    time.Time `json:"time"` // when its first page came back
	QueryID string    `json:"query_id"`
	// UIPath is the query in Trino's web UI, through this proxy (a path:
	// on the listener serving the console).
	UIPath   string           `json:"ui_path"`
	User     string           `json:"user"`
	Source   string           `json:"source,omitempty"`
	Cluster  string           `json:"cluster"`
	Class    string           `json:"class,omitempty"`
	Kind     string           `json:"kind"`
	Decision string           `json:"decision"` // X-Prestroid-Decision
	Queued   bool             `json:"queued"`
	Estimate *consoleEstimate `json:"estimate,omitempty"` // absent when not estimated
	DecideMS float64          `json:"decide_ms"`
	// Set once the last page passed through this replica.
	State     string     `json:"state,omitempty"`
	ErrorName string     `json:"error_name,omitempty"`
	Finished  *time.Time `json:"finished,omitempty"`
	ActualCPU *float64   `json:"actual_cpu_seconds,omitempty"`
	QError    *float64   `json:"qerror,omitempty"` // FINISHED estimated queries
}

type consoleEstimate struct {
	CPUSeconds      float64 `json:"cpu_seconds"`
	LoSeconds       float64 `json:"lo_seconds"` // the central 80% interval
	HiSeconds       float64 `json:"hi_seconds"`
	Source          string  `json:"source"`
	Sigma           float64 `json:"sigma"`
	Model           string  `json:"model,omitempty"`
	ModelCPUSeconds float64 `json:"model_cpu_seconds,omitempty"`
	Cached          bool    `json:"cached"`
	ExplainSkipped  bool    `json:"explain_skipped"`
	Tables          int     `json:"tables"`
	UnknownTables   int     `json:"unknown_tables"`
}

// uiQueryAPI is where Trino's web UI reads one query (its query.html
// page fetches this absolute path).
const (
	uiQueryPage = "/ui/query.html?"
	uiQueryAPI  = "/ui/api/query/"
)

func (s *Server) consoleDecisions(recs []decisionRecord) []consoleDecision {
	out := make([]consoleDecision, len(recs))
	for i := range recs {
		r := &recs[i]
		d := consoleDecision{Time: r.Routed, QueryID: r.QueryID, UIPath: uiQueryPage + r.QueryID, User: r.User, Source: r.Source,
			Cluster: r.Cluster, Class: r.Class, Kind: r.Kind.String(), Decision: r.Decision, Queued: r.Queued,
			DecideMS: float64(r.Took.Microseconds()) / 1000}
		if r.Estimated {
			e := r.Estimate
			lo, hi := e.Interval()
			d.Estimate = &consoleEstimate{CPUSeconds: finite(e.CPUSeconds), LoSeconds: finite(lo), HiSeconds: finite(hi),
				Source: e.Source.String(), Sigma: finite(e.Sigma), Model: e.Model, ModelCPUSeconds: finite(e.ModelCPUSeconds),
				Cached: e.Cached, ExplainSkipped: e.ExplainSkipped, Tables: e.Tables, UnknownTables: e.UnknownTables}
		}
		if !r.Finished.IsZero() {
			f, cpu := r.Finished, r.CPUSeconds
			d.State, d.ErrorName, d.Finished, d.ActualCPU = r.State, r.ErrorName, &f, &cpu
			if q, ok := r.qError(); ok {
				d.QError = &q
			}
		}
		out[i] = d
	}
	return out
}

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

// ---- queue

type consoleQueue struct {
	Enabled  bool               `json:"enabled"` // admission control is on
	Store    string             `json:"store,omitempty"`
	Queued   int                `json:"queued"`
	InFlight int                `json:"in_flight"`
	Limits   map[string]float64 `json:"limits,omitempty"` // the budgets set, by configuration key
	Queries  []consoleQueued    `json:"queries"`
	Error    string             `json:"error,omitempty"` // the store did not (fully) answer
}

type consoleQueued struct {
	ID            string        `json:"id"`
	User          string        `json:"user"`
	Group         string        `json:"group"`
	CPUSeconds    float64       `json:"cpu_seconds"` // its estimate (0: not estimated)
	Enqueued      time.Time     `json:"enqueued"`
	WaitedSeconds float64       `json:"waited_seconds"`
	Position      int           `json:"position"` // earlier queries of the same user ahead of it
	HeldBy        []consoleHold `json:"held_by"`  // the budgets it does not fit; empty: it is next to go
}

// consoleHold is one budget a waiting query does not fit.
type consoleHold struct {
	Budget   string  `json:"budget"`    // its configuration key, e.g. admission.user_max_queries
	Scope    string  `json:"scope"`     // global, user NAME or group NAME
	InFlight float64 `json:"in_flight"` // queries, or predicted CPU seconds, in flight in the scope
	Limit    float64 `json:"limit"`
	Needs    float64 `json:"needs"` // what the query would add: 1 query, or its CPU seconds
}

// consoleQueueMax bounds the queries the queue view lists.
const consoleQueueMax = 500

func (s *Server) consoleQueue(now time.Time) consoleQueue {
	out := consoleQueue{Queries: []consoleQueued{}}
	if s.admit == nil {
		return out
	}
	o := s.opts.Admission
	out.Enabled, out.Store = true, s.admit.Kind()
	out.Limits = map[string]float64{}
	for key, v := range map[string]float64{"admission.max_queries": float64(o.MaxQueries), "admission.max_cpu_seconds": o.MaxCPUSeconds,
		"admission.user_max_queries": float64(o.UserMaxQueries), "admission.user_max_cpu_seconds": o.UserMaxCPUSeconds,
		"admission.group_max_queries": float64(o.GroupMaxQueries), "admission.group_max_cpu_seconds": o.GroupMaxCPUSeconds} {
		if v > 0 {
			out.Limits[key] = v
		}
	}
	c, cancel := admission.StoreCtx()
	defer cancel()
	var errs []string
	q, in, err := s.admit.Lengths(c)
	if err != nil {
		errs = append(errs, err.Error())
	}
	out.Queued, out.InFlight = q, in
	list, err := s.admit.Queue(c, consoleQueueMax)
	if err != nil {
		errs = append(errs, err.Error())
	}
	out.Error = strings.Join(errs, "; ")
	slices.SortStableFunc(list, func(a, b admission.Queued) int { return a.Enqueued.Compare(b.Enqueued) })
	for _, w := range list {
		out.Queries = append(out.Queries, consoleQueued{ID: w.ID, User: w.User, Group: w.Group, CPUSeconds: finite(w.CPU),
			Enqueued: w.Enqueued, WaitedSeconds: max(now.Sub(w.Enqueued).Seconds(), 0), Position: w.Position, HeldBy: heldBy(o, w)})
	}
	return out
}

// heldBy lists the budgets q does not fit now, by the stores' own rule
// (memStore.fits, fits in lua/admission.lua): a scope with nothing in
// flight admits one query whatever its size.
func heldBy(o *admission.Options, q admission.Queued) []consoleHold {
	scopes := [3]struct {
		scope, key string
		n          int
		cpu        float64
	}{
		{"global", "admission.", o.MaxQueries, o.MaxCPUSeconds},
		{"user " + q.User, "admission.user_", o.UserMaxQueries, o.UserMaxCPUSeconds},
		{"group " + q.Group, "admission.group_", o.GroupMaxQueries, o.GroupMaxCPUSeconds},
	}
	out := []consoleHold{}
	for i, sc := range scopes {
		u := q.Use[i]
		if u.Queries == 0 {
			continue
		}
		if sc.n > 0 && u.Queries+1 > sc.n {
			out = append(out, consoleHold{Budget: sc.key + "max_queries", Scope: sc.scope, InFlight: float64(u.Queries), Limit: float64(sc.n), Needs: 1})
		}
		if sc.cpu > 0 && u.CPU+q.CPU > sc.cpu {
			out = append(out, consoleHold{Budget: sc.key + "max_cpu_seconds", Scope: sc.scope, InFlight: finite(u.CPU), Limit: sc.cpu, Needs: finite(q.CPU)})
		}
	}
	return out
}

// consoleCancel removes a waiting query: POST {"id": ID} as JSON (a form
// cannot send that content type across origins without a preflight this
// proxy never answers).
func (s *Server) consoleCancel(ctx *fasthttp.RequestCtx) {
	if ct := string(ctx.Request.Header.ContentType()); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		s.consoleError(ctx, fasthttp.StatusUnsupportedMediaType, "send the id as application/json")
		return
	}
	var req struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(ctx.Request.Body(), &req); err != nil || !validQueryID(req.ID) {
		s.consoleError(ctx, fasthttp.StatusBadRequest, `want {"id": QUEUED_QUERY_ID}`)
		return
	}
	if s.admit == nil {
		s.consoleError(ctx, fasthttp.StatusNotFound, "admission control is off: nothing waits")
		return
	}
	c, cancel := admission.StoreCtx()
	ok, err := s.admit.Cancel(c, req.ID, cancelByOperator)
	cancel()
	switch {
	case err != nil:
		s.log.Warn("console: cancelling a queued query failed", "query", req.ID, "error", err)
		s.consoleError(ctx, fasthttp.StatusServiceUnavailable, "the admission store did not answer: "+err.Error())
	case !ok:
		s.consoleError(ctx, fasthttp.StatusNotFound, "query "+strconv.Quote(req.ID)+" is not waiting (admitted, finished or unknown)")
	default:
		s.log.Info("console: queued query cancelled by an operator", "query", req.ID)
		s.writeJSON(ctx, map[string]any{"id": req.ID, "canceled": true})
	}
}
