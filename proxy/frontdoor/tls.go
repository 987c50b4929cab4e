package frontdoor

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// CertReloader serves the listener's certificate from a PEM certificate
// (chain) file and a PEM key file, and picks up a renewed pair without a
// restart and without dropping a connection: tls.Config.GetCertificate asks
// it on every handshake, so an established connection keeps the certificate
// it was opened with and the next handshake gets the new one. The files are
// checked for a change (modification time or size) at most once a second,
// on a handshake; Reload rereads them at once (SIGHUP). A pair that does not
// load (a half-written renewal, a key that does not match) is refused and
// the previous one keeps serving, with an error logged.
type CertReloader struct {
	certFile, keyFile string
	log               *slog.Logger

	cert    atomic.Pointer[tls.Certificate]
	mu      sync.Mutex // one reload at a time; guards stamp and checked
	stamp   string     // the files' modification times and sizes when loaded
	checked time.Time
}

// NewCertReloader loads the pair once; an error means the listener cannot
// start. log nil means slog.Default().
func NewCertReloader(certFile, keyFile string, log *slog.Logger) (*CertReloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &CertReloader{certFile: certFile, keyFile: keyFile, log: log}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.loadLocked(); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *CertReloader) fileStamp() string {
	var b strings.Builder
	for _, f := range []string{r.certFile, r.keyFile} {
		if st, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d/%d;", st.ModTime().UnixNano(), st.Size())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// loadLocked reads and parses the pair; r.mu held.
func (r *CertReloader) loadLocked() error {
	stamp := r.fileStamp()
	c, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return fmt.Errorf("proxy: TLS certificate %s / key %s: %w", r.certFile, r.keyFile, err)
	}
	if c.Leaf == nil && len(c.Certificate) > 0 {
		c.Leaf, _ = x509.ParseCertificate(c.Certificate[0])
	}
	r.cert.Store(&c)
	r.stamp, r.checked = stamp, time.Now()
	return nil
}

// Reload rereads the files now. On error the previous pair keeps serving.
func (r *CertReloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.loadLocked()
	if err != nil {
		r.log.Error("TLS certificate not reloaded; the previous one keeps serving", "error", err)
		return err
	}
	r.log.Info("TLS certificate loaded", "cert_file", r.certFile, "not_after", r.notAfter())
	return nil
}

func (r *CertReloader) notAfter() string {
	if c := r.cert.Load(); c != nil && c.Leaf != nil {
		return c.Leaf.NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// maybeReload reloads when the files changed since the last load, checking
// at most once a second.
func (r *CertReloader) maybeReload() {
	if !r.mu.TryLock() {
		return // another handshake is checking; serve the current pair
	}
	if time.Since(r.checked) < time.Second {
		r.mu.Unlock()
		return
	}
	r.checked = time.Now()
	changed := r.fileStamp() != r.stamp
	r.mu.Unlock()
	if changed {
		_ = r.Reload()
	}
}

// GetCertificate is tls.Config.GetCertificate.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.maybeReload()
	return r.cert.Load(), nil
}

// ServerTLSConfig is the listener's TLS configuration: TLS 1.2 or newer
// (Go's default cipher suites for 1.2 are the AEAD ones with forward
// secrecy), HTTP/1.1 only (fasthttp does not speak HTTP/2, so ALPN must not
// offer it), the certificate from r.
func ServerTLSConfig(r *CertReloader) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: r.GetCertificate,
		NextProtos:     []string{"http/1.1"},
	}
}

// UpstreamTLSConfig is the TLS configuration for connections to clusters:
// the system roots plus the PEM certificates in caFile (empty: none added),
// TLS 1.2 or newer. insecureSkipVerify turns certificate verification off
// (tests against self-signed clusters only; it is logged loudly by the
// caller).
func UpstreamTLSConfig(caFile string, insecureSkipVerify bool) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecureSkipVerify} //nolint:gosec // off by default; documented as for tests
	if caFile == "" {
		return c, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("proxy: upstream CA bundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("proxy: upstream CA bundle %s: no PEM certificate in it", caFile)
	}
	c.RootCAs = pool
	return c, nil
}

// ErrUnknownHost: the request's Host header names no host the proxy
// answers to, and public_url is not set (see Options.AllowedHosts).
var ErrUnknownHost = errors.New("proxy: unknown Host")

// HostAllowed reports whether host (a Host header value) may be written
// into the URIs handed to this client: it is the address the connection
// arrived on (the literal IP:port the client dialled), localhost on that
// port when that address is a loopback one, or one of allowed
// (compared without case). Without this check a client could send
// Host: evil.example and be handed nextUris pointing there, and an
// HTTP/1.0 request without Host would get "http:///r/...".
func HostAllowed(ctx *fasthttp.RequestCtx, host string, allowed []string) bool {
	if host == "" {
		return false
	}
	for _, h := range allowed {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	local := ctx.LocalAddr()
	if local == nil {
		return false
	}
	la := local.String()
	if host == la {
		return true
	}
	lh, lport, err := net.SplitHostPort(la)
	if err != nil {
		return false
	}
	hh, hport, err := net.SplitHostPort(host)
	if err != nil {
		// No port in Host: the scheme's default port.
		hh, hport = host, "80"
		if ctx.IsTLS() {
			hport = "443"
		}
	}
	if hport != lport {
		return false
	}
	if ip := net.ParseIP(lh); ip != nil && ip.IsLoopback() && strings.EqualFold(hh, "localhost") {
		return true
	}
	if ip, hip := net.ParseIP(lh), net.ParseIP(strings.Trim(hh, "[]")); ip != nil && hip != nil && ip.Equal(hip) {
		return true
	}
	return false
}
