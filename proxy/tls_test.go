package proxy

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/frontdoor"
)

// testCert writes a self-signed certificate for 127.0.0.1 and localhost
// (serial) to dir and returns the file paths and the certificate.
func testCert(t *testing.T, dir string, serial int64) (certFile, keyFile string, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "prestroid test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	// Written beside and renamed, as a certificate manager does.
	writeAtomic(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	writeAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	return certFile, keyFile, cert
}

func writeAtomic(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startTLSProxy serves a proxy in front of upstream over TLS with the pair
// in dir; it returns the proxy's https base URL and the reloader.
func startTLSProxy(t *testing.T, o Options, certFile, keyFile string) (string, *frontdoor.CertReloader) {
	t.Helper()
	r, err := frontdoor.NewCertReloader(certFile, keyFile, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	o.MonitorInterval = -1
	base, _ := serveTestOn(t, o, func(ln net.Listener) net.Listener { return tls.NewListener(ln, frontdoor.ServerTLSConfig(r)) })
	return base, r
}

func trustOnly(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

func TestTLSListener(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage(base))
	})
	dir := t.TempDir()
	certFile, keyFile, cert1 := testCert(t, dir, 1)
	base, reloader := startTLSProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}}, certFile, keyFile)
	addr := strings.TrimPrefix(base, "https://")

	t.Run("a client that trusts the certificate gets https nextUris", func(t *testing.T) {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trustOnly(cert1)}}}
		resp, err := c.Post(base+"/v1/statement", "text/plain", strings.NewReader("SELECT 1"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var page struct{ NextURI string }
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(page.NextURI, base+"/r/default.") {
			t.Errorf("nextUri %q does not start with %s/r/default.", page.NextURI, base)
		}
	})
	t.Run("TLS 1.1 is refused", func(t *testing.T) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: trustOnly(cert1), MaxVersion: tls.VersionTLS11})
		if err == nil {
			conn.Close()
			t.Fatal("a TLS 1.1 handshake succeeded")
		}
	})
	t.Run("a renewed certificate serves new connections; an open one keeps working", func(t *testing.T) {
		conf := &tls.Config{RootCAs: trustOnly(cert1)}
		open, err := tls.Dial("tcp", addr, conf)
		if err != nil {
			t.Fatal(err)
		}
		defer open.Close()
		get := func(conn net.Conn) int {
			t.Helper()
			io.WriteString(conn, "GET /v1/info HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode
		}
		if code := get(open); code != http.StatusOK {
			t.Fatalf("before renewal: %d", code)
		}
		time.Sleep(1100 * time.Millisecond) // past the once-a-second check
		_, _, cert2 := testCert(t, dir, 2)
		both := &tls.Config{RootCAs: trustOnly(cert1, cert2)}
		conn, err := tls.Dial("tcp", addr, both)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if got := conn.ConnectionState().PeerCertificates[0].SerialNumber.Int64(); got != 2 {
			t.Errorf("new connection got certificate %d, want the renewed 2", got)
		}
		if code := get(open); code != http.StatusOK {
			t.Errorf("the connection opened before the renewal: %d", code)
		}
	})
	t.Run("a broken renewal keeps the old pair serving", func(t *testing.T) {
		writeAtomic(t, keyFile, []byte("not a key"))
		if err := reloader.Reload(); err == nil {
			t.Fatal("Reload accepted a bad key")
		}
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: x509.NewCertPool(), InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		conn.Close()
	})
}

// newTLSStub is an https upstream answering like a coordinator.
func newTLSStub(t *testing.T) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage("https://"+r.Host))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestUpstreamTLS(t *testing.T) {
	up := newTLSStub(t)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: up.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		ca       string
		insecure bool
		want     int
	}{
		{"an https cluster signed by the configured CA bundle is served", caFile, false, http.StatusOK},
		{"an https cluster whose certificate is not trusted is refused", "", false, http.StatusServiceUnavailable},
		{"insecure_skip_verify accepts it", "", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc2, err := frontdoor.UpstreamTLSConfig(tc.ca, tc.insecure)
			if err != nil {
				t.Fatal(err)
			}
			s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, UpstreamTLS: tc2,
				MonitorInterval: -1, Logger: quietLogger(), UpstreamTimeout: 2 * time.Second}))

			if err != nil {
				t.Fatal(err)
			}
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			go s.Serve(ln)
			defer s.Shutdown(context.Background())
			resp := post(t, "http://"+ln.Addr().String(), nil)
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Errorf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
	if _, err := frontdoor.UpstreamTLSConfig(filepath.Join(t.TempDir(), "missing.pem"), false); err == nil {
		t.Error("a missing CA bundle was accepted")
	}
}

func TestHostHeader(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage(base))
	})
	p := startTestProxy(t, stub.URL)
	addr := strings.TrimPrefix(p, "http://")
	_, port, _ := net.SplitHostPort(addr)
	raw := func(req string) (int, string) {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, req)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		name, host string
		want       int
	}{
		{"a foreign Host gets 400 and nothing reaches Trino", "evil.example:666", http.StatusBadRequest},
		{"the listener's own port under another IP gets 400", "10.9.9.9:" + port, http.StatusBadRequest},
		{"the address the connection arrived on is served", addr, http.StatusOK},
		{"localhost on a loopback listener is served", "localhost:" + port, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := stub.hits.Load()
			code, body := raw("POST /v1/statement HTTP/1.1\r\nHost: " + tc.host + "\r\nX-Trino-User: u\r\nContent-Length: 8\r\n\r\nSELECT 1")
			if code != tc.want {
				t.Fatalf("status %d, want %d: %s", code, tc.want, body)
			}
			if code == http.StatusOK && !strings.Contains(body, `"nextUri":"http://`+tc.host+`/r/`) {
				t.Errorf("nextUri not on %s: %s", tc.host, body)
			}
			if code != http.StatusOK && stub.hits.Load() != before {
				t.Errorf("the request reached Trino")
			}
		})
	}
	t.Run("HTTP/1.0 without Host gets 400, not http:///r/ URIs", func(t *testing.T) {
		code, body := raw("POST /v1/statement HTTP/1.0\r\nX-Trino-User: u\r\nContent-Length: 8\r\n\r\nSELECT 1")
		if code != http.StatusBadRequest || strings.Contains(body, "http:///") {
			t.Errorf("status %d: %s", code, body)
		}
	})
	t.Run("allowed_hosts admits a name clients use", func(t *testing.T) {
		s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, AllowedHosts: []string{"Trino.Example.com"},
			MonitorInterval: -1, Logger: quietLogger()}))

		if err != nil {
			t.Fatal(err)
		}
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		go s.Serve(ln)
		defer s.Shutdown(context.Background())
		conn, _ := net.Dial("tcp", ln.Addr().String())
		defer conn.Close()
		io.WriteString(conn, "POST /v1/statement HTTP/1.1\r\nHost: trino.example.com\r\nContent-Length: 8\r\n\r\nSELECT 1")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"nextUri":"http://trino.example.com/r/`) {
			t.Errorf("status %d: %s", resp.StatusCode, b)
		}
	})
}

func TestRedirectToHTTPS(t *testing.T) {
	for _, tc := range []struct{ name, public, host, want string }{
		{"to public_url when it is https", "https://gw.example:8443", "anything:1", "https://gw.example:8443/v1/statement?x=1"},
		{"to the request's host on the TLS port", "", "localhost:%s", "https://localhost:9443/v1/statement?x=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "default", URL: "http://127.0.0.1:1"}}, PublicURL: tc.public,
				MonitorInterval: -1, Logger: quietLogger()}))

			if err != nil {
				t.Fatal(err)
			}
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			go s.ServeRedirect(ln, "9443")
			defer s.Shutdown(context.Background())
			_, port, _ := net.SplitHostPort(ln.Addr().String())
			host := tc.host
			if strings.Contains(host, "%s") {
				host = strings.ReplaceAll(host, "%s", port)
			}
			req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/v1/statement?x=1", strings.NewReader("SELECT 1"))
			req.Host = host
			resp, err := http.DefaultTransport.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusPermanentRedirect || resp.Header.Get("Location") != tc.want {
				t.Errorf("%d Location %q, want 308 %q", resp.StatusCode, resp.Header.Get("Location"), tc.want)
			}
		})
	}
}
