package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// The estimate endpoints expose Options.Estimator without running the
// query:
//
//	POST /v1/estimate   Prestroid's own: SQL (JSON or plain text) in, the
//	                    estimate as JSON out (the same object as
//	                    `prestroid estimate --json`).
//	POST /v1/routing    Trino Gateway's external routing service
//	                    (gateway_routing.go): the answer names a routing
//	                    group (from Options.RoutingGroups) and carries
//	                    X-Trino-Resource-Estimate in externalHeaders.
//
// Both plan on the default cluster, as the caller (X-Trino-* headers and
// Authorization of the request).

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
func NewEstimateJSON(e estimate.Estimate) EstimateJSON {
	out := EstimateJSON{Estimated: e.Estimated, Reason: e.Reason, Model: e.Model, Cached: e.Cached,
		ExplainMS: float64(e.Explain.Microseconds()) / 1000, FeaturizeUS: e.Featurize.Microseconds(), InferUS: e.Infer.Microseconds()}
	if e.Estimated {
		out.CPUSeconds = e.CPUSeconds
		out.CPUTime = protocol.TrinoDuration(e.CPUSeconds)
		out.Source, out.Sigma, out.ExplainSkipped = e.Source.String(), e.Sigma, e.ExplainSkipped
		out.LoSeconds, out.HiSeconds = e.Interval()
	}
	return out
}

// estimateFor estimates sql as the caller whose headers are h, within
// Options.EstimateTimeout, planning on the default cluster.
func (s *Server) estimateFor(sql string, h http.Header) (estimate.Estimate, error) {
	if s.opts.Estimator == nil {
		return estimate.Estimate{}, errors.New("proxy: no estimator configured")
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
	h := protocol.CallerHeaders(&ctx.Request.Header)
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
