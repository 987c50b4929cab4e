package proxy

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy/guardrail"
	"github.com/prestroid/prestroid/proxy/protocol"
)

// Guardrails (package guardrail, docs/guardrails.md): after a new query is
// estimated and placed, and before anything of it is sent to a cluster or
// it takes an admission slot, the rules it matches compare its estimate
// with their limits; a refusal answers the client with a failed query.

// newGuardrails compiles o.Guardrails and registers their counter; none
// when there are no rules.
func (s *Server) newGuardrails(o Options) error {
	if len(o.Guardrails) == 0 {
		return nil
	}
	g, err := guardrail.New(o.Guardrails, s.log)
	if err != nil {
		return err
	}
	s.guard = g
	return s.registry.Register(g.Collector())
}

// guarded reports whether the placed query d may go on; when a guardrail
// refuses it, the client has its answer (PRESTROID_GUARDRAIL, a
// USER_ERROR) and nothing reached a cluster. A query without an estimate
// passes (fail open).
func (s *Server) guarded(ctx *fasthttp.RequestCtx, d *decision) bool {
	if s.guard == nil {
		return true
	}
	h := &ctx.Request.Header
	in := guardrail.Input{User: d.identity.User, Group: s.opts.Admission.GroupOf(d.identity.User, h),
		Source: string(protocol.Peek(h, d.dialect, "Source")), ClientTags: clientTags(h, d.dialect), SQL: ctx.Request.Body()}
	if d.estimate {
		in.Estimate = d.est
	}
	v := s.guard.Check(in, time.Now())
	if v.Outcome != guardrail.Refused {
		return true
	}
	s.trinoError(ctx, guardrail.ErrorName, "USER_ERROR", v.Message())
	rh := &ctx.Response.Header
	rh.Set("X-Prestroid-Guardrail", v.Rule.Name)
	rh.SetBytesV("X-Prestroid-Estimate", d.est.AppendHeader(nil))
	return false
}
