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
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// The estimate endpoints expose Options.Estimator without running the
// query:
//
//	POST /v1/estimate   Prestroid's own: SQL (JSON or plain text) in, the
//	                    estimate as JSON out (the same object as
//	                    `prestroid estimate --json`: estimate.JSON).
//	POST /v1/routing    Trino Gateway's external routing service
//	                    (package gateway): the answer names a routing
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

// estimateFor estimates sql as the caller whose (canonical) headers are h,
// a client of dialect e, within Options.EstimateTimeout, planning on the
// default cluster of e's engine.
func (s *Server) estimateFor(sql string, h http.Header, e dialect.Engine) (estimate.Estimate, error) {
	if s.opts.Estimator == nil {
		return estimate.Estimate{}, errors.New("proxy: no estimator configured")
	}
	def := s.defaultFor(e)
	if def == nil {
		return estimate.Estimate{}, &mismatchError{client: e}
	}
	c, cancel := context.WithTimeout(context.Background(), s.opts.EstimateTimeout)
	defer cancel()
	return s.opts.Estimator.Estimate(c, s.query(sql, h, def, e))
}

// serveEstimate answers POST /v1/estimate.
func (s *Server) serveEstimate(ctx *fasthttp.RequestCtx) {
	h := protocol.CallerHeaders(&ctx.Request.Header) // canonical: a PrestoDB caller's headers under Trino's names
	e := protocol.Dialect(&ctx.Request.Header)
	body := bytes.TrimSpace(ctx.Request.Body())
	sql := string(body)
	if len(body) > 0 && body[0] == '{' {
		var req estimateRequest
		if err := json.Unmarshal(body, &req); err != nil {
			protocol.WriteJSON(ctx, fasthttp.StatusBadRequest, estimate.JSON{Error: "bad JSON body: " + err.Error()})
			return
		}
		for k, raw := range req.Headers {
			var vals []string
			var one string
			if err := json.Unmarshal(raw, &one); err == nil {
				vals = []string{one}
			} else if err := json.Unmarshal(raw, &vals); err != nil {
				protocol.WriteJSON(ctx, fasthttp.StatusBadRequest, estimate.JSON{Error: fmt.Sprintf("header %s: want a string or a list of strings", k)})
				return
			}
			h[http.CanonicalHeaderKey(k)] = vals
		}
		sql = req.SQL
	}
	if strings.TrimSpace(sql) == "" {
		protocol.WriteJSON(ctx, fasthttp.StatusBadRequest, estimate.JSON{Error: "no SQL: send {\"sql\": ...} or the statement as the body"})
		return
	}
	if h.Get("X-Trino-User") == "" && h.Get("Authorization") == "" {
		protocol.WriteJSON(ctx, fasthttp.StatusBadRequest, estimate.JSON{Error: "no " + e.Header("User") + " (or Authorization): the EXPLAIN runs as the caller"})
		return
	}
	est, err := s.estimateFor(sql, h, e)
	if err != nil {
		s.log.Debug("estimate failed", "error", err)
		protocol.WriteJSON(ctx, fasthttp.StatusUnprocessableEntity, estimate.JSON{Error: err.Error()})
		return
	}
	protocol.WriteJSON(ctx, fasthttp.StatusOK, estimate.NewJSON(est))
}
