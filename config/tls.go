package config

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
)

// TLS is the client-facing listener's TLS (https). The zero value serves
// plain HTTP.
type TLS struct {
	// CertFile is a PEM certificate (chain, leaf first) and KeyFile its PEM
	// private key. Both or neither; with both, Listen serves HTTPS only
	// (TLS 1.2 or newer). The pair is reloaded when either file changes
	// (checked at most once a second) or on SIGHUP, without dropping open
	// connections; a pair that fails to load keeps the old one serving.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// RedirectListen is an optional plain-HTTP HOST:PORT that answers every
	// request with a 308 redirect to the same path over HTTPS (public_url
	// when it is https, else the request's host on Listen's port). Empty
	// means none. Needs CertFile.
	RedirectListen string `yaml:"redirect_listen"`
}

// Enabled reports whether the listener serves HTTPS.
func (t TLS) Enabled() bool { return t.CertFile != "" }

// UpstreamTLS is how the proxy (and the EXPLAIN it runs as the caller)
// talks to https clusters.
type UpstreamTLS struct {
	// CAFile is a PEM bundle of CA certificates trusted for clusters, in
	// addition to the system roots. Empty means the system roots only.
	CAFile string `yaml:"ca_file"`
	// InsecureSkipVerify accepts any certificate from a cluster (no chain
	// or host name check). False (the default) verifies; true is for tests
	// against self-signed clusters and is logged as a warning at start.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

func (c *Config) applyTLSEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup("PRESTROID_TLS_CERT_FILE"); ok {
		c.TLS.CertFile = v
	}
	if v, ok := lookup("PRESTROID_TLS_KEY_FILE"); ok {
		c.TLS.KeyFile = v
	}
	if v, ok := lookup("PRESTROID_UPSTREAM_CA_FILE"); ok {
		c.UpstreamTLS.CAFile = v
	}
}

func (c *Config) validateTLS() error {
	t := c.TLS
	if (t.CertFile == "") != (t.KeyFile == "") {
		return badf("tls.cert_file", strconv.Quote(t.CertFile), "tls.cert_file and tls.key_file go together (key_file="+strconv.Quote(t.KeyFile)+")")
	}
	for key, f := range map[string]string{"tls.cert_file": t.CertFile, "tls.key_file": t.KeyFile, "upstream_tls.ca_file": c.UpstreamTLS.CAFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return badf(key, strconv.Quote(f), err.Error())
		}
	}
	if t.RedirectListen != "" {
		if !t.Enabled() {
			return badf("tls.redirect_listen", strconv.Quote(t.RedirectListen), "a redirect to HTTPS needs tls.cert_file and tls.key_file")
		}
		if _, _, err := net.SplitHostPort(t.RedirectListen); err != nil {
			return badf("tls.redirect_listen", strconv.Quote(t.RedirectListen), "want HOST:PORT")
		}
		if t.RedirectListen == c.Listen {
			return badf("tls.redirect_listen", strconv.Quote(t.RedirectListen), "must differ from listen")
		}
	}
	if t.Enabled() && c.PublicURL != "" && !strings.HasPrefix(c.PublicURL, "https://") {
		return badf("public_url", strconv.Quote(c.PublicURL), "the listener serves HTTPS (tls.cert_file): want an https:// URL")
	}
	for i, h := range c.AllowedHosts {
		if h == "" || strings.ContainsAny(h, "/ @?#") {
			return badf("allowed_hosts["+strconv.Itoa(i)+"]", strconv.Quote(h), "want host or host:port")
		}
		if _, err := url.Parse("http://" + h); err != nil {
			return badf("allowed_hosts["+strconv.Itoa(i)+"]", strconv.Quote(h), "want host or host:port")
		}
	}
	return nil
}

// badf is a validation error naming the key and the bad value.
func badf(key string, val any, why string) error {
	return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
}
