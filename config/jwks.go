package config

import (
	"net/url"
	"strconv"
	"time"
)

// JWKS verifies Bearer JWTs locally in identity: verified mode, so that a
// token the proxy can check itself needs neither an EXPLAIN nor a probe.
// The zero value is off.
type JWKS struct {
	// URL is the identity provider's JWKS document (http or https),
	// fetched at start and refreshed every RefreshInterval (and when a
	// token names an unknown key id, at most once a minute). Empty means
	// off.
	URL string `yaml:"url"`
	// Issuer and Audience, when set, must match the token's iss and aud.
	// Empty means not checked.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// RefreshInterval is how often the JWKS is fetched again. Zero means
	// 1h.
	RefreshInterval Duration `yaml:"refresh_interval"`
}

func (c *Config) validateJWKS() error {
	j := c.JWKS
	if j.URL == "" {
		return nil
	}
	u, err := url.Parse(j.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return badf("jwks.url", strconv.Quote(j.URL), "want an http(s) URL")
	}
	if c.Identity != "verified" {
		return badf("jwks.url", strconv.Quote(j.URL), "a JWKS only matters with identity: verified")
	}
	if j.RefreshInterval < 0 {
		return badf("jwks.refresh_interval", time.Duration(j.RefreshInterval), "must not be negative")
	}
	return nil
}
