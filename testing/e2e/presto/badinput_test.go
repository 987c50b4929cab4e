package presto

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/e2e"
)

// seenByPresto counts the queries with marker PrestoDB ran.
func seenByPresto(t *testing.T, direct, marker string) int {
	t.Helper()
	p, rows, _ := run(t, direct, "SELECT count(*) FROM system.runtime.queries WHERE query LIKE '%"+marker+
		"%' AND query NOT LIKE '%system.runtime.queries%'", nil)
	if p.Error != nil || len(rows) != 1 {
		t.Fatalf("counting queries: %+v", p.Error)
	}
	n, _ := rows[0][0].(float64)
	return int(n)
}

// TestBadInputCorpus mirrors the Trino bad-input corpus on the PrestoDB
// path: the real binary in front of the real PrestoDB gets what a hostile
// or broken PrestoDB client sends; each gets a clear answer in bounded
// time, nothing forged reaches PrestoDB, and the proxy keeps serving.
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	bin := need(t, "PRESTROID_BIN")
	port := e2e.FreePort(t)
	secret := "presto-bad-input-route-secret-" + strings.Repeat("x", 8)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %q
max_request_body_bytes: 2000000
max_header_bytes: 16384
clusters:
  - {name: presto, url: %q, engine: presto}
routing:
  monitor_interval: -1s
`, port, secret, direct)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := e2e.ServeBinary(t, bin, port, "--config", path)
	addr := "127.0.0.1:" + port
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)

	raw := func(t *testing.T, req string) (int, string) {
		t.Helper()
		return e2e.RawRequest(t, addr, req)
	}
	alive := func(t *testing.T) {
		t.Helper()
		p, rows, _ := run(t, base, "SELECT count(*) FROM tpch.tiny.region", nil)
		if p.Error != nil || p.Stats.State != "FINISHED" || len(rows) != 1 {
			t.Fatalf("a normal query after it: %s %+v", p.Stats.State, p.Error)
		}
	}

	t.Run("malformed SQL gets PrestoDB's own error, well formed", func(t *testing.T) {
		for _, sql := range []string{"SELEC 1", "SELECT * FROM", "SELECT 'unterminated", "\x00\x01", ";;;"} {
			p, _, _ := run(t, base, sql, nil)
			if p.Error == nil || p.Stats.State != "FAILED" || p.Error.ErrorName == "" {
				t.Errorf("%q: state %s, error %+v", sql, p.Stats.State, p.Error)
			}
		}
		alive(t)
	})
	t.Run("an oversized header block gets 431", func(t *testing.T) {
		code, body := raw(t, "GET /v1/info HTTP/1.1\r\nHost: "+addr+"\r\nX-Presto-User: e2e\r\nX-Big: "+strings.Repeat("a", 20000)+"\r\n\r\n")
		if code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d %.200s", code, body)
		}
		alive(t)
	})
	t.Run("an oversized body gets 413 and never reaches PrestoDB", func(t *testing.T) {
		marker := "big_" + stamp
		sql := "SELECT '" + marker + "' -- " + strings.Repeat("x", 2100000)
		code, body := raw(t, "POST /v1/statement HTTP/1.1\r\nHost: "+addr+"\r\nX-Presto-User: e2e\r\nContent-Length: "+
			strconv.Itoa(len(sql))+"\r\n\r\n"+sql)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%d %.200s", code, body)
		}
		if n := seenByPresto(t, direct, marker); n != 0 {
			t.Errorf("PrestoDB ran it %d times", n)
		}
		alive(t)
	})
	t.Run("1 MB of SQL gets PrestoDB's own error, well formed", func(t *testing.T) {
		p, _, _ := run(t, base, "SELECT 1 -- "+strings.Repeat("y", 1<<20), nil)
		if p.Error == nil || p.Stats.State != "FAILED" || p.Error.ErrorName == "" {
			t.Errorf("state %s, error %+v", p.Stats.State, p.Error)
		}
		alive(t)
	})
	t.Run("deeply nested SQL is a well-formed answer in bounded time", func(t *testing.T) {
		start := time.Now()
		sql := "SELECT " + strings.Repeat("(", 3000) + "1" + strings.Repeat(")", 3000)
		resp, p := do(t, "POST", base+"/v1/statement", sql, nil)
		for resp.StatusCode == http.StatusOK && p.NextURI != "" && time.Since(start) < 2*time.Minute {
			resp, p = do(t, "GET", p.NextURI, "", nil)
		}
		if resp.StatusCode != http.StatusOK || p.NextURI != "" {
			t.Fatalf("status %d, nextUri %q after %s", resp.StatusCode, p.NextURI, time.Since(start))
		}
		t.Logf("3,000 nested parentheses: %s, state %s", time.Since(start).Round(time.Millisecond), p.Stats.State)
		alive(t)
	})
	t.Run("a transaction id of no configured cluster gets 400", func(t *testing.T) {
		resp, _ := do(t, "POST", base+"/v1/statement", "SELECT 1", map[string]string{"X-Presto-Transaction-Id": "elsewhere~abc"})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s", resp.Status)
		}
		alive(t)
	})
	t.Run("a Trino client is refused without reaching PrestoDB", func(t *testing.T) {
		marker := "trino_client_" + stamp
		req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader("SELECT '"+marker+"'"))
		req.Header.Set("X-Trino-User", "e2e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), "PRESTROID_ENGINE_MISMATCH") || strings.Contains(string(b), "nextUri") {
			t.Errorf("%s %.300s", resp.Status, b)
		}
		if n := seenByPresto(t, direct, marker); n != 0 {
			t.Errorf("PrestoDB ran it %d times", n)
		}
	})
	t.Run("a tampered slug or a token moved to another query gets 403 and cancels nothing", func(t *testing.T) {
		start := func(k int) (string, string, string) {
			resp, p := do(t, "POST", base+"/v1/statement",
				fmt.Sprintf("SELECT count(*) FROM tpch.tiny.nation WHERE nationkey < %d -- token_%s", k, stamp), nil)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(p.NextURI, base+"/r/presto.") || !strings.Contains(p.NextURI, "?slug=") {
				t.Fatalf("POST: %d, nextUri %q", resp.StatusCode, p.NextURI)
			}
			tok, target, ok := protocol.SplitRouted(strings.TrimPrefix(p.NextURI, base))
			if !ok {
				t.Fatalf("nextUri %s is not routed", p.NextURI)
			}
			return p.NextURI, tok, target
		}
		uriA, tokA, targetA := start(7)
		uriB, _, targetB := start(9)
		i := strings.Index(targetA, "slug=") + len("slug=") + 1 // PrestoDB's slugs start with "x"
		flip := "0"
		if targetA[i] == '0' {
			flip = "1"
		}
		forged := []struct{ what, path string }{
			{"A's token on B's path", "/r/" + tokA + targetB},
			{"A's token with its slug changed", "/r/" + tokA + targetA[:i] + flip + targetA[i+1:]},
			{"A's token without its slug", "/r/" + tokA + targetA[:strings.IndexByte(targetA, '?')]},
			{"A's token with a query parameter added", "/r/" + tokA + targetA + "&x=1"},
		}
		for _, f := range forged {
			for _, m := range []string{"GET", "DELETE"} {
				if r, _ := do(t, m, base+f.path, "", nil); r.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %s: %d, want 403", f.what, m, r.StatusCode)
				}
			}
		}
		for uri, want := range map[string]float64{uriA: 7, uriB: 9} {
			var rows [][]any
			p := page{NextURI: uri}
			for p.NextURI != "" {
				var resp *http.Response
				resp, p = do(t, "GET", p.NextURI, "", nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("genuine poll: %d", resp.StatusCode)
				}
				rows = append(rows, p.Data...)
			}
			if p.Stats.State != "FINISHED" || len(rows) != 1 || rows[0][0] != want {
				t.Errorf("genuine query: state %s, rows %v, want %v (error %+v)", p.Stats.State, rows, want, p.Error)
			}
		}
		alive(t)
	})
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the proxy process is gone: %v", err)
	}
}

// TestDeadPrestoCluster: a PrestoDB cluster that refuses connections is
// answered 503 with Retry-After (nothing was sent: the client may retry),
// and with a live PrestoDB cluster beside it the query fails over there;
// never to a cluster of the other engine.
func TestDeadPrestoCluster(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	trino := e2e.TrinoURL(t)
	dead := "http://127.0.0.1:" + e2e.FreePort(t) // nothing listens there
	quiet := proxy.Options{MonitorInterval: -1}
	only := quiet
	only.Clusters = []proxy.ClusterConfig{{Name: "dead", URL: dead, Engine: "presto"}, {Name: "trino", URL: trino, Engine: "trino"}}
	base, _ := e2e.StartProxy(t, only)
	resp, _ := do(t, "POST", base+"/v1/statement", "SELECT 1", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("dead PrestoDB cluster: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if c := resp.Header.Get("X-Prestroid-Cluster"); c != "dead" {
		t.Errorf("the query went to %q, not its engine's only cluster", c)
	}
	both := quiet
	both.Clusters = []proxy.ClusterConfig{{Name: "trino", URL: trino, Engine: "trino"}, {Name: "dead", URL: dead, Engine: "presto"},
		{Name: "presto", URL: direct, Engine: "presto"}}
	base, _ = e2e.StartProxy(t, both)
	resp, p := do(t, "POST", base+"/v1/statement", "SELECT count(*) FROM tpch.tiny.nation", nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Prestroid-Cluster") != "presto" ||
		!strings.Contains(resp.Header.Get("X-Prestroid-Decision"), "failover: dead unreachable") {
		t.Fatalf("%s, cluster %q, decision %q", resp.Status, resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"))
	}
	for p.NextURI != "" {
		_, p = do(t, "GET", p.NextURI, "", nil)
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		t.Errorf("after failover: %s %+v", p.Stats.State, p.Error)
	}
}
