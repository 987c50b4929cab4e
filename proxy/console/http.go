package console

import (
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"math"
	"mime"
	"path"
	"strings"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/guardrail"
)

// The console's HTTP side: the page's files (Handler.ServePage) and the
// JSON endpoints it reads (Handler.ServeAPI), all under Prefix:
//
//	GET  /prestroid/api/clusters?minutes=N  health, class, load, queries routed in the last N minutes
//	GET  /prestroid/api/decisions?limit=N   the most recent placed queries, newest first
//	GET  /prestroid/api/queue               the admission queue and the budgets holding each query
//	POST /prestroid/api/queue/cancel        {"id": ID}: remove a waiting query
//	GET  /prestroid/api/estimator           model, caches, history, q-error, drift
//	GET  /prestroid/api/guardrails?limit=N  the guardrails and their recent refusals and dry-run hits
//	GET  /prestroid/api/usage?by=user&window=1h  cost per user, group or source (package usage)
//
// Every endpoint answers JSON; README.md ("Web console") documents the
// fields.

// Prefix is where the console lives; "/prestroid" (no slash) redirects
// to it.
const Prefix = "/prestroid/"

const apiPrefix = Prefix + "api/"

// The page: index.html at the root of the package's directory.
//
//go:embed index.html app.js app.css vendor
var assets embed.FS

// Match reports whether path is the console's.
func Match(path string) bool {
	return path == "/prestroid" || strings.HasPrefix(path, Prefix)
}

// Proxy is what the console reads from the proxy that serves it, at each
// request. The proxy implements it.
type Proxy interface {
	// Clusters is the state of each configured cluster now, in the
	// configuration's order (the first is the default).
	Clusters() []ClusterState
	// TablesScanned counts the tables the estimated queries scanned since
	// the process started, by whether the model knew them.
	TablesScanned() (known, unknown uint64)
}

// ClusterState is one cluster as the proxy knows it now.
type ClusterState struct {
	Name, URL, Class string
	// Engine is "trino", "presto" or "unknown" (not yet detected).
	Engine  string
	Healthy bool
	Load    int64     // what routing compares: running + queued + sent since the check
	Checked time.Time // the last health check; zero before the first
	// Err says why it is unhealthy, LoadErr why Running and Queued could
	// not be read (from the last check).
	Err, LoadErr    string
	Running, Queued int
}

// Options are the console's parts. Ring and Proxy are required; the rest
// may be zero.
type Options struct {
	// Ring holds the recent placed queries; the proxy feeds it.
	Ring *Ring
	// Proxy answers for the clusters and the tables scanned.
	Proxy Proxy
	// Monitor is true when the clusters' health and load are checked
	// (routing.monitor_interval > 0).
	Monitor bool
	// Store is the admission store: the queue view lists its waiting
	// queries and the cancel button removes one. Nil means admission
	// control is off (the queue view says so, cancel answers 404).
	Store admission.Store
	// Budgets are the admission budgets the queue view compares waiting
	// queries with; set when Store is.
	Budgets *admission.Options
	// Guard is the proxy's guardrails: the guardrails view lists its
	// rules and recent refusals. Nil means none are configured.
	Guard *guardrail.Guard
	// Estimator is true when the proxy estimates queries.
	Estimator bool
	// EstimatorStats, when set, is asked for the estimator's model, caches
	// and history at each request of the estimator view. Nil shows none.
	EstimatorStats func() estimate.Stats
	// Usage serves GET /prestroid/api/usage (usage.Recorder.ServeAPI).
	// Nil means accounting is off: the endpoint answers 404.
	Usage fasthttp.RequestHandler
	// Logger receives the console's warnings and operator actions. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// Handler serves the console. Create it with New; it is safe for
// concurrent use. It checks no token: the proxy authorizes a request
// before it calls ServeAPI.
type Handler struct {
	opts Options
	log  *slog.Logger
}

// New returns the console's handler over o.
func New(o Options) *Handler {
	h := &Handler{opts: o, log: o.Logger}
	if h.log == nil {
		h.log = slog.Default()
	}
	return h
}

// ServePage serves the page's files, which hold no data and need no
// token; it reports false, writing nothing, for the JSON endpoints, which
// the proxy serves with ServeAPI after its token check.
func (h *Handler) ServePage(ctx *fasthttp.RequestCtx) bool {
	p := string(ctx.Path())
	if strings.HasPrefix(p, apiPrefix) {
		return false
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		plain(ctx, fasthttp.StatusMethodNotAllowed, "prestroid: method not allowed")
		return true
	}
	if p == "/prestroid" {
		ctx.Redirect(Prefix, fasthttp.StatusPermanentRedirect)
		return true
	}
	name := strings.TrimPrefix(p, Prefix)
	if name == "" {
		name = "index.html"
	}
	b, err := fs.ReadFile(assets, name) // fs paths: no "..", no leading "/"
	if err != nil || path.Clean(name) != name {
		plain(ctx, fasthttp.StatusNotFound, "prestroid: not found")
		return true
	}
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" {
		ct = "text/plain; charset=utf-8"
	}
	rh := &ctx.Response.Header
	securityHeaders(rh)
	rh.Set("Cache-Control", "no-cache")
	if strings.HasSuffix(name, ".html") {
		// Everything the page loads comes from here: no inline script, no
		// other origin, no framing.
		rh.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		rh.Set("X-Frame-Options", "DENY")
	}
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType(ct)
	ctx.SetBody(b)
	return true
}

// plain answers status with a one-line text body.
func plain(ctx *fasthttp.RequestCtx, status int, msg string) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("text/plain; charset=utf-8")
	ctx.SetBodyString(msg + "\n")
}

// securityHeaders are set on every console answer.
func securityHeaders(h *fasthttp.ResponseHeader) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
}

// ServeAPI serves the JSON endpoints; the proxy calls it for a path
// under Prefix that ServePage left, once the request is authorized.
func (h *Handler) ServeAPI(ctx *fasthttp.RequestCtx) {
	name := strings.TrimPrefix(string(ctx.Path()), apiPrefix)
	if name == "queue/cancel" {
		if !ctx.IsPost() {
			ctx.Response.Header.Set("Allow", "POST")
			h.error(ctx, fasthttp.StatusMethodNotAllowed, "use POST")
			return
		}
		h.cancel(ctx)
		return
	}
	if !ctx.IsGet() && !ctx.IsHead() {
		ctx.Response.Header.Set("Allow", "GET, HEAD")
		h.error(ctx, fasthttp.StatusMethodNotAllowed, "use GET")
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
		h.writeJSON(ctx, h.clusters(now, minutes))
	case "decisions":
		limit := 200
		if v, err := args.GetUint("limit"); err == nil {
			limit = v
		}
		h.writeJSON(ctx, decisionsView{Capacity: h.opts.Ring.capacity(), Decisions: decisions(h.opts.Ring.snapshot(limit))})
	case "queue":
		h.writeJSON(ctx, h.queue(now))
	case "estimator":
		h.writeJSON(ctx, h.estimator(h.opts.Ring.snapshot(h.opts.Ring.capacity())))
	case "guardrails":
		limit := guardrail.RecentSize
		if v, err := args.GetUint("limit"); err == nil {
			limit = v
		}
		h.writeJSON(ctx, guardrails(h.opts.Guard, limit))
	case "usage":
		if h.opts.Usage == nil {
			h.error(ctx, fasthttp.StatusNotFound, "cost accounting is off (usage.disabled)")
			return
		}
		securityHeaders(&ctx.Response.Header)
		h.opts.Usage(ctx)
	default:
		h.error(ctx, fasthttp.StatusNotFound, "no such console endpoint")
	}
}

func (h *Handler) writeJSON(ctx *fasthttp.RequestCtx, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		h.log.Error("console: encoding JSON", "error", err)
		h.error(ctx, fasthttp.StatusInternalServerError, "encoding failed")
		return
	}
	securityHeaders(&ctx.Response.Header)
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

func (h *Handler) error(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": "prestroid: " + msg})
	securityHeaders(&ctx.Response.Header)
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

type clustersView struct {
	WindowMinutes int           `json:"window_minutes"` // what routed counts over
	Monitor       bool          `json:"monitor"`        // health and load are checked (routing.monitor_interval > 0)
	Clusters      []clusterView `json:"clusters"`
}

type clusterView struct {
	Name    string     `json:"name"`
	URL     string     `json:"url"`
	Class   string     `json:"class,omitempty"`
	Engine  string     `json:"engine"`  // trino, presto, or unknown until the monitor detects it
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

func (h *Handler) clusters(now time.Time, minutes int) clustersView {
	states := h.opts.Proxy.Clusters()
	out := clustersView{WindowMinutes: minutes, Monitor: h.opts.Monitor, Clusters: make([]clusterView, len(states))}
	for i, c := range states {
		cc := clusterView{Name: c.Name, URL: c.URL, Class: c.Class, Engine: c.Engine, Default: i == 0, Healthy: c.Healthy, Load: c.Load,
			Routed: h.opts.Ring.routedSince(c.Name, now, minutes)}
		if !c.Checked.IsZero() {
			t := c.Checked
			cc.Checked, cc.Error, cc.LoadError, cc.Running, cc.Queued = &t, c.Err, c.LoadErr, c.Running, c.Queued
		}
		out.Clusters[i] = cc
	}
	return out
}

// ---- decisions

type decisionsView struct {
	Capacity  int            `json:"capacity"` // the ring's size (console.decisions)
	Decisions []decisionView `json:"decisions"`
}

type decisionView struct {
	Time    time.Time `json:"time"` // when its first page came back
	QueryID string    `json:"query_id"`
	// UIPath is the query in Trino's web UI, through this proxy (a path:
	// on the listener serving the console).
	UIPath   string        `json:"ui_path"`
	User     string        `json:"user"`
	Source   string        `json:"source,omitempty"`
	Cluster  string        `json:"cluster"`
	Class    string        `json:"class,omitempty"`
	Kind     string        `json:"kind"`
	Decision string        `json:"decision"` // X-Prestroid-Decision
	Queued   bool          `json:"queued"`
	Estimate *estimateView `json:"estimate,omitempty"` // absent when not estimated
	DecideMS float64       `json:"decide_ms"`
	// Set once the last page passed through this replica.
	State     string     `json:"state,omitempty"`
	ErrorName string     `json:"error_name,omitempty"`
	Finished  *time.Time `json:"finished,omitempty"`
	ActualCPU *float64   `json:"actual_cpu_seconds,omitempty"`
	// ActualMemory and ActualElapsed: Trino's peak memory (bytes) and
	// elapsed time (seconds), with the last page.
	ActualMemory  *float64 `json:"actual_peak_memory_bytes,omitempty"`
	ActualElapsed *float64 `json:"actual_elapsed_seconds,omitempty"`
	QError        *float64 `json:"qerror,omitempty"` // FINISHED estimated queries
}

type estimateView struct {
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
	// PeakMemoryBytes and ElapsedSeconds are the other targets' medians,
	// absent when the estimate does not predict them.
	PeakMemoryBytes float64 `json:"peak_memory_bytes,omitempty"`
	ElapsedSeconds  float64 `json:"elapsed_seconds,omitempty"`
}

// uiQueryPage is a query's page in Trino's web UI, which the proxy serves
// from the cluster that ran it.
const uiQueryPage = "/ui/query.html?"

func decisions(recs []Record) []decisionView {
	out := make([]decisionView, len(recs))
	for i := range recs {
		r := &recs[i]
		d := decisionView{Time: r.Routed, QueryID: r.QueryID, UIPath: uiQueryPage + r.QueryID, User: r.User, Source: r.Source,
			Cluster: r.Cluster, Class: r.Class, Kind: r.Kind, Decision: r.Decision, Queued: r.Queued,
			DecideMS: float64(r.Took.Microseconds()) / 1000}
		if r.Estimated {
			e := r.Estimate
			lo, hi := e.Interval()
			d.Estimate = &estimateView{CPUSeconds: finite(e.CPUSeconds), LoSeconds: finite(lo), HiSeconds: finite(hi),
				Source: e.Source.String(), Sigma: finite(e.Sigma), Model: e.Model, ModelCPUSeconds: finite(e.ModelCPUSeconds),
				Cached: e.Cached, ExplainSkipped: e.ExplainSkipped, Tables: e.Tables, UnknownTables: e.UnknownTables}
			if e.PeakMemory.Known() {
				d.Estimate.PeakMemoryBytes = finite(e.PeakMemory.Median)
			}
			if e.Elapsed.Known() {
				d.Estimate.ElapsedSeconds = finite(e.Elapsed.Median)
			}
		}
		if !r.Finished.IsZero() {
			f, cpu := r.Finished, r.CPUSeconds
			d.State, d.ErrorName, d.Finished, d.ActualCPU = r.State, r.ErrorName, &f, &cpu
			if r.PeakMemoryBytes > 0 {
				m := r.PeakMemoryBytes
				d.ActualMemory = &m
			}
			if r.ElapsedSeconds > 0 {
				el := r.ElapsedSeconds
				d.ActualElapsed = &el
			}
			if q, ok := r.qError(); ok {
				d.QError = &q
			}
		}
		out[i] = d
	}
	return out
}
