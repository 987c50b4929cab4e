// Package e2e holds the helpers of Prestroid's end-to-end tests, which live
// in its sub-packages, one per concern (Go runs packages in parallel):
//
//	protocol   errors, session state, cancel, tampered URIs, streaming memory
//	admission  the admission queue with real clients
//	routing    cost routing on two real clusters, fail-open
//	guardrail  guardrails in the real binary: a refusal no query of reaches
//	           Trino, the override tag, dry run, metrics, the console's list
//	spooling   the spooling protocol (a second Trino, an S3 fake)
//	parquet    estimates on Parquet tables (a Trino with an iceberg catalog,
//	           tables made by prestroid materialize)
//	clients    every workload query with the CLI, the Go and the Python client
//	security   a password-protected HTTPS Trino behind the HTTPS proxy
//	replicas   two proxy binaries sharing admission through Redis
//	cascade    the estimate cascade: history skips EXPLAIN, survives a restart, stays bounded; cheap statements
//	console    the web console in headless Chromium: decisions, queue and cancel, plots, Trino's UI link
//	faults     kill -9 of Trino mid-stream, proxy restart and graceful upgrade
//	           mid-query, a cluster that never answers, a given-up EXPLAIN
//	load       200 concurrent clients through the real binary and directly:
//	           errors, latency, the proxy's RSS, fds and goroutines (no leak)
//	gateway    a real Trino Gateway 18 (its own PostgreSQL, testing/pgtest)
//	           routing by the binary's /v1/routing to two real clusters
//	presto     a real PrestoDB 0.296 (testing/presto): its CLI, JDBC and
//	           Python clients through the proxy, Trino and PrestoDB in one
//	           proxy, cost routing between PrestoDB clusters, bad input
//
// They use real Trino (from the harness), the real proxy, and real clients
// (the Trino CLI jar, trino-go-client, the Python trino client). They run
// when PRESTROID_TRINO_URL is set (make test sets it after starting Trino)
// and skip otherwise; once it is set, every failure is a failure.
package e2e

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/internal/fillzero"
	"github.com/prestroid/prestroid/internal/workloads"
	"github.com/prestroid/prestroid/proxy"
	_ "github.com/trinodb/trino-go-client/trino"
)

// TrinoURL returns the real Trino's URL or skips the test.
func TrinoURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PRESTROID_TRINO_URL")
	if u == "" {
		t.Skip("PRESTROID_TRINO_URL not set: run `make test`, which starts a real Trino")
	}
	return u
}

// RequireEnv returns the environment variable name, failing the test when
// it is unset (call it after TrinoURL: the real-Trino run needs it).
func RequireEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s must be set when PRESTROID_TRINO_URL is (make test sets both)", name)
	}
	return v
}

// StartProxy runs an in-process proxy in front of the given clusters and
// returns its base URL; what o leaves zero is a configuration's default
// (proxy.Defaults). It is shut down in Cleanup.
func StartProxy(t testing.TB, o proxy.Options) (string, *proxy.Server) {
	t.Helper()
	fillzero.Fill(&o, proxy.Defaults())
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	srv, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), srv
}

// StartDefaultProxy runs an in-process proxy in front of the real Trino
// alone (cluster "default").
func StartDefaultProxy(t testing.TB) string {
	u, _ := StartProxy(t, proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "default", URL: TrinoURL(t)}}})
	return u
}

// OpenDB opens a trino-go-client database/sql handle (user e2e, source
// prestroid-e2e, then extra DSN parameters), closed in Cleanup.
func OpenDB(t testing.TB, server, extra string) *sql.DB {
	t.Helper()
	u := strings.Replace(server, "http://", "http://e2e@", 1)
	dsn := u + "?source=prestroid-e2e" + extra
	db, err := sql.Open("trino", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Workload is one benchmark query with its placeholders filled in.
type Workload struct {
	Name string // e.g. tpcds/q01
	SQL  string
}

var trailingSemicolon = regexp.MustCompile(`\s*;\s*$`)

// Tables says where a workload's tables live: the ${database} and ${schema}
// placeholders of benchmark bench ("tpch" or "tpcds").
type Tables func(bench string) (database, schema string)

// ConnectorTables reads the TPC connectors' generated schema (e.g. "tiny").
func ConnectorTables(schema string) Tables {
	return func(bench string) (string, string) { return bench, schema }
}

// MemoryCopies copies the TPC-H and TPC-DS connectors' schema (e.g. "tiny")
// into Trino's memory catalog once per Trino (CREATE TABLE IF NOT EXISTS, so
// concurrent or repeated calls are safe) and returns where the copies are.
//
// The connectors generate every row on every scan: at tiny, a full pass of
// the workloads measured 274 s of Trino CPU on the connectors and 38 s on
// the copies (tpcds q09 scans store_sales 15 times: 10.5 s against 0.4 s),
// with the same plans' shapes and the same result sets on both paths. Tests
// that compare clients, not data sources, read the copies.
func MemoryCopies(t testing.TB, trinoURL, schema string) Tables {
	t.Helper()
	db := OpenDB(t, trinoURL, "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, bench := range []string{"tpch", "tpcds"} {
		dst := "memory." + bench + "_" + schema
		if _, err := db.ExecContext(ctx, "CREATE SCHEMA IF NOT EXISTS "+dst); err != nil {
			t.Fatalf("memory copy of %s.%s: %v", bench, schema, err)
		}
		rows, err := db.QueryContext(ctx, fmt.Sprintf("SHOW TABLES FROM %s.%s", bench, schema))
		if err != nil {
			t.Fatalf("memory copy of %s.%s: %v", bench, schema, err)
		}
		var tables []string
		for rows.Next() {
			var name string
			if err := rows.Scan(&name); err != nil {
				t.Fatal(err)
			}
			tables = append(tables, name)
		}
		rows.Close()
		if len(tables) == 0 {
			t.Fatalf("memory copy: %s.%s has no tables", bench, schema)
		}
		for _, tb := range tables {
			q := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s.%s AS SELECT * FROM %s.%s.%s", dst, tb, bench, schema, tb)
			if _, err := db.ExecContext(ctx, q); err != nil {
				t.Fatalf("memory copy: %s: %v", q, err)
			}
		}
	}
	return func(bench string) (string, string) { return "memory", bench + "_" + schema }
}

// LoadWorkloads reads $PRESTROID_WORKLOADS (make test sets it to
// ../shared/workloads beside the checkout, or WORKLOADS=DIR) and fills the
// placeholders for the given tables and scale (docs/workloads.md says how).
// Without the files the test fails, saying how to point at them.
func LoadWorkloads(t testing.TB, at Tables, scale string) []Workload {
	t.Helper()
	dir := os.Getenv(workloads.Env)
	if dir == "" {
		t.Fatalf("%s must be set when PRESTROID_TRINO_URL is (make test sets both): %s", workloads.Env, workloads.Hint)
	}
	var out []Workload
	for _, bench := range []string{"tpch", "tpcds"} {
		files, err := filepath.Glob(filepath.Join(dir, bench, "*.sql"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s query files in %s (%v): %s", bench, dir, err, workloads.Hint)
		}
		sort.Strings(files)
		database, schema := at(bench)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			q := string(b)
			q = strings.NewReplacer("${database}", database, "${schema}", schema, "${prefix}", "", "${scale}", scale).Replace(q)
			q = trailingSemicolon.ReplaceAllString(q, "")
			out = append(out, Workload{Name: bench + "/" + strings.TrimSuffix(filepath.Base(f), ".sql"), SQL: q})
		}
	}
	return out
}

// RowsAsStrings runs q and returns its rows rendered as sorted strings, so
// result sets compare independently of row order, or the error text.
func RowsAsStrings(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if f, ok := v.(float64); ok {
				vals[i] = NormFloat(f)
			}
		}
		out = append(out, fmt.Sprint(vals...))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return append([]string{strings.Join(cols, ",")}, out...), nil
}

// NormFloat renders a double to 10 significant digits: sums of doubles
// depend on the order Trino adds them in, which varies run to run, so the
// last bits of a double result are noise in either path.
func NormFloat(f float64) string { return strconv.FormatFloat(f, 'g', 10, 64) }

// NormField normalizes one text field of CLI output the same way.
func NormField(s string) string {
	if strings.ContainsAny(s, ".Ee") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return NormFloat(f)
		}
	}
	return s
}

// StripQueryID replaces query ids in an error's text, so that errors of two
// runs of a query compare.
func StripQueryID(err error) string {
	s := fmt.Sprint(err)
	for _, f := range strings.Fields(s) {
		if len(f) > 20 && strings.Count(f, "_") == 3 {
			s = strings.ReplaceAll(s, f, "QUERYID")
		}
	}
	return s
}

// handedOut holds the ports FreePort returned in this test binary: the
// kernel may give a closed port out again, and two parallel tests that
// start a server on the same port see each other's (one fails to bind, its
// test then talks to the other's server).
var handedOut = struct {
	sync.Mutex
	ports map[string]bool
}{ports: map[string]bool{}}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago and
// that no other caller in this test binary was given.
func FreePort(t testing.TB) string {
	t.Helper()
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		ln.Close()
		if !handedOut.ports[port] {
			handedOut.ports[port] = true
			return port
		}
	}
	t.Fatal("no port that was not handed out already in 100 tries")
	return ""
}

// WaitHTTP waits up to 20 s for url to answer at all.
func WaitHTTP(t testing.TB, url string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not answering: %v", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Both runs a and b concurrently and waits for both.
func Both(a, b func()) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a() }()
	go func() { defer wg.Done(); b() }()
	wg.Wait()
}

// Tail returns the last n bytes of s, marked as cut when it is longer.
func Tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// RepoRoot returns the repository's root: the nearest directory above the
// working directory (the test's package) that holds testing/trino/trino.sh.
func RepoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "testing/trino/trino.sh")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("repo root (with testing/trino/trino.sh) not found above %s", wd)
		}
	}
}

// ServeBinary runs `prestroid serve args...` listening on port until the
// test ends, and returns it and its base URL once it answers (without
// touching any cluster, so the first upstream request is the test's).
func ServeBinary(t testing.TB, bin, port string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--log-level", "warn"}, args...)...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := "http://127.0.0.1:" + port
	WaitHTTP(t, base+"/metrics") // the proxy's own: asks no cluster
	return cmd, base
}

// ServeConfig runs `prestroid serve` (bin) on a fresh port with the
// configuration body (YAML, every key but listen and route_secret, which
// it adds) until the test ends, and returns it and its base URL once it
// answers. The test is skipped without PRESTROID_ORT_LIB (the estimator
// needs ONNX Runtime).
func ServeConfig(t testing.TB, bin, body string) (*exec.Cmd, string) {
	t.Helper()
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	port := FreePort(t)
	cfg := "listen: 127.0.0.1:" + port + "\nroute_secret: " + strings.Repeat("s", 40) + "\n" + body
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return ServeBinary(t, bin, port, "--config", path)
}

// StartTrinoInstance starts another harness instance (1G heap) on a free
// port with extra config.properties lines and extra etc/ files, in which
// "{{ETC}}" stands for the instance's etc directory. It returns the URL and
// the instance's directory; the instance is stopped in Cleanup (its log is
// shown if the test failed).
func StartTrinoInstance(t testing.TB, what, extraConfig string, files map[string]string) (string, string) {
	t.Helper()
	return StartTrinoInstanceEnv(t, what, extraConfig, files, nil)
}

// StartTrinoInstanceEnv is StartTrinoInstance with extra trino.sh
// environment settings (e.g. TRINO_HTTPS_PORT, TRINO_PASSWORDS, TRINO_CATALOGS=iceberg).
func StartTrinoInstanceEnv(t testing.TB, what, extraConfig string, files map[string]string, env []string) (string, string) {
	t.Helper()
	root := RepoRoot(t)
	dir := t.TempDir()
	port := FreePort(t)
	cache := os.Getenv("PRESTROID_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "prestroid")
	}
	inst := filepath.Join(cache, "instances", port)
	extra := filepath.Join(dir, "extra.config")
	overlay := filepath.Join(dir, "etc")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(extra, []byte(extraConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		content = strings.ReplaceAll(content, "{{ETC}}", filepath.Join(inst, "etc"))
		if err := os.WriteFile(filepath.Join(overlay, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	harness := func(verb string) ([]byte, error) {
		cmd := exec.Command(filepath.Join(root, "testing/trino/trino.sh"), verb)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "TRINO_PORT="+port, "TRINO_HEAP=1G", "TRINO_START_TIMEOUT=420",
			"TRINO_EXTRA_CONFIG="+extra, "TRINO_ETC_OVERLAY="+overlay)
		cmd.Env = append(cmd.Env, env...)
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		if out, err := harness("down"); err != nil {
			t.Errorf("trino.sh down (port %s): %v\n%s", port, err, out)
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(inst, "server.log"))
			t.Logf("%s Trino log %s (tail):\n%s", what, filepath.Join(inst, "server.log"), Tail(string(log), 4000))
			return
		}
		_ = os.RemoveAll(inst)
	})
	start := time.Now()
	if out, err := harness("up"); err != nil {
		t.Fatalf("%s Trino on port %s did not start: %v\n%s", what, port, err, out)
	}
	t.Logf("%s Trino up on port %s in %s", what, port, time.Since(start).Round(time.Second))
	return "http://127.0.0.1:" + port, inst
}

// Page is the part of a QueryResults page these tests read.
type Page struct {
	ID      string                 `json:"id"`
	NextURI string                 `json:"nextUri"`
	InfoURI string                 `json:"infoUri"`
	Columns json.RawMessage        `json:"columns"`
	Data    json.RawMessage        `json:"data"`
	Stats   struct{ State string } `json:"stats"`
	Error   *struct {
		Message       string          `json:"message"`
		ErrorCode     int             `json:"errorCode"`
		ErrorName     string          `json:"errorName"`
		ErrorType     string          `json:"errorType"`
		ErrorLocation json.RawMessage `json:"errorLocation"`
	} `json:"error"`
}

// Do sends one protocol request as user e2e with the extra headers h and
// decodes a 200's body as a page.
func Do(t testing.TB, method, url, body string, h map[string]string) (*http.Response, Page) {
	t.Helper()
	return DoAs[Page](t, dialect.Trino, method, url, body, h)
}

// DoAs sends one protocol request as user e2e of a client of engine's
// dialect (its user header) with the extra headers h, and decodes a 200's
// body as a P (the part of a page a test reads).
func DoAs[P any](t testing.TB, engine dialect.Engine, method, url, body string, h map[string]string) (*http.Response, P) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set(engine.Header("User"), "e2e")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p P
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && len(b) > 0 {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s %s: %v: %.300s", method, url, err, b)
		}
	}
	return resp, p
}

// RawRequest sends req to addr as bytes and reads one response (status,
// body) within 10 s. The request is written while the response is read: a
// server refusing an oversized request answers before reading all of it
// and closes, and the reset that unread bytes then cause can race the
// answer, so a reset before any answer is tried again (3 times).
func RawRequest(t testing.TB, addr, req string) (int, string) {
	t.Helper()
	var lastErr error
	for try := 0; try < 3; try++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		go io.WriteString(c, req) // a write error is the server closing: read its answer
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			c.Close()
			lastErr = err
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		return resp.StatusCode, string(b)
	}
	t.Fatalf("no answer in 3 tries: %v", lastErr)
	return 0, ""
}

// RunRaw drives one query through the protocol by hand and returns the last
// page; every URI it follows must point at base.
func RunRaw(t testing.TB, base, sql string) Page {
	t.Helper()
	resp, p := Do(t, "POST", base+"/v1/statement", sql, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %d", resp.StatusCode)
	}
	for p.NextURI != "" {
		if !strings.HasPrefix(p.NextURI, base) {
			t.Fatalf("nextUri %s does not point at %s", p.NextURI, base)
		}
		resp, p = Do(t, "GET", p.NextURI, "", nil)
		if resp.StatusCode != 200 {
			t.Fatalf("GET nextUri: %d", resp.StatusCode)
		}
	}
	return p
}

// SlowQuery runs for minutes on the harness's Trino: a query to cancel or
// to hold an admission slot with.
const SlowQuery = "SELECT count(*) FROM tpch.sf100.lineitem WHERE comment LIKE '%prestroid%'"

// SeenByTrino counts queries with marker that Trino ran (the proxy's own
// EXPLAINs, which carry the text too, do not count).
func SeenByTrino(t testing.TB, direct, marker string) int {
	var n int
	err := OpenDB(t, direct, "").QueryRow("SELECT count(*) FROM system.runtime.queries WHERE query LIKE '%" + marker +
		"%' AND query NOT LIKE '%system.runtime.queries%' AND query NOT LIKE 'EXPLAIN %'").Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
