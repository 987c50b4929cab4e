// Package jwtauth verifies Bearer JWTs locally against an identity
// provider's JWKS (golang-jwt/jwt for the token, MicahParks/keyfunc for the
// key set: fetched at start, refreshed on an interval and when a token
// names an unknown key id, rate limited). It implements frontdoor.TokenVerifier
// for identity: verified; cmd/prestroid wires it, the proxy never imports
// it.
package jwtauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// Options configure a Verifier.
type Options struct {
	// JWKSURL is the JWKS document. Required.
	JWKSURL string
	// Issuer and Audience, when set, must match the token's iss and aud.
	Issuer, Audience string
	// Claim names the principal. Empty means "sub".
	Claim string
	// RefreshInterval is how often the JWKS is fetched again. Zero means 1h.
	RefreshInterval time.Duration
	// HTTP fetches the JWKS. Nil means a client with a 10 s timeout.
	HTTP *http.Client
	// Logger receives refresh failures. Nil means slog.Default().
	Logger *slog.Logger
}

// Verifier checks tokens; it is safe for concurrent use.
type Verifier struct {
	kf     keyfunc.Keyfunc
	parser *jwt.Parser
	claim  string
}

// New fetches the JWKS once (a failure is logged, not fatal: the key set is
// fetched again on the next token) and starts its refresh, which stops
// with ctx.
func New(ctx context.Context, o Options) (*Verifier, error) {
	if o.JWKSURL == "" {
		return nil, errors.New("jwtauth: no JWKS URL")
	}
	if o.Claim == "" {
		o.Claim = "sub"
	}
	if o.HTTP == nil {
		o.HTTP = &http.Client{Timeout: 10 * time.Second}
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	kf, err := keyfunc.NewDefaultOverrideCtx(ctx, []string{o.JWKSURL}, keyfunc.Override{
		Client:            o.HTTP,
		RefreshInterval:   o.RefreshInterval,
		RefreshUnknownKID: rate.NewLimiter(rate.Every(time.Minute), 1),
		RefreshErrorHandlerFunc: func(u string) func(context.Context, error) {
			return func(_ context.Context, err error) { log.Warn("jwks: refresh failed", "url", u, "error", err) }
		},
	})
	if err != nil {
		return nil, fmt.Errorf("jwtauth: %w", err)
	}
	opts := []jwt.ParserOption{jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second),
		// Asymmetric algorithms only: a JWKS holds public keys, and "none"
		// or HMAC with a public key as secret are the classic forgeries.
		jwt.WithValidMethods([]string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})}
	if o.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(o.Issuer))
	}
	if o.Audience != "" {
		opts = append(opts, jwt.WithAudience(o.Audience))
	}
	return &Verifier{kf: kf, parser: jwt.NewParser(opts...), claim: o.Claim}, nil
}

// VerifyToken checks tok's signature against the key set and its exp,
// nbf, iss and aud, and returns its principal claim.
func (v *Verifier) VerifyToken(tok string) (string, error) {
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(tok, claims, v.kf.Keyfunc); err != nil {
		return "", fmt.Errorf("jwtauth: %w", err)
	}
	p, _ := claims[v.claim].(string)
	if p == "" {
		return "", fmt.Errorf("jwtauth: token has no %q claim", v.claim)
	}
	return p, nil
}
