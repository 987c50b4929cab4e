package jwtauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// A real JWKS served over HTTP, tokens signed with its key or others.
func TestVerifyToken(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	set := jwkset.NewMemoryStorage()
	jwk, err := jwkset.NewJWKFromKey(key.Public(), jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "k1", ALG: jwkset.AlgES256}})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.KeyWrite(context.Background(), jwk); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := set.JSONPublic(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v, err := New(ctx, Options{JWKSURL: srv.URL, Issuer: "https://idp.example", Audience: "trino"})
	if err != nil {
		t.Fatal(err)
	}
	sign := func(k *ecdsa.PrivateKey, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(jwt.SigningMethodES256, c)
		tok.Header["kid"] = "k1"
		s, err := tok.SignedString(k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	good := jwt.MapClaims{"sub": "alice", "iss": "https://idp.example", "aud": "trino", "exp": time.Now().Add(time.Hour).Unix()}
	with := func(k string, val any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for a, b := range good {
			c[a] = b
		}
		if val == nil {
			delete(c, k)
		} else {
			c[k] = val
		}
		return c
	}
	none, _ := jwt.NewWithClaims(jwt.SigningMethodNone, good).SignedString(jwt.UnsafeAllowNoneSignatureType)
	for _, tc := range []struct {
		name, tok, want string
	}{
		{"a token signed by the JWKS's key names its subject", sign(key, good), "alice"},
		{"another key's signature is refused", sign(other, good), ""},
		{"an expired token is refused", sign(key, with("exp", time.Now().Add(-time.Hour).Unix())), ""},
		{"a token without exp is refused", sign(key, with("exp", nil)), ""},
		{"another issuer is refused", sign(key, with("iss", "https://evil.example")), ""},
		{"another audience is refused", sign(key, with("aud", "other")), ""},
		{"alg none is refused", none, ""},
		{"a token without the claim is refused", sign(key, with("sub", nil)), ""},
		{"garbage is refused", "not.a.jwt", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := v.VerifyToken(tc.tok)
			if got != tc.want || (tc.want == "") != (err != nil) {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "jwtauth: ") {
				t.Errorf("error without the package prefix: %v", err)
			}
		})
	}
}
