package protocol

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestBadInputCorpus feeds the real binary, in front of the real Trino, what
// a hostile or broken client sends: each gets
// a clear answer in bounded time, nothing forged or smuggled reaches Trino,
// and the proxy keeps serving (a normal query after each, and the process
// still running at the end).
func TestBadInputCorpus(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	port := e2e.FreePort(t)
	// Both clusters are the suite's Trino behind a relay that counts every
	// request, so "no upstream request" is counted, not inferred; the
	// monitor is off so that the relays see only what clients cause.
	relays := map[string]*countingRelay{"default": newCountingRelay(t, direct), "other": newCountingRelay(t, direct)}
	secret := "bad-input-corpus-route-secret-" + strings.Repeat("x", 8)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %q
max_request_body_bytes: 2000000
max_header_bytes: 16384
clusters:
  - {name: default, url: %q}
  - {name: other, url: %q}
routing:
  estimate_timeout: 5s
  monitor_interval: -1s
  planners: [default]
`, port, secret, relays["default"].URL, relays["other"].URL)
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
		p := e2e.RunRaw(t, base, "SELECT count(*) FROM tpch.tiny.region")
		if p.Error != nil || p.Stats.State != "FINISHED" {
			t.Fatalf("a normal query after it: %+v", p)
		}
	}

	t.Run("an oversized header block gets 431", func(t *testing.T) {
		code, body := raw(t, "GET /v1/info HTTP/1.1\r\nHost: "+addr+"\r\nX-Big: "+strings.Repeat("a", 20000)+"\r\n\r\n")
		if code != http.StatusRequestHeaderFieldsTooLarge {
			t.Errorf("%d %.200s", code, body)
		}
		alive(t)
	})
	t.Run("an oversized body gets 413 and never reaches Trino", func(t *testing.T) {
		marker := "big_" + stamp
		sql := "SELECT '" + marker + "' -- " + strings.Repeat("x", 2100000)
		code, body := raw(t, "POST /v1/statement HTTP/1.1\r\nHost: "+addr+"\r\nX-Trino-User: e2e\r\nContent-Length: "+
			strconv.Itoa(len(sql))+"\r\n\r\n"+sql)
		if code != http.StatusRequestEntityTooLarge {
			t.Errorf("%d %.200s", code, body)
		}
		if n := e2e.SeenByTrino(t, direct, marker); n != 0 {
			t.Errorf("Trino ran it %d times", n)
		}
		alive(t)
	})
	t.Run("Content-Length with Transfer-Encoding smuggles nothing", func(t *testing.T) {
		marker := "smuggled_" + stamp
		inner := "POST /v1/statement HTTP/1.1\r\nHost: " + addr + "\r\nX-Trino-User: e2e\r\nContent-Length: " +
			strconv.Itoa(len("SELECT '"+marker+"'")) + "\r\n\r\nSELECT '" + marker + "'"
		// A front end honouring Content-Length forwards all of it as one
		// body; one honouring Transfer-Encoding ends the body at the empty
		// chunk and reads the rest as a second request.
		body := "0\r\n\r\n" + inner
		req := "POST /v1/statement HTTP/1.1\r\nHost: " + addr + "\r\nX-Trino-User: e2e\r\nContent-Length: " +
			strconv.Itoa(len(body)) + "\r\nTransfer-Encoding: chunked\r\n\r\n" + body
		// One answer, then the connection closes (RFC 9112 §6.1: a
		// request with both must not leave the connection reusable): the
		// bytes after the empty chunk are never read as a request.
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		br := bufio.NewReader(c)
		first, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		b, _ := io.ReadAll(first.Body)
		first.Body.Close()
		code, resp := first.StatusCode, string(b)
		t.Logf("answered %d %.120s", code, resp)
		if second, err := http.ReadResponse(br, nil); err == nil {
			t.Errorf("a second response on the connection: %d", second.StatusCode)
		}
		time.Sleep(2 * time.Second)
		if n := e2e.SeenByTrino(t, direct, marker); n != 0 {
			t.Errorf("the smuggled statement ran %d times on Trino (first answer %d %.200s)", n, code, resp)
		}
		alive(t)
	})
	t.Run("path traversal in routed and unrouted URIs reaches no other path", func(t *testing.T) {
		for _, p := range []string{
			"/r/AAAA/../../v1/info",
			"/r/%2e%2e/%2e%2e/etc/passwd",
			"/v1/statement/../../../etc/passwd",
			"/v1/query/..%2f..%2fv1%2fnode",
			"/r/" + strings.Repeat("A", 64) + "/v1/statement/executing/x/y/1",
		} {
			code, body := raw(t, "GET "+p+" HTTP/1.1\r\nHost: "+addr+"\r\nX-Trino-User: e2e\r\n\r\n")
			if code < 400 || code >= 500 || strings.Contains(body, "root:") || strings.Contains(body, `"nodeVersion"`) {
				t.Errorf("GET %s: %d %.200s", p, code, body)
			}
		}
		alive(t)
	})
	t.Run("1 MB of SQL gets Trino's own error, well formed", func(t *testing.T) {
		sql := "SELECT 1 -- " + strings.Repeat("y", 1<<20)
		p := e2e.RunRaw(t, base, sql)
		if p.Error == nil || p.Stats.State != "FAILED" || p.Error.ErrorName == "" {
			t.Errorf("%+v", p.Error)
		}
		alive(t)
	})
	t.Run("deeply nested SQL is a well-formed error in bounded time", func(t *testing.T) {
		start := time.Now()
		sql := "SELECT " + strings.Repeat("(", 3000) + "1" + strings.Repeat(")", 3000)
		resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, nil)
		for resp.StatusCode == http.StatusOK && p.NextURI != "" && time.Since(start) < 2*time.Minute {
			resp, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		}
		if resp.StatusCode != http.StatusOK || p.NextURI != "" {
			t.Fatalf("status %d, nextUri %q after %s", resp.StatusCode, p.NextURI, time.Since(start))
		}
		t.Logf("3,000 nested parentheses: %s, state %s, error %v", time.Since(start).Round(time.Millisecond), p.Stats.State,
			p.Error != nil)
		alive(t)
	})
	t.Run("replayed, foreign and truncated route tokens get 403 and reach no cluster", func(t *testing.T) {
		// Two live queries on default: A's valid token is replayed onto B's
		// path and onto the other cluster, re-signed with another secret,
		// and cut short.
		start := func(k int) (string, string, string) {
			resp, p := e2e.Do(t, "POST", base+"/v1/statement",
				fmt.Sprintf("SELECT count(*) FROM tpch.tiny.nation WHERE nationkey < %d -- token_%s", k, stamp), nil)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(p.NextURI, base+"/r/default.") {
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
		own, _ := protocol.NewSigner([]byte(secret))
		if base+own.RoutedPath("default", targetA) != uriA {
			t.Fatalf("the proxy's own secret does not reproduce its token: %s vs %s", own.RoutedPath("default", targetA), uriA)
		}
		other, _ := protocol.NewSigner([]byte(strings.Repeat("o", 40)))
		macA := tokA[strings.LastIndexByte(tokA, '.')+1:]
		forged := []struct{ what, path string }{
			{"A's token on B's path", "/r/" + tokA + targetB},
			{"A's token on A's path cut short", "/r/" + tokA + targetA[:strings.LastIndexByte(targetA, '/')]},
			{"A's token on the other cluster", "/r/other." + macA + targetA},
			{"a token from a proxy with another route_secret", other.RoutedPath("default", targetA)},
			{"one character cut from the MAC", "/r/" + tokA[:len(tokA)-1] + targetA},
			{"half the MAC", "/r/default." + macA[:len(macA)/2] + targetA},
			{"an empty MAC", "/r/default." + targetA},
			{"the cluster name alone", "/r/default" + targetA},
		}
		before := map[string]int{}
		for name, r := range relays {
			before[name] = r.count()
		}
		for _, f := range forged {
			for _, m := range []string{"GET", "HEAD", "DELETE"} {
				if r, _ := e2e.Do(t, m, base+f.path, "", nil); r.StatusCode != http.StatusForbidden {
					t.Errorf("%s: %s %s: %d, want 403", f.what, m, f.path, r.StatusCode)
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
		for name, r := range relays {
			if n := r.count() - before[name]; n != 0 {
				t.Errorf("%d requests reached cluster %s: %v", n, name, r.since(before[name]))
			}
		}
		// Both queries are intact (the forged DELETEs cancelled nothing)
		// and finish through their genuine URIs with the right rows.
		for uri, want := range map[string]string{uriA: "[[7]]", uriB: "[[9]]"} {
			var rows []string
			var p e2e.Page
			for p.NextURI = uri; p.NextURI != ""; {
				var resp *http.Response
				resp, p = e2e.Do(t, "GET", p.NextURI, "", nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("genuine poll: %d", resp.StatusCode)
				}
				if len(p.Data) > 0 {
					rows = append(rows, string(p.Data))
				}
			}
			if p.Stats.State != "FINISHED" || strings.Join(rows, "") != want {
				t.Errorf("genuine query: state %s, rows %v, want %s (error %+v)", p.Stats.State, rows, want, p.Error)
			}
		}
		if relays["default"].count() <= before["default"] { // the relay does count: the genuine polls went through it
			t.Errorf("the genuine polls never reached cluster default's relay")
		}
		if n := relays["other"].count(); n != 0 {
			t.Errorf("cluster other got %d requests: %v", n, relays["other"].since(0))
		}
		alive(t)
	})
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the proxy process is gone: %v", err)
	}
}

// countingRelay forwards every request to a real Trino and records the
// clients' ("METHOD path"), so a test can count what reached a cluster on
// a client's behalf. The proxy's own requests are forwarded but not
// recorded, as they run in the background at any time after the statement
// that caused them: the estimator's EXPLAINs (User-Agent
// prestroid-estimator) and the reads made as routing.monitor_user (the
// cost accounting's GET /v1/query/{id} settling a failed query).
type countingRelay struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newCountingRelay(t *testing.T, trino string) *countingRelay {
	t.Helper()
	u, err := url.Parse(trino)
	if err != nil {
		t.Fatal(err)
	}
	r := &countingRelay{}
	rp := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) }}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get("User-Agent") != "prestroid-estimator" && req.Header.Get("X-Trino-User") != config.DefaultMonitorUser {
			r.mu.Lock()
			r.seen = append(r.seen, req.Method+" "+req.URL.RequestURI())
			r.mu.Unlock()
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *countingRelay) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

// since returns the requests after the first n.
func (r *countingRelay) since(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen[n:]...)
}
