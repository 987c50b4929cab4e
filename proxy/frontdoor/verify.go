package frontdoor

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// Verifier reads the identity a request claims and holds what verifying it
// needs that is not the cluster's answer: the credentials the cluster
// accepted lately (by key, never the credential), and the local token
// check. The proxy decides when to ask the cluster (Probe) from what its
// estimate already did.
type Verifier struct {
	// Mode is IdentityHeader or IdentityVerified (identity).
	Mode string
	// Claim is the JWT claim naming the user of a Bearer token
	// (identity_claim).
	Claim string
	// TTL is how long an accepted credential is remembered
	// (credential_ttl); zero means not at all.
	TTL time.Duration
	// Tokens checks Bearer tokens locally; nil means the cluster checks
	// every credential.
	Tokens TokenVerifier
	// Log receives why a token was not verified locally (debug).
	Log *slog.Logger

	once     sync.Once
	accepted *protocol.BoundedMap[time.Time] // CredentialKey -> accepted until
}

// remembered bounds the accepted credentials kept (the oldest go first:
// their callers probe once more).
const remembered = 10000

func (v *Verifier) creds() *protocol.BoundedMap[time.Time] {
	v.once.Do(func() { v.accepted = protocol.NewBoundedMap[time.Time](remembered) })
	return v.accepted
}

// Claimed reads the identity the request claims: from its credentials in
// verified mode, else X-Trino-User (X-Presto-User from a PrestoDB client).
// Nothing is verified here.
func (v *Verifier) Claimed(h *fasthttp.RequestHeader) Identity {
	hdrUser := string(protocol.Peek(h, protocol.Dialect(h), "User"))
	if v.Mode != IdentityVerified {
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
		if sub := JWTClaim(cred, v.Claim); sub != "" {
			return Identity{User: sub, Source: "jwt"}
		}
	}
	return Identity{User: hdrUser, Source: "cluster"}
}

// Accepted reports whether the credential under key (CredentialKey) was
// accepted by the cluster within the TTL.
func (v *Verifier) Accepted(key string) bool {
	until, ok := v.creds().Get(key)
	return ok && time.Now().Before(until)
}

// Remember notes that the cluster accepted the credential under key.
func (v *Verifier) Remember(key string) {
	if v.TTL <= 0 {
		return
	}
	v.creds().Put(key, time.Now().Add(v.TTL))
}

// Local checks a Bearer token with Tokens; ok is false when there is no
// verifier, no Bearer token, or the verifier refused it (the cluster is
// then asked, which may accept tokens of another issuer).
func (v *Verifier) Local(h *fasthttp.RequestHeader) (Identity, bool) {
	if v.Tokens == nil {
		return Identity{}, false
	}
	scheme, tok, _ := strings.Cut(string(h.Peek("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return Identity{}, false
	}
	p, err := v.Tokens.VerifyToken(strings.TrimSpace(tok))
	if err != nil || p == "" {
		if err != nil && v.Log != nil {
			v.Log.Debug("bearer token not verified locally; asking the cluster", "error", err)
		}
		return Identity{}, false
	}
	return Identity{User: p, Verified: true, Source: "jwks"}, true
}

// Probe asks the cluster at base (scheme://host[:port]; host is its Host
// header) through client whether it accepts the request's credentials:
// nil when it does, an *AuthError when it refuses them, ErrUnverified when
// it does not answer within timeout.
func Probe(client *fasthttp.HostClient, base, host string, h *fasthttp.RequestHeader, timeout time.Duration) error {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodGet)
	// A well-formed query id no cluster ever issued (Trino's ids start
	// with the date): the resource authenticates first, then answers
	// 404/410 for the unknown id.
	req.SetRequestURI(base + "/v1/query/19700101_000000_00000_prest")
	req.Header.SetHost(host)
	// The user under either dialect's name: the request's own (a client is
	// only ever sent to a cluster of its dialect).
	for _, k := range []string{"Authorization", "X-Trino-User", "X-Presto-User"} {
		if v := h.Peek(k); len(v) > 0 {
			req.Header.SetBytesV(k, v)
		}
	}
	if err := client.DoTimeout(req, resp, timeout); err != nil {
		return errors.Join(ErrUnverified, err)
	}
	switch resp.StatusCode() {
	case fasthttp.StatusUnauthorized, fasthttp.StatusForbidden:
		e := &AuthError{StatusCode: resp.StatusCode(), Header: http.Header{}, Body: append([]byte(nil), resp.Body()...)}
		for k, v := range resp.Header.All() {
			e.Header.Add(string(k), string(v))
		}
		return e
	}
	return nil
}

// RewriteChallenge rewrites every quoted URI of one WWW-Authenticate
// challenge (Trino's OAuth2 challenge: Bearer x_redirect_server="…",
// x_token_server="…") for which route returns true, to what it returns.
func RewriteChallenge(v string, route func(uri string) (string, bool)) string {
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
		if r, ok := route(q); ok {
			q = r
		}
		b.WriteString(q)
		b.WriteByte('"')
		v = v[i+2+j:]
	}
}
