package frontdoor

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

func TestClaimedIdentity(t *testing.T) {
	v := &Verifier{Mode: IdentityVerified, Claim: "sub"}
	jwt := func(payload string) string {
		return "Bearer eyJhbGciOiJSUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(payload)) + ".c2ln"
	}
	for _, tc := range []struct{ name, auth, user, want, source string }{
		{"the Basic user, whatever X-Trino-User says", basic("alice", "p:w"), "bob", "alice", "basic"},
		{"a JWT's subject", jwt(`{"sub":"dave","iss":"x"}`), "bob", "dave", "jwt"},
		{"an opaque bearer token: the user the cluster accepts it for", "Bearer opaque", "bob", "bob", "cluster"},
		{"no credentials: X-Trino-User, if the cluster accepts that", "", "bob", "bob", "cluster"},
		{"malformed Basic", "Basic !!!", "bob", "bob", "cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := &fasthttp.RequestHeader{}
			for k, val := range map[string]string{"Authorization": tc.auth, "X-Trino-User": tc.user} {
				if val != "" {
					req.Set(k, val)
				}
			}
			id := v.Claimed(req)
			if id.User != tc.want || id.Source != tc.source || id.Verified {
				t.Errorf("got %+v, want %s from %s, unverified", id, tc.want, tc.source)
			}
		})
	}
}

func basic(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// An accepted credential counts until its TTL runs out; with no TTL it is
// never remembered.
func TestVerifierRemembers(t *testing.T) {
	v := &Verifier{TTL: time.Hour}
	if v.Accepted("k") {
		t.Fatal("a credential never accepted counts")
	}
	v.Remember("k")
	if !v.Accepted("k") || v.Accepted("other") {
		t.Error("the accepted credential is not remembered, or another one counts")
	}
	none := &Verifier{}
	none.Remember("k")
	if none.Accepted("k") {
		t.Error("remembered without a TTL")
	}
}

// RewriteChallenge rewrites the quoted URIs route accepts and leaves the
// rest of the challenge as it was.
func TestRewriteChallenge(t *testing.T) {
	in := `Bearer x_redirect_server="http://trino:8080/oauth2/token/initiate/abc", x_token_server="https://elsewhere/t", realm="a`
	got := RewriteChallenge(in, func(uri string) (string, bool) {
		if strings.HasPrefix(uri, "http://trino:8080") {
			return "https://proxy/r/x" + strings.TrimPrefix(uri, "http://trino:8080"), true
		}
		return "", false
	})
	want := `Bearer x_redirect_server="https://proxy/r/x/oauth2/token/initiate/abc", x_token_server="https://elsewhere/t", realm="a`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestAdminToken(t *testing.T) {
	const tok = "an-admin-token-of-16+"
	for _, tc := range []struct {
		name      string
		guard     AdminToken
		headers   map[string]string
		ok        bool
		leftAuthz string // Authorization after the check
	}{
		{"no token configured: every request passes", AdminToken{}, map[string]string{AdminTokenHeader: "x"}, true, ""},
		{"the token as a Bearer credential, removed", NewAdminToken(tok), map[string]string{"Authorization": "Bearer " + tok}, true, ""},
		{"the token beside the caller's own credentials", NewAdminToken(tok), map[string]string{AdminTokenHeader: tok, "Authorization": "Basic YWxpY2U6cHc="}, true, "Basic YWxpY2U6cHc="},
		{"a wrong token", NewAdminToken(tok), map[string]string{AdminTokenHeader: "nope"}, false, ""},
		{"a Bearer that is not the token is the caller's", NewAdminToken(tok), map[string]string{"Authorization": "Bearer other"}, false, "Bearer other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for k, v := range tc.headers {
				h.Set(k, v)
			}
			if got := tc.guard.Authorize(&h); got != tc.ok {
				t.Errorf("Authorize = %v, want %v", got, tc.ok)
			}
			if len(h.Peek(AdminTokenHeader)) != 0 {
				t.Error("the admin token header was left for the cluster")
			}
			if got := string(h.Peek("Authorization")); got != tc.leftAuthz {
				t.Errorf("Authorization left %q, want %q", got, tc.leftAuthz)
			}
		})
	}
}

// A PrestoDB client names its user in X-Presto-User; a Trino client's
// legacy X-Presto-User never stands for its X-Trino-User.
func TestClaimedIdentityOfAPrestoClient(t *testing.T) {
	v := &Verifier{}
	req := &fasthttp.RequestHeader{}
	req.Set("X-Presto-User", "carol")
	if id := v.Claimed(req); id.User != "carol" || id.Source != "header" {
		t.Errorf("PrestoDB client: %+v", id)
	}
	req.Set("X-Trino-User", "bob")
	if id := v.Claimed(req); id.User != "bob" {
		t.Errorf("Trino client with a legacy header: %+v", id)
	}
}
