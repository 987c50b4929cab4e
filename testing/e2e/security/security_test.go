// Package security tests the proxy as a platform team deploys it in front
// of an authenticating Trino: a password-protected HTTPS Trino (the
// harness's file password authenticator and self-signed keystore) behind
// the real binary serving HTTPS with identity: verified. The Trino CLI,
// trino-go-client and the Python client run queries through it with a
// password; a wrong password gets Trino's own 401 and never reaches
// Trino's query list (not even as an EXPLAIN), nor the admission queue.
package security

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trinodb/trino-go-client/trino"

	"github.com/prestroid/prestroid/testing/e2e"
)

const (
	user     = "alice"
	password = "alice-secret"
)

// proxyCert writes a self-signed certificate for 127.0.0.1 to dir.
func proxyCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "prestroid e2e"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	certFile, keyFile = filepath.Join(dir, "proxy-cert.pem"), filepath.Join(dir, "proxy-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(c)
	return certFile, keyFile, pool
}

type env struct {
	proxy       string // https://127.0.0.1:PORT
	caFile      string // the proxy's certificate, the clients' trust store
	client      *http.Client
	secure      string       // the Trino's HTTPS port (passwords; its HTTP port answers 403)
	trinoClient *http.Client // trusts the Trino's certificate
	proxyLog    *bytes.Buffer
}

// setup starts the password-protected HTTPS Trino and the binary in front
// of it (TLS, identity: verified, admission on).
func setup(t *testing.T) *env {
	t.Helper()
	e2e.TrinoURL(t) // skips without the integration environment
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	httpsPort := e2e.FreePort(t)
	_, inst := e2e.StartTrinoInstanceEnv(t, "password-https", "", nil,
		[]string{"TRINO_HTTPS_PORT=" + httpsPort, "TRINO_PASSWORDS=" + user + ":" + password + ",bob:bob-pw"})
	dir := t.TempDir()
	certFile, keyFile, pool := proxyCert(t, dir)
	port := e2e.FreePort(t)
	secret := make([]byte, 24)
	rand.Read(secret)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %q
identity: verified
tls: {cert_file: %q, key_file: %q}
upstream_tls: {ca_file: %q}
clusters:
  - {name: secure, url: "https://127.0.0.1:%s"}
routing: {monitor_user: monitor, estimate_timeout: 60s, explain: always}
admission: {max_queries: 8}
`, port, hex.EncodeToString(secret), certFile, keyFile, filepath.Join(inst, "etc", "https-cert.pem"), httpsPort)
	cfgFile := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logBuf := &bytes.Buffer{}
	cmd := exec.Command(bin, "serve", "--config", cfgFile, "--log-level", "debug")
	cmd.Stderr = logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("proxy log:\n%s", e2e.Tail(logBuf.String(), 4000))
		}
	})
	trinoPEM, err := os.ReadFile(filepath.Join(inst, "etc", "https-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	trinoPool := x509.NewCertPool()
	trinoPool.AppendCertsFromPEM(trinoPEM)
	e := &env{proxy: "https://127.0.0.1:" + port, caFile: certFile, secure: "https://127.0.0.1:" + httpsPort, proxyLog: logBuf,
		trinoClient: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: trinoPool}}, Timeout: time.Minute},
		client:      &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: time.Minute}}
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := e.client.Get(e.proxy + "/metrics")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxy not answering over HTTPS: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return e
}

func TestPasswordProtectedHTTPSTrino(t *testing.T) {
	e := setup(t)
	const want = "25"
	sqlText := "SELECT count(*) FROM tpch.tiny.nation"

	t.Run("the Trino CLI runs a query through the HTTPS proxy with a password", func(t *testing.T) {
		cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
		out, err := runCLI(cli, e, password, sqlText)
		if err != nil || strings.TrimSpace(out) != `"`+want+`"` {
			t.Fatalf("CLI: %v: %s", err, out)
		}
	})
	t.Run("trino-go-client runs a query through the HTTPS proxy with a password", func(t *testing.T) {
		name := "prestroid-security-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := trino.RegisterCustomClient(name, e.client); err != nil {
			t.Fatal(err)
		}
		dsn := strings.Replace(e.proxy, "https://", "https://"+user+":"+password+"@", 1) + "?custom_client=" + name
		db, err := sql.Open("trino", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n string
		if err := db.QueryRow(sqlText).Scan(&n); err != nil || n != want {
			t.Fatalf("got %q, %v", n, err)
		}
		// A wrong password: the client reports the 401.
		bad, _ := sql.Open("trino", strings.Replace(dsn, password, "wrong", 1))
		defer bad.Close()
		if err := bad.QueryRow(sqlText).Scan(&n); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("wrong password: %v", err)
		}
	})
	t.Run("the Python client runs a query through the HTTPS proxy with a password", func(t *testing.T) {
		py := e2e.RequireEnv(t, "PRESTROID_PYTHON")
		u, _ := strings.CutPrefix(e.proxy, "https://")
		host, port, _ := net.SplitHostPort(u)
		script := `import sys, trino
from trino.auth import BasicAuthentication
conn = trino.dbapi.connect(host=sys.argv[1], port=int(sys.argv[2]), user=sys.argv[3], http_scheme="https",
                           auth=BasicAuthentication(sys.argv[3], sys.argv[4]), verify=sys.argv[5])
cur = conn.cursor()
cur.execute(sys.argv[6])
print(cur.fetchall()[0][0])
`
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, py, "-c", script, host, port, user, password, e.caFile, sqlText)
		// requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE, when the
		// environment sets them, win over a session's verify path (the
		// trino client's verify=): point them at the proxy's certificate.
		cmd.Env = append(os.Environ(), "REQUESTS_CA_BUNDLE="+e.caFile, "CURL_CA_BUNDLE="+e.caFile)
		out, err := cmd.CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Fatalf("python: %v: %s", err, out)
		}
	})
	t.Run("a wrong password gets Trino's 401: no EXPLAIN, no query, no queue slot", func(t *testing.T) {
		marker := "wrongpw_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		req, _ := http.NewRequest("POST", e.proxy+"/v1/statement", strings.NewReader(markedQuery(marker)))
		req.Header.Set("X-Trino-User", user)
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":wrong")))
		resp, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// What Trino itself answers the same request.
		direct := directStatus(t, e, marker)
		if resp.StatusCode != http.StatusUnauthorized || direct != http.StatusUnauthorized {
			t.Fatalf("through the proxy %d (%s), directly %d; want 401 both", resp.StatusCode, body, direct)
		}
		if resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("no WWW-Authenticate challenge relayed: %v", resp.Header)
		}
		cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
		if out, err := runCLI(cli, e, "wrong", markedQuery(marker)); err == nil || !regexp.MustCompile(`(?i)401|unauthorized|authentication failed`).MatchString(out) {
			t.Errorf("CLI with a wrong password: %v: %s", err, out)
		}
		if n := queriesWith(t, e, marker); n != 0 {
			t.Errorf("Trino saw %d queries (EXPLAINs included) with the marker", n)
		}
		// The control: the right password's query shows up, EXPLAIN and all.
		okMarker := "rightpw_" + strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := runToEnd(e, markedQuery(okMarker)); err != nil {
			t.Fatal(err)
		}
		if n := queriesWith(t, e, okMarker); n != 2 {
			t.Errorf("the right password: Trino saw %d queries with its marker, want 2 (the EXPLAIN and the query)", n)
		}
		m := metrics(t, e)
		for _, line := range []string{"prestroid_queue_length 0", "prestroid_inflight_queries 0"} {
			if !strings.Contains(m, line+"\n") {
				t.Errorf("metrics lack %q", line)
			}
		}
		if !regexp.MustCompile(`prestroid_identity_checks_total\{result="refused"\} [1-9]`).MatchString(m) {
			t.Errorf("no refused identity check counted:\n%s", grepLines(m, "prestroid_identity"))
		}
		if !regexp.MustCompile(`prestroid_identity_checks_total\{result="explain"\} [1-9]`).MatchString(m) {
			t.Errorf("no identity verified by an EXPLAIN:\n%s", grepLines(m, "prestroid_identity"))
		}
		if strings.Contains(e.proxyLog.String(), base64.StdEncoding.EncodeToString([]byte(user+":"+password))) ||
			strings.Contains(e.proxyLog.String(), password) {
			t.Errorf("the proxy's debug log holds the password")
		}
	})
}

// runToEnd runs sql through the proxy by hand with the right password,
// following nextUri to the last page.
func runToEnd(e *env, sqlText string) error {
	method, uri, body := "POST", e.proxy+"/v1/statement", sqlText
	for uri != "" {
		req, _ := http.NewRequest(method, uri, strings.NewReader(body))
		req.SetBasicAuth(user, password)
		resp, err := e.client.Do(req)
		if err != nil {
			return err
		}
		var page struct {
			NextURI string `json:"nextUri"`
			Error   any    `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || page.Error != nil {
			return fmt.Errorf("%s %s: %d %v %v", method, uri, resp.StatusCode, err, page.Error)
		}
		method, uri, body = "GET", page.NextURI, ""
	}
	return nil
}

// runCLI runs the Trino CLI jar against the proxy with password pw
// (TRINO_PASSWORD, as the CLI reads it) and the proxy's certificate as its
// trust store; it returns stdout, with stderr after it on failure.
func runCLI(cli string, e *env, pw, sqlText string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", "-jar", cli, "--server", e.proxy, "--user", user, "--password",
		"--truststore-path", e.caFile, "--output-format", "CSV", "--execute", sqlText)
	cmd.Env = append(os.Environ(), "TRINO_PASSWORD="+pw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// directStatus is the HTTP status Trino's HTTPS port answers to the same
// wrong-password POST (it never runs it: the marker stays unseen).
func directStatus(t *testing.T, e *env, marker string) int {
	t.Helper()
	c := e.trinoClient
	req, _ := http.NewRequest("POST", e.secure+"/v1/statement", strings.NewReader(markedQuery(marker)))
	req.Header.Set("X-Trino-User", user)
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(user+":wrong")))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// markedQuery reads a real table, so the proxy estimates it with an EXPLAIN
// (a statement without a table is cheap: no EXPLAIN at all), and carries
// marker for queriesWith. The estimate_timeout of the proxy's config is
// long enough for a first EXPLAIN on a freshly started, loaded Trino.
func markedQuery(marker string) string {
	return "SELECT count(*) FROM tpch.tiny.nation WHERE name <> '" + marker + "'"
}

// queriesWith counts the queries Trino knows whose text holds marker,
// EXPLAINs included (the count itself excluded), asked directly over
// HTTPS as bob (Trino takes no credentials over plain HTTP).
func queriesWith(t *testing.T, e *env, marker string) int {
	t.Helper()
	name := "prestroid-security-direct-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := trino.RegisterCustomClient(name, e.trinoClient); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("trino", strings.Replace(e.secure, "https://", "https://bob:bob-pw@", 1)+"?custom_client="+name)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM system.runtime.queries WHERE query LIKE '%" + marker +
		"%' AND query NOT LIKE '%system.runtime.queries%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func metrics(t *testing.T, e *env) string {
	t.Helper()
	resp, err := e.client.Get(e.proxy + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
