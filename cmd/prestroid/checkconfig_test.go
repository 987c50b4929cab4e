package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
)

// writeCert writes a self-signed certificate and its key valid until
// notAfter into dir and returns their paths.
func writeCert(t *testing.T, dir string, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "prestroid.test"},
		NotBefore: notAfter.Add(-48 * time.Hour), NotAfter: notAfter, DNSNames: []string{"prestroid.test"}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalPKCS8PrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600)
	return certFile, keyFile
}

// runCheck runs `prestroid serve --check-config ARGS...` in process with
// the environment cleared of PRESTROID_* settings that would change it.
func runCheck(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out bytes.Buffer
	checkOut = &out
	defer func() { checkOut = os.Stdout }()
	code := runServe(append([]string{"--check-config"}, args...))
	return code, out.String()
}

// TestServeCheckConfig runs serve --check-config on valid and invalid
// configurations. The configured listen address is held by the test: the
// check must not try to bind it (nor write the pid file), and it returns.
func TestServeCheckConfig(t *testing.T) {
	for _, k := range []string{"PRESTROID_CONFIG", "PRESTROID_ROUTE_SECRET", "PRESTROID_ADMISSION_REDIS", "PRESTROID_MODEL", "PRESTROID_UPSTREAM", "PRESTROID_LISTEN"} {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dir := t.TempDir()
	cert, key := writeCert(t, dir, time.Now().Add(30*24*time.Hour))
	oldCert, oldKey := writeCert(t, t.TempDir(), time.Now().Add(-time.Hour))
	pidFile := filepath.Join(dir, "prestroid.pid")
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := "listen: " + held.Addr().String() + "\nadmin_listen: 127.0.0.1:1\npid_file: " + pidFile +
		"\nclusters:\n  - {name: small, url: 'http://127.0.0.1:1', class: small}\n  - {name: large, url: 'http://127.0.0.1:2', class: large}\n" +
		"routing:\n  classes:\n    - {name: small, max_cpu_seconds: 30}\n    - {name: large}\n"
	secret := "route_secret: " + strings.Repeat("s", 32) + "\n"
	redis := "admission:\n  max_queries: 4\n  redis: redis://127.0.0.1:1/0\n"
	tlsKeys := "tls:\n  cert_file: " + cert + "\n  key_file: " + key + "\n"

	for _, tc := range []struct {
		name string
		yaml string
		args []string
		code int
		want []string
	}{
		{"replicas with TLS", base + secret + redis + tlsKeys, nil, 0,
			[]string{"ok    config: valid; listen " + held.Addr().String(), "ok    route_secret: set (32 bytes)",
				"ok    tls: " + cert + ": CN=prestroid.test, valid until", "ok    admission.redis: set (not contacted; never printed)",
				"ok    usage: shared through Redis (not contacted; never printed)", "config OK"}},
		{"estimator off, no secret, one replica", base + "estimator: {disabled: true}\n", nil, 0,
			[]string{"warn  route_secret: none", "ok    usage: in this process's memory; 1m0s buckets kept 24h0m0s", "ok    estimator: disabled", "config OK: 1 warning(s)"}},
		{"redis without a route secret", base + redis, nil, 1,
			[]string{"FAIL  route_secret: missing: replicas", "config INVALID: 1 error(s)"}},
		{"several replicas without a route secret", base + "admission: {replicas: 3}\n", nil, 1,
			[]string{"FAIL  route_secret: missing", "warn  usage: in each replica's memory"}},
		{"an expired certificate", base + secret + "tls:\n  cert_file: " + oldCert + "\n  key_file: " + oldKey + "\n", nil, 1,
			[]string{"FAIL  tls: " + oldCert + " expired on"}},
		{"a key that is not the certificate's", base + secret + "tls:\n  cert_file: " + cert + "\n  key_file: " + oldKey + "\n", nil, 1,
			[]string{"FAIL  tls: proxy: TLS certificate"}},
		{"a CA file that holds no certificate", base + secret + "upstream_tls: {ca_file: " + key + "}\n", nil, 1,
			[]string{"FAIL  upstream_tls:"}},
		{"a model directory that is no bundle", base + secret + "estimator: {model: " + dir + "}\n", nil, 1,
			[]string{"FAIL  estimator.model: " + dir}},
		{"an unknown key", base + "colour: blue\n", nil, 1, []string{"FAIL  load:", "colour"}},
		{"the deprecated routing.explain", base + "  explain: never\n" + "estimator: {disabled: true}\n", nil, 0,
			[]string{"warn  routing.explain: deprecated: \"never\" is used as estimator.explain", "config OK: 2 warning(s)"}},
		{"routing.explain and estimator.explain disagreeing", base + "  explain: never\n" + "estimator: {disabled: true, explain: always}\n", nil, 1,
			[]string{"FAIL  load:", `routing.explain="never" conflicts with estimator.explain="always"`}},
		{"a flag overriding the file", base + secret, []string{"--listen", "nohostport"}, 1, []string{"FAIL  load:", "listen"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := write(strings.ReplaceAll(tc.name, " ", "_")+".yaml", tc.yaml)
			start := time.Now()
			code, out := runCheck(t, append([]string{"--config", cfg}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d:\n%s", code, tc.code, out)
			}
			if !strings.HasPrefix(out, "prestroid serve --check-config: "+cfg+"\n") {
				t.Errorf("report does not start with the file:\n%s", out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("report lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out, "redis://") {
				t.Errorf("report prints the Redis URL:\n%s", out)
			}
			if _, err := os.Stat(pidFile); err == nil {
				t.Errorf("--check-config wrote the pid file")
			}
			t.Logf("%s: exit %d in %v", tc.name, code, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestServeLogsDeprecations: serve warns at startup of each deprecated key
// the configuration still uses, as --check-config prints it.
func TestServeLogsDeprecations(t *testing.T) {
	cfg := &config.Config{Routing: config.Routing{DeprecatedExplain: "always"}}
	var buf bytes.Buffer
	logDeprecations(cfg, slog.New(slog.NewTextHandler(&buf, nil)))
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "key=routing.explain") ||
		!strings.Contains(out, "estimator.explain") {
		t.Errorf("log = %q", out)
	}
}
