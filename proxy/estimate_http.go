package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
)

// The estimate endpoints expose Options.Estimator without running the
// query:
//
//	POST /v1/estimate   Prestroid's own: SQL (JSON or plain text) in, the
//	                    estimate as JSON out (the same object as
//	                    `prestroid estimate --json`).
//	POST /v1/routing    Trino Gateway's external routing service: the
//	                    gateway posts the client's headers and a JSON body
//	                    whose trinoQueryProperties.body is the query text;
//	                    the answer names a routing group (from
//	                    Options.RoutingGroups) and carries
//	                    X-Trino-Resource-Estimate in externalHeaders.
//
// Both plan on the default cluster, as the caller (X-Trino-* headers and
// Authorization of the request).

// RoutingGroup maps a band of predicted CPU time to a Trino Gateway
// routing group. Groups are checked in order: a query goes to the first
// whose MaxCPUSeconds is at least its estimate; 0 means unbounded.
type RoutingGroup struct {
	Name          string
	MaxCPUSeconds float64
}

// estimateRequest is the JSON body of POST /v1/estimate.
type estimateRequest struct {
	SQL string `json:"sql"`
	// Headers are Trino client headers (X-Trino-User, X-Trino-Catalog,
	// ...), a string or a list of strings each; they are added to the
	// request's own X-Trino-* headers, replacing those of the same name.
	Headers map[string]json.RawMessage `json:"headers"`
}

// EstimateJSON is the answer of POST /v1/estimate.
type EstimateJSON struct {
	Estimated   bool    `json:"estimated"`
	Reason      string  `json:"reason,omitempty"`
	CPUSeconds  float64 `json:"cpu_seconds"`
	CPUTime     string  `json:"cpu_time,omitempty"` // Trino duration, as in X-Trino-Resource-Estimate
	Model       string  `json:"model,omitempty"`
	ExplainMS   float64 `json:"explain_ms"`
	FeaturizeUS int64   `json:"featurize_us"`
	InferUS     int64   `json:"infer_us"`
	Cached      bool    `json:"cached"`
	// Source is the cascade stage that made the estimate; LoSeconds and
	// HiSeconds the central 80% interval, Sigma its log spread.
	Source         string  `json:"source,omitempty"`
	LoSeconds      float64 `json:"lo_seconds,omitempty"`
	HiSeconds      float64 `json:"hi_seconds,omitempty"`
	Sigma          float64 `json:"sigma,omitempty"`
	ExplainSkipped bool    `json:"explain_skipped,omitempty"`
	Error          string  `json:"error,omitempty"`
}

// NewEstimateJSON renders an estimate as the endpoint does.
func NewEstimateJSON(e Estimate) EstimateJSON {
	out := EstimateJSON{Estimated: e.Estimated, Reason: e.Reason, Model: e.Model, Cached: e.Cached,
		ExplainMS: float64(e.Explain.Microseconds()) / 1000, FeaturizeUS: e.Featurize.Microseconds(), InferUS: e.Infer.Microseconds()}
	if e.Estimated {
		out.CPUSeconds = e.CPUSeconds
		out.CPUTime = TrinoDuration(e.CPUSeconds)
		out.Source, out.Sigma, out.ExplainSkipped = e.Source.String(), e.Sigma, e.ExplainSkipped
		out.LoSeconds, out.HiSeconds = e.Interval()
	}
	return out
}

// gatewayRequest is the part of Trino Gateway's RoutingGroupExternalBody
// the routing endpoint reads.
type gatewayRequest struct {
	TrinoQueryProperties *struct {
		Body           string  `json:"body"`
		DefaultCatalog *string `json:"defaultCatalog"`
		DefaultSchema  *string `json:"defaultSchema"`
	} `json:"trinoQueryProperties"`
	Method     string `json:"method"`
	RequestURI string `json:"requestURI"`
}

// GatewayResponse is Trino Gateway's external routing response.
type GatewayResponse struct {
	RoutingGroup    *string           `json:"routingGroup"`
	Errors          []string          `json:"errors"`
	ExternalHeaders map[string]string `json:"externalHeaders"`
}

func (s *Server) estimateFor(sql string, h http.Header) (Estimate, error) {
	if s.opts.Estimator == nil {
		return Estimate{}, errors.New("proxy: no estimator configured")
	}
	c, cancel := context.WithTimeout(context.Background(), s.opts.EstimateTimeout)
	defer cancel()
	def := s.defaultCluster()
	return s.opts.Estimator.Estimate(c, Query{SQL: sql, Header: h, Server: def.url, Planners: s.planners(def)})
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}

// serveEstimate answers POST /v1/estimate.
func (s *Server) serveEstimate(ctx *fasthttp.RequestCtx) {
	h := callerHeaders(&ctx.Request.Header)
	body := bytes.TrimSpace(ctx.Request.Body())
	sql := string(body)
	if len(body) > 0 && body[0] == '{' {
		var req estimateRequest
		if err := json.Unmarshal(body, &req); err != nil {
			writeJSON(ctx, fasthttp.StatusBadRequest, EstimateJSON{Error: "bad JSON body: " + err.Error()})
			return
		}
		for k, raw := range req.Headers {
			var vals []string
			var one string
			if err := json.Unmarshal(raw, &one); err == nil {
				vals = []string{one}
			} else if err := json.Unmarshal(raw, &vals); err != nil {
				writeJSON(ctx, fasthttp.StatusBadRequest, EstimateJSON{Error: fmt.Sprintf("header %s: want a string or a list of strings", k)})
				return
			}
			h[http.CanonicalHeaderKey(k)] = vals
		}
		sql = req.SQL
	}
	if strings.TrimSpace(sql) == "" {
		writeJSON(ctx, fasthttp.StatusBadRequest, EstimateJSON{Error: "no SQL: send {\"sql\": ...} or the statement as the body"})
		return
	}
	if h.Get("X-Trino-User") == "" && h.Get("Authorization") == "" {
		writeJSON(ctx, fasthttp.StatusBadRequest, EstimateJSON{Error: "no X-Trino-User (or Authorization): the EXPLAIN runs as the caller"})
		return
	}
	e, err := s.estimateFor(sql, h)
	if err != nil {
		s.log.Debug("estimate failed", "error", err)
		writeJSON(ctx, fasthttp.StatusUnprocessableEntity, EstimateJSON{Error: err.Error()})
		return
	}
	writeJSON(ctx, fasthttp.StatusOK, NewEstimateJSON(e))
}

// serveRouting answers Trino Gateway's external routing requests. It
// always answers 200 with a well-formed response: on any failure the
// errors list says why and routingGroup is null, so the gateway falls back
// to its own routing (fail open).
func (s *Server) serveRouting(ctx *fasthttp.RequestCtx) {
	resp := GatewayResponse{Errors: []string{}, ExternalHeaders: map[string]string{}}
	defer func() { writeJSON(ctx, fasthttp.StatusOK, resp) }()
	var req gatewayRequest
	if err := json.Unmarshal(ctx.Request.Body(), &req); err != nil {
		resp.Errors = append(resp.Errors, "prestroid: bad request body: "+err.Error())
		return
	}
	if req.TrinoQueryProperties == nil || strings.TrimSpace(req.TrinoQueryProperties.Body) == "" {
		resp.Errors = append(resp.Errors, "prestroid: no query text in trinoQueryProperties.body (enable the gateway's requestAnalyzerConfig.analyzeRequest)")
		return
	}
	h := callerHeaders(&ctx.Request.Header)
	// The gateway reads the catalog and schema from these headers too;
	// fill them in if it only sent its analysis.
	if p := req.TrinoQueryProperties; h.Get("X-Trino-Catalog") == "" && p.DefaultCatalog != nil && *p.DefaultCatalog != "" {
		h.Set("X-Trino-Catalog", *p.DefaultCatalog)
	}
	if p := req.TrinoQueryProperties; h.Get("X-Trino-Schema") == "" && p.DefaultSchema != nil && *p.DefaultSchema != "" {
		h.Set("X-Trino-Schema", *p.DefaultSchema)
	}
	e, err := s.estimateFor(req.TrinoQueryProperties.Body, h)
	if err != nil {
		resp.Errors = append(resp.Errors, "prestroid: "+err.Error())
		return
	}
	if !e.Estimated {
		return // not a query: the gateway's default group
	}
	resp.ExternalHeaders["X-Trino-Resource-Estimate"] = "CPU_TIME=" + TrinoDuration(e.CPUSeconds)
	// The group as the routing policy picks a class: by the estimate's
	// ClassQuantile.
	if g := routingGroupFor(s.opts.RoutingGroups, e.Quantile(s.opts.ClassQuantile)); g != "" {
		resp.RoutingGroup = &g
	}
}

// routingGroupFor returns the first group whose bound holds cpu ("" when
// there are none; the last group when cpu exceeds every bound).
func routingGroupFor(groups []RoutingGroup, cpu float64) string {
	for _, g := range groups {
		if g.MaxCPUSeconds <= 0 || cpu <= g.MaxCPUSeconds {
			return g.Name
		}
	}
	if len(groups) > 0 {
		return groups[len(groups)-1].Name
	}
	return ""
}
