package proxy

import (
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// claimedIdentity reads the identity the request claims: from its
// credentials in verified mode, else X-Trino-User. Nothing is verified here.
func (s *Server) claimedIdentity(h *fasthttp.RequestHeader) frontdoor.Identity {
	hdrUser := string(h.Peek("X-Trino-User"))
	if s.opts.Identity != frontdoor.IdentityVerified {
		return frontdoor.Identity{User: hdrUser, Source: "header"}
	}
	auth := string(h.Peek("Authorization"))
	scheme, cred, _ := strings.Cut(auth, " ")
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Basic"):
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			if user, _, ok := strings.Cut(string(b), ":"); ok && user != "" {
				return frontdoor.Identity{User: user, Source: "basic"}
			}
		}
	case strings.EqualFold(scheme, "Bearer"):
		if sub := frontdoor.JWTClaim(cred, s.opts.IdentityClaim); sub != "" {
			return frontdoor.Identity{User: sub, Source: "jwt"}
		}
	}
	return frontdoor.Identity{User: hdrUser, Source: "cluster"}
}

// credentialAccepted reports whether the credential under key was accepted
// within the TTL.
func (s *Server) credentialAccepted(key string) bool {
	until, ok := s.creds.Get(key)
	return ok && time.Now().Before(until)
}

func (s *Server) rememberCredential(key string) {
	s.creds.Put(key, time.Now().Add(s.opts.CredentialTTL))
}

// verifyLocally checks a Bearer token with Options.TokenVerifier; ok is
// false when there is no verifier, no Bearer token, or the verifier refused
// it (the cluster is then asked, which may accept tokens of another issuer).
func (s *Server) verifyLocally(h *fasthttp.RequestHeader) (frontdoor.Identity, bool) {
	if s.opts.TokenVerifier == nil {
		return frontdoor.Identity{}, false
	}
	scheme, tok, _ := strings.Cut(string(h.Peek("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return frontdoor.Identity{}, false
	}
	p, err := s.opts.TokenVerifier.VerifyToken(strings.TrimSpace(tok))
	if err != nil || p == "" {
		if err != nil {
			s.log.Debug("bearer token not verified locally; asking the cluster", "error", err)
		}
		return frontdoor.Identity{}, false
	}
	return frontdoor.Identity{User: p, Verified: true, Source: "jwks"}, true
}

// probeIdentity asks cluster c whether it accepts the request's credentials
// (see IdentityVerified): nil when it does, an *AuthError when it refuses
// them, ErrUnverified when it does not answer.
func (s *Server) probeIdentity(h *fasthttp.RequestHeader, c *cluster) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	// A well-formed query id no cluster ever issued (Trino's ids start
	// with the date): the resource authenticates first, then answers
	// 404/410 for the unknown id.
	req.SetRequestURI(c.url + "/v1/query/19700101_000000_00000_prest")
	req.Header.SetHost(c.host)
	for _, k := range []string{"Authorization", "X-Trino-User"} {
		if v := h.Peek(k); len(v) > 0 {
			req.Header.SetBytesV(k, v)
		}
	}
	timeout := min(s.opts.EstimateTimeout, 5*time.Second)
	if err := c.probeClient.DoTimeout(req, resp, timeout); err != nil {
		return errors.Join(frontdoor.ErrUnverified, err)
	}
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized, fasthttp.StatusForbidden:
		return authErrorOf(resp)
	}
	return nil
}

func authErrorOf(resp *fasthttp.Response) *frontdoor.AuthError {
	e := &frontdoor.AuthError{StatusCode: resp.StatusCode(), Header: http.Header{}, Body: append([]byte(nil), resp.Body()...)}
	for k, v := range resp.Header.All() {
		e.Header.Add(string(k), string(v))
	}
	return e
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
	case s.credentialAccepted(key):
		s.metrics.Identity.WithLabelValues("cache").Inc()
		id.Verified = true
		return id, nil
	default:
		if err := s.probeIdentity(h, c); err != nil {
			return id, err
		}
		s.metrics.Identity.WithLabelValues("probe").Inc()
	}
	s.rememberCredential(key)
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
		case "Www-Authenticate", "Content-Type", "X-Trino-Error", "Cache-Control":
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
		out[i] = s.rewriteChallenge(ctx, c, string(v))
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

// rewriteChallenge rewrites every quoted URI in one challenge that points
// at c.
func (s *Server) rewriteChallenge(ctx *fasthttp.RequestCtx, c *cluster, v string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(v, '"')
		if i < 0 {
			b.WriteString(v)
			return b.String()
		}
		j := strings.IndexByte(v[i+1:], '"')
		if j < 0 {
			b.WriteString(v)
			return b.String()
		}
		q := v[i+1 : i+1+j]
		b.WriteString(v[:i+1])
		if base, target, ok := protocol.SplitBase(q); ok && strings.EqualFold(base, c.base) {
			q = s.publicBase(ctx) + s.signer.RoutedPath(c.name, target)
		}
		b.WriteString(q)
		b.WriteByte('"')
		v = v[i+2+j:]
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
	id := s.claimedIdentity(&ctx.Request.Header)
	var ae *frontdoor.AuthError
	if errors.As(estErr, &ae) {
		return id, ae // refused in either mode: forwarding would get the same 401
	}
	if s.opts.Identity != frontdoor.IdentityVerified {
		return id, nil
	}
	if v, ok := s.verifyLocally(&ctx.Request.Header); ok {
		s.metrics.Identity.WithLabelValues("jwks").Inc()
		return v, nil
	}
	return s.verify(ctx, c, id, est, estErr)
}
