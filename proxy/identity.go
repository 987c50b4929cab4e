package proxy

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/valyala/fasthttp"
)

// Identity: who a new query counts against. Admission (budgets, the fair
// queue), routing rules and metrics key on Identity.User and nothing else
// (DESIGN §5.2).
//
// Options.Identity chooses how it is established:
//   - IdentityHeader (the default): X-Trino-User as the client sent it, an
//     unauthenticated claim: any client can name any user.
//   - IdentityVerified: the user the cluster authenticated. The proxy reads
//     the name from the credentials (the Basic user, or the JWT claim
//     Options.IdentityClaim of a Bearer token; X-Trino-User when there is
//     neither, e.g. an opaque token or a cluster that authenticates nobody)
//     and trusts it only once the cluster accepted those very credentials:
//     for this request's EXPLAIN, or, when the estimate cascade skipped the
//     EXPLAIN (a statement that is not explained, a cached estimate, an
//     estimator failure), for a cheap authenticated probe (GET
//     /v1/query/{an id that does not exist}: Trino answers 401 before it
//     looks the id up). An accepted credential is remembered for
//     Options.CredentialTTL keyed by its SHA-256, so a client's next
//     statements need no probe. A Bearer token that Options.TokenVerifier
//     accepts (a JWT checked against a JWKS) needs no cluster at all.
//
// In both modes a 401 (or 403) from the cluster for the caller's EXPLAIN
// or probe ends the request there: the client gets Trino's own answer
// (status, WWW-Authenticate, body), and the query gets no estimate, no
// queue slot and no route.
const (
	IdentityHeader   = "header"
	IdentityVerified = "verified"
)

// Identity is the identity a new query counts against.
type Identity struct {
	// User is the name budgets, queues, rules and metrics key on.
	User string
	// Verified is true when the cluster (or Options.TokenVerifier) accepted
	// the credentials User was read from. Always false with IdentityHeader.
	Verified bool
	// Source says where User came from: "header" (X-Trino-User, not
	// verified), "basic", "jwt" (a claim of a Bearer JWT), "jwks" (a JWT
	// checked locally), "cluster" (X-Trino-User of credentials the cluster
	// accepted without naming a user in them).
	Source string
}

// TokenVerifier checks a Bearer token locally (e.g. a JWT against a JWKS)
// and returns the principal it names. The proxy declares it; cmd/prestroid
// wires an implementation.
type TokenVerifier interface {
	VerifyToken(token string) (principal string, err error)
}

// AuthError is a cluster's refusal of the caller's credentials (HTTP 401 or
// 403) for the EXPLAIN or the identity probe: Trino's own answer, relayed
// to the client as is (WWW-Authenticate URIs pointed back through the
// proxy). Estimator implementations return it (wrapped or not) for an
// EXPLAIN Trino refused this way.
type AuthError struct {
	StatusCode int
	Header     http.Header // the response's headers (WWW-Authenticate, Content-Type)
	Body       []byte

	cluster *cluster // the cluster that refused, set by identityOf
}

func (e *AuthError) Error() string {
	return "proxy: the cluster refused the caller's credentials: HTTP " + http.StatusText(e.StatusCode)
}

// ErrUnverified: in IdentityVerified mode the cluster could not be asked
// whether it accepts the caller's credentials (it did not answer); nothing
// was sent for the query, so the client may retry.
var ErrUnverified = errors.New("proxy: the caller's credentials could not be verified with the cluster")

// claimedIdentity reads the identity the request claims: from its
// credentials in verified mode, else X-Trino-User. Nothing is verified here.
func (s *Server) claimedIdentity(h *fasthttp.RequestHeader) Identity {
	hdrUser := string(h.Peek("X-Trino-User"))
	if s.opts.Identity != IdentityVerified {
		return Identity{User: hdrUser, Source: "header"}
	}
	auth := string(h.Peek("Authorization"))
	scheme, cred, _ := strings.Cut(auth, " ")
	cred = strings.TrimSpace(cred)
	switch {
	case strings.EqualFold(scheme, "Basic"):
		if b, err := base64.StdEncoding.DecodeString(cred); err == nil {
			if user, _, ok := strings.Cut(string(b), ":"); ok && user != "" {
				return Identity{User: user, Source: "basic"}
			}
		}
	case strings.EqualFold(scheme, "Bearer"):
		if sub := jwtClaim(cred, s.opts.IdentityClaim); sub != "" {
			return Identity{User: sub, Source: "jwt"}
		}
	}
	return Identity{User: hdrUser, Source: "cluster"}
}

// jwtClaim returns the string claim name of a JWT's payload, unverified
// (the caller verifies the token some other way), or "" when tok is not a
// JWT or has no such claim.
func jwtClaim(tok, name string) string {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > 16<<10 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return ""
	}
	var claims map[string]any
	if json.Unmarshal(b, &claims) != nil {
		return ""
	}
	v, _ := claims[name].(string)
	return v
}

// credentialKey is the key under which an accepted credential is
// remembered: a SHA-256 of the cluster, the Authorization value and, for
// credentials that name no user, X-Trino-User (never the credential
// itself).
func credentialKey(cluster string, h *fasthttp.RequestHeader, id Identity) string {
	d := sha256.New()
	d.Write([]byte(cluster))
	d.Write([]byte{0})
	d.Write(h.Peek("Authorization"))
	if id.Source == "cluster" {
		d.Write([]byte{0})
		d.Write([]byte(id.User))
	}
	return string(d.Sum(nil))
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
func (s *Server) verifyLocally(h *fasthttp.RequestHeader) (Identity, bool) {
	if s.opts.TokenVerifier == nil {
		return Identity{}, false
	}
	scheme, tok, _ := strings.Cut(string(h.Peek("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return Identity{}, false
	}
	p, err := s.opts.TokenVerifier.VerifyToken(strings.TrimSpace(tok))
	if err != nil || p == "" {
		if err != nil {
			s.log.Debug("bearer token not verified locally; asking the cluster", "error", err)
		}
		return Identity{}, false
	}
	return Identity{User: p, Verified: true, Source: "jwks"}, true
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
		return errors.Join(ErrUnverified, err)
	}
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized, fasthttp.StatusForbidden:
		return authErrorOf(resp)
	}
	return nil
}

func authErrorOf(resp *fasthttp.Response) *AuthError {
	e := &AuthError{StatusCode: resp.StatusCode(), Header: http.Header{}, Body: append([]byte(nil), resp.Body()...)}
	for k, v := range resp.Header.All() {
		e.Header.Add(string(k), string(v))
	}
	return e
}

// verify establishes the verified identity of a new query in
// IdentityVerified mode, given what its estimate did (est, err from the
// estimator; est is meaningful only when err is nil). It returns the
// identity, or an *AuthError / ErrUnverified that ends the request.
func (s *Server) verify(ctx *fasthttp.RequestCtx, c *cluster, id Identity, est estimate.Estimate, estErr error) (Identity, error) {
	h := &ctx.Request.Header
	key := credentialKey(c.name, h, id)
	switch {
	case estErr == nil && est.Estimated && est.Explained():
		// The cluster just ran this request's EXPLAIN with its credentials
		// (not a cheap, history or text estimate, nor a cached one: those
		// ran none).
		s.metrics.identity.WithLabelValues("explain").Inc()
	case s.credentialAccepted(key):
		s.metrics.identity.WithLabelValues("cache").Inc()
		id.Verified = true
		return id, nil
	default:
		if err := s.probeIdentity(h, c); err != nil {
			return id, err
		}
		s.metrics.identity.WithLabelValues("probe").Inc()
	}
	s.rememberCredential(key)
	id.Verified = true
	return id, nil
}

// refuseCredentials answers with the cluster's own refusal, its
// WWW-Authenticate URIs (the OAuth2 flow's x_redirect_server and
// x_token_server) routed back through the proxy.
func (s *Server) refuseCredentials(ctx *fasthttp.RequestCtx, ae *AuthError) {
	c := ae.cluster
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
		if base, target, ok := splitBase(q); ok && strings.EqualFold(base, c.base) {
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
func (s *Server) identityOf(ctx *fasthttp.RequestCtx, c *cluster, est estimate.Estimate, estErr error) (Identity, error) {
	id, err := s.identityOf1(ctx, c, est, estErr)
	var ae *AuthError
	switch {
	case errors.As(err, &ae):
		s.metrics.identity.WithLabelValues("refused").Inc()
		ae.cluster = c
	case errors.Is(err, ErrUnverified):
		s.metrics.identity.WithLabelValues("unavailable").Inc()
	}
	return id, err
}

func (s *Server) identityOf1(ctx *fasthttp.RequestCtx, c *cluster, est estimate.Estimate, estErr error) (Identity, error) {
	id := s.claimedIdentity(&ctx.Request.Header)
	var ae *AuthError
	if errors.As(estErr, &ae) {
		return id, ae // refused in either mode: forwarding would get the same 401
	}
	if s.opts.Identity != IdentityVerified {
		return id, nil
	}
	if v, ok := s.verifyLocally(&ctx.Request.Header); ok {
		s.metrics.identity.WithLabelValues("jwks").Inc()
		return v, nil
	}
	return s.verify(ctx, c, id, est, estErr)
}
