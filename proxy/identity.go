package proxy

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// probeIdentity asks cluster c whether it accepts the request's credentials
// (frontdoor.Probe), within the estimate's time budget and at most 5s.
func (s *Server) probeIdentity(h *fasthttp.RequestHeader, c *cluster) error {
	return frontdoor.Probe(c.probeClient, c.url, c.host, h, min(s.opts.EstimateTimeout, 5*time.Second))
}

// verify establishes the verified identity of a new query in
// IdentityVerified mode, given what its estimate did (est, err from the
// estimator; est is meaningful only when err is nil). It returns the
// identity, or an *AuthError / ErrUnverified that ends the request.
func (s *Server) verify(ctx *fasthttp.RequestCtx, c *cluster, id frontdoor.Identity, est estimate.Estimate, estErr error) (frontdoor.Identity, error) {
	h := &ctx.Request.Header
	key := frontdoor.CredentialKey(c.name, h, id)
	switch {
	case estErr == nil && est.Estimated && est.Explained():
		// The cluster just ran this request's EXPLAIN with its credentials
		// (not a cheap, history or text estimate, nor a cached one: those
		// ran none).
		s.metrics.Identity.WithLabelValues("explain").Inc()
	case s.ident.Accepted(key):
		s.metrics.Identity.WithLabelValues("cache").Inc()
		id.Verified = true
		return id, nil
	default:
		if err := s.probeIdentity(h, c); err != nil {
			return id, err
		}
		s.metrics.Identity.WithLabelValues("probe").Inc()
	}
	s.ident.Remember(key)
	id.Verified = true
	return id, nil
}

// refuseCredentials answers with the cluster's own refusal, its
// WWW-Authenticate URIs (the OAuth2 flow's x_redirect_server and
// x_token_server) routed back through the proxy.
func (s *Server) refuseCredentials(ctx *fasthttp.RequestCtx, ae *frontdoor.AuthError) {
	c := s.byName[ae.Cluster]
	if c == nil {
		c = s.clusters[0]
	}
	ctx.Response.Reset()
	ctx.SetStatusCode(ae.StatusCode)
	for k, vs := range ae.Header {
		switch http.CanonicalHeaderKey(k) {
		case "Www-Authenticate", "Content-Type", "X-Trino-Error", "X-Presto-Error", "Cache-Control":
			for _, v := range vs {
				ctx.Response.Header.Add(k, v)
			}
		}
	}
	s.rewriteAuthenticate(ctx, c)
	ctx.SetBody(ae.Body)
}

// rewriteAuthenticate points the cluster URIs in WWW-Authenticate values
// (Trino's OAuth2 challenge: Bearer x_redirect_server="…",
// x_token_server="…") at the proxy, routed to c like every other URI.
func (s *Server) rewriteAuthenticate(ctx *fasthttp.RequestCtx, c *cluster) {
	vals := ctx.Response.Header.PeekAll("WWW-Authenticate")
	if len(vals) == 0 {
		return
	}
	out := make([]string, len(vals))
	changed := false
	for i, v := range vals {
		out[i] = frontdoor.RewriteChallenge(string(v), func(uri string) (string, bool) {
			base, target, ok := protocol.SplitBase(uri)
			if !ok || !strings.EqualFold(base, c.base) {
				return "", false
			}
			return s.publicBase(ctx) + s.signer.RoutedPath(c.name, target), true
		})
		changed = changed || out[i] != string(v)
	}
	if !changed {
		return
	}
	ctx.Response.Header.Del("WWW-Authenticate")
	for _, v := range out {
		ctx.Response.Header.Add("WWW-Authenticate", v)
	}
}

// identityOf is decide's identity step: the claimed identity, verified in
// IdentityVerified mode, with c the cluster that planned the query (or
// holds its transaction); est and estErr are the estimate's result (zero
// and nil when there was none).
func (s *Server) identityOf(ctx *fasthttp.RequestCtx, c *cluster, est estimate.Estimate, estErr error) (frontdoor.Identity, error) {
	id, err := s.identityOf1(ctx, c, est, estErr)
	var ae *frontdoor.AuthError
	switch {
	case errors.As(err, &ae):
		s.metrics.Identity.WithLabelValues("refused").Inc()
		ae.Cluster = c.name
	case errors.Is(err, frontdoor.ErrUnverified):
		s.metrics.Identity.WithLabelValues("unavailable").Inc()
	}
	return id, err
}

func (s *Server) identityOf1(ctx *fasthttp.RequestCtx, c *cluster, est estimate.Estimate, estErr error) (frontdoor.Identity, error) {
	id := s.ident.Claimed(&ctx.Request.Header)
	var ae *frontdoor.AuthError
	if errors.As(estErr, &ae) {
		return id, ae // refused in either mode: forwarding would get the same 401
	}
	if s.opts.Identity != frontdoor.IdentityVerified {
		return id, nil
	}
	if v, ok := s.ident.Local(&ctx.Request.Header); ok {
		s.metrics.Identity.WithLabelValues("jwks").Inc()
		return v, nil
	}
	return s.verify(ctx, c, id, est, estErr)
}
