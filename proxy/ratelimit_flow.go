package proxy

import (
	"math"
	"strconv"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/valyala/fasthttp"
)

// allowRate applies the rate limits to a new query; false means it was
// answered with 503 and Retry-After.
func (s *Server) allowRate(ctx *fasthttp.RequestCtx) bool {
	user, group := s.admissionIdentity(&ctx.Request.Header, nil)
	c, cancel := admission.StoreCtx()
	v := s.rate.Allow(c, user, group)
	cancel()
	if v.OK {
		return true
	}
	s.metrics.RateLimited.WithLabelValues(v.Scope).Inc()
	secs := max(1, int(math.Ceil(v.Wait.Seconds())))
	ctx.Response.Reset()
	ctx.Response.Header.Set("Retry-After", strconv.Itoa(secs))
	s.plain(ctx, fasthttp.StatusServiceUnavailable,
		"prestroid: rate limit of new queries per "+v.Scope+" exceeded; retry after "+strconv.Itoa(secs)+"s (the query was not sent to Trino)")
	return false
}
