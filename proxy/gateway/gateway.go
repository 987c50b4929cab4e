package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// What Trino Gateway does (checked against gateway-ha 18: the requests it
// sends are in testdata/trino-gateway-18, the end-to-end test is
// testing/e2e/gateway), and so what this endpoint must do:
//
//   - It asks for every request it cannot stick to a cluster by query id:
//     new statements, but also GET /v1/info, /ui/... Only a new statement
//     (method POST, trinoQueryProperties.isNewQuerySubmission) is
//     estimated; the rest get an empty answer at once.
//   - It sends the client's request headers (X-Trino-User, Authorization,
//     X-Trino-Catalog, X-Trino-Prepared-Statement, ... and the client's
//     Host) minus rulesExternalConfiguration.excludeHeaders, and a JSON
//     body whose trinoQueryProperties.body is the statement, present only
//     with requestAnalyzerConfig.analyzeRequest: true and only when the
//     client's Content-Type names charset=utf-8 (the Trino CLI and JDBC,
//     trino-go-client and the Python client do; curl's default does
//     not). For EXECUTE it
//     holds the prepared statement's text instead (its ? parameters make
//     the EXPLAIN fail, so such statements fail open).
//   - Its answer must be 200 with Content-Type application/json. Any other
//     status, or a connection error or a timeout
//     (serverConfig router.http-client.request-timeout, 5 minutes by
//     default), makes it log an error and route by the client's
//     X-Trino-Routing-Group header, else its routing.defaultRoutingGroup.
//   - routingGroup null or "" means its defaultRoutingGroup.
//   - A non-empty errors list is ignored unless
//     rulesExternalConfiguration.propagateErrors is true; then the client
//     gets HTTP 400 with the errors and the query never runs. So errors
//     is for refusing a query, never for failing open: every estimate
//     failure here answers 200 with routingGroup null and errors empty,
//     and says why in the X-Prestroid-Decision response header (and the
//     log).
//   - externalHeaders are set on the request it forwards to the chosen
//     cluster (replacing a client header of exactly that name).

// RoutingGroup maps a band of predicted cost to a Trino Gateway routing
// group. Groups are checked in order as the proxy's cost classes are
// (routing.ClassFor): a query goes to the first whose MaxCPUSeconds, and
// MaxPeakMemory (bytes) and MaxElapsed (seconds) where its estimate
// predicts them, hold it; 0 means unbounded.
type RoutingGroup struct {
	Name          string
	MaxCPUSeconds float64
	MaxPeakMemory float64
	MaxElapsed    float64
	// Class is the cost class the group stands for, named in the client
	// tag ClassTag+Class when Handler.ClassTag is set. Empty means Name.
	Class string
}

// Handler answers POST /v1/routing. The core authorizes the caller (the
// admin token) and then calls Serve; the fields are plain values it fills
// from its options.
type Handler struct {
	// Estimate estimates sql as the caller whose headers are h, within
	// the core's time budget (an error matching context.DeadlineExceeded
	// past it). Nil means no estimator: every answer is "no-estimator".
	Estimate func(sql string, h http.Header) (estimate.Estimate, error)
	// ErrBusy is the error (wrapped or not) Estimate returns when every
	// planner is at its EXPLAIN bound; the query then fails open at once.
	ErrBusy error
	// Groups are the routing groups, in increasing order of
	// MaxCPUSeconds. Empty means the answer carries only the estimate
	// header.
	Groups []RoutingGroup
	// ClassQuantile is the quantile of each estimate that picks its group
	// (estimate.Estimate.Quantile: zero means the median).
	ClassQuantile float64
	// KeepClientEstimate keeps an X-Trino-Resource-Estimate the client
	// sent: the answer then sets none.
	KeepClientEstimate bool
	// ClassTag, when set, adds the client tag ClassTag+class of the
	// chosen group to the X-Trino-Client-Tags the answer sets.
	ClassTag string
	// Log receives the estimate failures. Nil means slog.Default().
	Log *slog.Logger
}

// request is the part of Trino Gateway's RoutingGroupExternalBody
// the routing endpoint reads.
type request struct {
	// TrinoQueryProperties is null without the gateway's
	// requestAnalyzerConfig.analyzeRequest.
	TrinoQueryProperties *struct {
		Body                 string  `json:"body"`
		QueryType            string  `json:"queryType"`
		DefaultCatalog       *string `json:"defaultCatalog"`
		DefaultSchema        *string `json:"defaultSchema"`
		IsNewQuerySubmission bool    `json:"isNewQuerySubmission"`
		// IsQueryParsingSuccessful is false when the gateway's SQL parser
		// refused the body (a syntax error, or syntax newer than it).
		IsQueryParsingSuccessful bool `json:"isQueryParsingSuccessful"`
	} `json:"trinoQueryProperties"`
	Method     string `json:"method"`
	RequestURI string `json:"requestURI"`
}

// Response is Trino Gateway's external routing response
// (ExternalRouterResponse).
type Response struct {
	// RoutingGroup is the group to route to; nil lets the gateway use its
	// default group.
	RoutingGroup *string `json:"routingGroup"`
	// Errors refuse the query when the gateway propagates them; this
	// endpoint fails open instead and sends an empty list, except for a
	// request body that is not JSON (HTTP 400).
	Errors []string `json:"errors"`
	// ExternalHeaders go with the query to the cluster.
	ExternalHeaders map[string]string `json:"externalHeaders"`
}

// Serve answers one of Trino Gateway's external routing requests (see the
// comment at the top of this file).
func (g *Handler) Serve(ctx *fasthttp.RequestCtx) {
	resp := Response{Errors: []string{}, ExternalHeaders: map[string]string{}}
	var req request
	if err := json.Unmarshal(ctx.Request.Body(), &req); err != nil {
		// Not what a gateway sends: a 400 makes it log the error and
		// route by its own default.
		resp.Errors = append(resp.Errors, "prestroid: bad request body: "+err.Error())
		protocol.WriteJSON(ctx, fasthttp.StatusBadRequest, resp)
		return
	}
	why, e := g.route(&ctx.Request.Header, &req, &resp)
	protocol.WriteJSON(ctx, fasthttp.StatusOK, resp)
	ctx.Response.Header.Set("X-Prestroid-Decision", why)
	if e.Estimated {
		ctx.Response.Header.SetBytesV("X-Prestroid-Estimate", e.AppendHeader(nil))
	}
}

// noAnalysisWarned is set once the warning that the gateway sends no
// query text was logged (once a process).
var noAnalysisWarned atomic.Bool

// route fills resp for one gateway request and returns the decision's
// text (in the X-Prestroid-Decision forms of the proxy: "routed: group
// G", "estimated" (no groups configured), "not-estimated: REASON",
// "fail-open: REASON", "no-estimator") and the estimate it acted on.
func (g *Handler) route(h *fasthttp.RequestHeader, req *request, resp *Response) (string, estimate.Estimate) {
	p := req.TrinoQueryProperties
	var none estimate.Estimate
	switch {
	case g.Estimate == nil:
		return "no-estimator", none
	case req.Method != "" && req.Method != fasthttp.MethodPost:
		// Nothing from the request body is echoed in the header.
		return "not-estimated: not a new statement (not a POST)", none
	case p == nil:
		if noAnalysisWarned.CompareAndSwap(false, true) {
			g.log().Warn("Trino Gateway sends no query text to /v1/routing: set its requestAnalyzerConfig.analyzeRequest: true (every query goes to its default group meanwhile; logged once)")
		}
		return "not-estimated: no trinoQueryProperties (the gateway's requestAnalyzerConfig.analyzeRequest is off)", none
	case !p.IsNewQuerySubmission:
		return "not-estimated: not a new statement", none
	case strings.TrimSpace(p.Body) == "":
		// The gateway reads the body only under a Content-Type with
		// charset=utf-8 and up to requestAnalyzerConfig.maxBodySize.
		return "not-estimated: no query text (the client's Content-Type has no charset=utf-8, or the statement exceeds the gateway's requestAnalyzerConfig.maxBodySize)", none
	case req.RequestURI != "" && req.RequestURI != "/v1/statement" && (!p.IsQueryParsingSuccessful || p.QueryType == ""):
		// Another path of the gateway's statementPaths is estimated
		// only when the gateway parsed its body as SQL: a POST to any
		// other path (a UI login form) must never become an EXPLAIN.
		return "not-estimated: not /v1/statement and not SQL", none
	}
	hdr := protocol.CallerHeaders(h)
	// The gateway forwards the client's catalog and schema headers and
	// reports them again; fill them in if only the report came.
	if hdr.Get("X-Trino-Catalog") == "" && p.DefaultCatalog != nil && *p.DefaultCatalog != "" {
		hdr.Set("X-Trino-Catalog", *p.DefaultCatalog)
	}
	if hdr.Get("X-Trino-Schema") == "" && p.DefaultSchema != nil && *p.DefaultSchema != "" {
		hdr.Set("X-Trino-Schema", *p.DefaultSchema)
	}
	e, err := g.Estimate(p.Body, hdr)
	switch {
	case err != nil && errors.Is(err, context.DeadlineExceeded):
		g.log().Warn("routing estimate over budget; the gateway's default group takes the query", "error", err)
		return "fail-open: " + routing.ReasonEstimateOverBudget, none
	case err != nil && g.ErrBusy != nil && errors.Is(err, g.ErrBusy):
		return "fail-open: " + routing.ReasonPlannersBusy, none
	case err != nil:
		g.log().Warn("routing estimate failed; the gateway's default group takes the query", "error", err)
		return "fail-open: " + routing.ReasonEstimateFailed, none
	case !e.Estimated:
		return "not-estimated: " + e.Reason, none
	}
	if !(g.KeepClientEstimate && hdr.Get("X-Trino-Resource-Estimate") != "") {
		resp.ExternalHeaders["X-Trino-Resource-Estimate"] = e.ResourceEstimate()
	}
	// The group as the routing policy picks a class: by the estimate's
	// ClassQuantile.
	classes := make([]routing.CostClass, len(g.Groups))
	for i, grp := range g.Groups {
		classes[i] = routing.CostClass{Name: grp.Name, MaxCPUSeconds: grp.MaxCPUSeconds,
			MaxPeakMemory: grp.MaxPeakMemory, MaxElapsed: grp.MaxElapsed}
	}
	gi, over := routing.ClassFor(classes, e, g.ClassQuantile)
	if gi < 0 {
		return "estimated", e
	}
	grp := g.Groups[gi]
	resp.RoutingGroup = &grp.Name
	if g.ClassTag != "" {
		class := grp.Class
		if class == "" {
			class = grp.Name
		}
		tags := strings.Join(hdr.Values("X-Trino-Client-Tags"), ",")
		if tags != "" {
			tags += ","
		}
		resp.ExternalHeaders["X-Trino-Client-Tags"] = tags + g.ClassTag + class
	}
	why := "routed: group " + grp.Name
	for _, t := range over {
		why += "; over every class's " + t.String()
	}
	return why, e
}

func (g *Handler) log() *slog.Logger {
	if g.Log == nil {
		return slog.Default()
	}
	return g.Log
}
