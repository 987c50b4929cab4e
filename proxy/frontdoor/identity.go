package frontdoor

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/valyala/fasthttp"
)

// Identity: who a new query counts against. Admission (budgets, the fair
// queue), routing rules and metrics key on Identity.User and nothing else
// (docs/design.md §5.2).
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

	// Cluster names the cluster that refused (set by the proxy); empty
	// means the default cluster.
	Cluster string
}

func (e *AuthError) Error() string {
	return "proxy: the cluster refused the caller's credentials: HTTP " + http.StatusText(e.StatusCode)
}

// ErrUnverified: in IdentityVerified mode the cluster could not be asked
// whether it accepts the caller's credentials (it did not answer); nothing
// was sent for the query, so the client may retry.
var ErrUnverified = errors.New("proxy: the caller's credentials could not be verified with the cluster")

// JWTClaim returns the string claim name of a JWT's payload, unverified
// (the caller verifies the token some other way), or "" when tok is not a
// JWT or has no such claim.
func JWTClaim(tok, name string) string {
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

// CredentialKey is the key under which an accepted credential is
// remembered: a SHA-256 of the cluster, the Authorization value and, for
// credentials that name no user, X-Trino-User (never the credential
// itself).
func CredentialKey(cluster string, h *fasthttp.RequestHeader, id Identity) string {
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
