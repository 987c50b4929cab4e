package protocol

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
)

// Route tokens make the proxy stateless: every URI handed to a client points
// at the proxy as
//
//	{proxy base}/r/{token}{upstream path and query}
//
// where token = {cluster name} "." base64url(HMAC-SHA256(secret, scope)[:16]).
// The scope is the cluster name plus the exact upstream target, so a token
// cannot be replayed against another path or cluster; for the web UI the
// scope is the cluster plus "/ui/", so the UI's relative asset URLs resolve.
// Any replica sharing the secret can verify a token without state, and a
// token that does not verify causes no upstream request.

// routePrefix starts every routed path.
const routePrefix = "/r/"

// macLen is the number of HMAC bytes kept in a token (128 bits).
const macLen = 16

// ErrBadToken is returned for a missing, malformed, forged or tampered token.
var ErrBadToken = errors.New("proxy: invalid route token")

// Signer creates and verifies route tokens. The zero value is not usable;
// build one with NewSigner.
type Signer struct {
	key []byte
}

// NewSigner returns a Signer keyed by secret. An empty secret draws a random
// 32-byte key, valid for this process only.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("proxy: route secret: %w", err)
		}
	}
	return &Signer{key: append([]byte(nil), secret...)}, nil
}

// scope is what a token's MAC covers for the given upstream target.
func scope(target string) string {
	if strings.HasPrefix(target, "/ui/") || target == "/ui" {
		return "/ui/"
	}
	return target
}

func (s *Signer) mac(cluster, target string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(cluster))
	m.Write([]byte{0})
	m.Write([]byte(scope(target)))
	return m.Sum(nil)[:macLen]
}

// Token returns the token for routing target (an upstream path with an
// optional "?query") to cluster.
func (s *Signer) Token(cluster, target string) string {
	return cluster + "." + base64.RawURLEncoding.EncodeToString(s.mac(cluster, target))
}

// Verify checks token against target and returns the cluster it names.
func (s *Signer) Verify(token, target string) (string, error) {
	i := strings.LastIndexByte(token, '.')
	if i <= 0 || i == len(token)-1 {
		return "", ErrBadToken
	}
	cluster, enc := token[:i], token[i+1:]
	got, err := base64.RawURLEncoding.Strict().DecodeString(enc) // Strict: unused low bits must be zero, so one MAC has one spelling
	if err != nil || len(got) != macLen {
		return "", ErrBadToken
	}
	if !hmac.Equal(got, s.mac(cluster, target)) {
		return "", ErrBadToken
	}
	return cluster, nil
}

// RoutedPath returns the proxy-relative path for target on cluster.
func (s *Signer) RoutedPath(cluster, target string) string {
	return routePrefix + s.Token(cluster, target) + target
}

// SplitRouted splits a raw request URI of the form /r/{token}{target} into
// its token and target. ok is false when uri is not a routed path.
func SplitRouted(uri string) (token, target string, ok bool) {
	if !strings.HasPrefix(uri, routePrefix) {
		return "", "", false
	}
	rest := uri[len(routePrefix):]
	i := strings.IndexByte(rest, '/')
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i:], true
}
