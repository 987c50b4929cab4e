// Package e2e holds Prestroid's end-to-end tests: real Trino (from the
// harness), the real proxy, and real clients (the Trino CLI jar,
// trino-go-client, the Python trino client).
//
// They run when PRESTROID_TRINO_URL is set (make test sets it after starting
// Trino) and skip otherwise; once it is set, every failure is a failure.
package e2e

import (
	"context"
	"database/sql"
	"fmt"
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
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	_ "github.com/trinodb/trino-go-client/trino"
)

// trinoURL returns the real Trino's URL or skips the test.
func trinoURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PRESTROID_TRINO_URL")
	if u == "" {
		t.Skip("PRESTROID_TRINO_URL not set: run `make test`, which starts a real Trino")
	}
	return u
}

func requireEnv(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s must be set when PRESTROID_TRINO_URL is (make test sets both)", name)
	}
	return v
}

// startProxy runs an in-process proxy in front of the given clusters and
// returns its base URL.
func startProxy(t testing.TB, o proxy.Options) (string, *proxy.Server) {
	t.Helper()
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

func startDefaultProxy(t testing.TB) string {
	u, _ := startProxy(t, proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "default", URL: trinoURL(t)}}})
	return u
}

// openDB opens a trino-go-client database/sql handle.
func openDB(t testing.TB, server, extra string) *sql.DB {
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

// workload is one benchmark query with its placeholders filled in.
type workload struct {
	Name string // e.g. tpcds/q01
	SQL  string
}

var trailingSemicolon = regexp.MustCompile(`\s*;\s*$`)

// loadWorkloads reads ../shared/workloads and fills the placeholders for
// the given scale (SOURCE.md there says how).
func loadWorkloads(t testing.TB, schema string, scale string) []workload {
	t.Helper()
	dir := requireEnv(t, "PRESTROID_WORKLOADS")
	var out []workload
	for _, bench := range []string{"tpch", "tpcds"} {
		files, err := filepath.Glob(filepath.Join(dir, bench, "*.sql"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no workload files in %s/%s: %v", dir, bench, err)
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			q := string(b)
			q = strings.NewReplacer("${database}", bench, "${schema}", schema, "${prefix}", "", "${scale}", scale).Replace(q)
			q = trailingSemicolon.ReplaceAllString(q, "")
			out = append(out, workload{Name: bench + "/" + strings.TrimSuffix(filepath.Base(f), ".sql"), SQL: q})
		}
	}
	return out
}

// rowsAsStrings runs q and returns its rows rendered as sorted strings, so
// result sets compare independently of row order, or the error text.
func rowsAsStrings(ctx context.Context, db *sql.DB, q string) ([]string, error) {
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
				vals[i] = normFloat(f)
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

// normFloat renders a double to 10 significant digits: sums of doubles
// depend on the order Trino adds them in, which varies run to run, so the
// last bits of a double result are noise in either path.
func normFloat(f float64) string { return strconv.FormatFloat(f, 'g', 10, 64) }

// normField normalizes one text field of CLI output the same way.
func normField(s string) string {
	if strings.ContainsAny(s, ".Ee") {
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return normFloat(f)
		}
	}
	return s
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

func waitHTTP(t testing.TB, url string) {
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

// startTrinoInstance starts another harness instance (1G heap) on a free
// port with extra config.properties lines and extra etc/ files, in which
// "{{ETC}}" stands for the instance's etc directory. It returns the URL and
// is stopped in Cleanup (its log is shown if the test failed).
func startTrinoInstance(t testing.TB, what, extraConfig string, files map[string]string) (string, string) {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	port := freePort(t)
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
		cmd.Env = append(os.Environ(), "TRINO_PORT="+port, "TRINO_HEAP=1G", "TRINO_START_TIMEOUT=240",
			"TRINO_EXTRA_CONFIG="+extra, "TRINO_ETC_OVERLAY="+overlay)
		return cmd.CombinedOutput()
	}
	t.Cleanup(func() {
		if out, err := harness("down"); err != nil {
			t.Errorf("trino.sh down (port %s): %v\n%s", port, err, out)
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(inst, "server.log"))
			t.Logf("%s Trino log %s (tail):\n%s", what, filepath.Join(inst, "server.log"), tail(string(log), 4000))
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
