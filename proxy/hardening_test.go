package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/admission"
)

// Each case reproduces a finding of the hardening review (RELIABILITY.md).

// rawRequest writes req on a fresh connection to addr and returns the
// status line's code and body, failing if no answer comes within 3 s.
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(3 * time.Second))
	io.WriteString(conn, req)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHardening(t *testing.T) {
	up, posts := statefulStub(t)
	logs := &syncBuffer{}
	s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, MonitorInterval: -1,
		MaxRequestBodyBytes: 4096, Admission: &admission.Options{MaxQueries: 1, MaxQueuedQueryBytes: 2048, MaxQueueBytes: 3000},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}))

	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	addr := ln.Addr().String()
	base := "http://" + addr
	secret := "Basic " + "c2VjcmV0LXVzZXI6aHVudGVyMg==" // secret-user:hunter2
	token := s.signer.RoutedPath("default", "/v1/statement/executing/q1/slugsecret/1")

	t.Run("credentials and route tokens in a malformed request never reach the debug log", func(t *testing.T) {
		code, _ := rawRequest(t, addr, "GET "+token+" HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: "+secret+"\r\nBad Header\r\n\r\n")
		if code != http.StatusBadRequest {
			t.Errorf("status %d", code)
		}
		time.Sleep(50 * time.Millisecond)
		l := logs.String()
		if !strings.Contains(l, "error when serving connection") {
			t.Fatalf("fasthttp logged nothing: %q", l)
		}
		for _, leak := range []string{"c2VjcmV0LXVzZXI6aHVudGVyMg", "slugsecret", strings.Split(token, "/")[2]} {
			if strings.Contains(l, leak) {
				t.Errorf("the log holds %q: %s", leak, l)
			}
		}
	})
	t.Run("TRACE gets 405 and is not forwarded", func(t *testing.T) {
		before := up.hits.Load()
		code, _ := rawRequest(t, addr, "TRACE /v1/info HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: "+secret+"\r\n\r\n")
		if code != http.StatusMethodNotAllowed || up.hits.Load() != before {
			t.Errorf("status %d, %d upstream requests", code, up.hits.Load()-before)
		}
	})
	t.Run("a bare-LF request gets a prompt 400, not a held connection", func(t *testing.T) {
		start := time.Now()
		code, _ := rawRequest(t, addr, "GET /v1/info HTTP/1.1\nHost: "+addr+"\n\n")
		if code != http.StatusBadRequest || time.Since(start) > time.Second {
			t.Errorf("status %d after %s", code, time.Since(start))
		}
	})
	t.Run("blank lines in SQL, even split across reads, are not mistaken for a bare-LF header", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := "SELECT 1\n\n\n-- two blank lines\n\nFROM x"
		io.WriteString(conn, "POST /v1/statement HTTP/1.1\r\nHost: "+addr+"\r\nX-Trino-User: sql\r\nContent-Length: ")
		time.Sleep(20 * time.Millisecond)
		io.WriteString(conn, strconv.Itoa(len(body))+"\r\n\r")
		time.Sleep(20 * time.Millisecond)
		io.WriteString(conn, "\nSELECT 1\n")
		time.Sleep(20 * time.Millisecond)
		io.WriteString(conn, body[len("SELECT 1\n"):])
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"RUNNING"`) {
			t.Errorf("%d %s", resp.StatusCode, b)
		}
		if got := up.lastReq.Load(); got == nil || got.Header.Get("X-Trino-User") != "sql" {
			t.Errorf("the statement did not reach Trino")
		}
		_, _ = s.admit.Finish(context.Background(), lastID(t, string(b)))
	})
	t.Run("an oversized body gets 413", func(t *testing.T) {
		code, body := rawRequest(t, addr, "POST /v1/statement HTTP/1.1\r\nHost: "+addr+"\r\nContent-Length: 5000\r\n\r\n"+strings.Repeat("x", 5000))
		if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "max_request_body_bytes") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("statements inside a transaction count against the budget, and queued bytes are bounded", func(t *testing.T) {
		n0 := posts.Load()
		first, _ := call(t, "POST", base+"/v1/statement", "SELECT 1", "a")
		if first.Stats.State != "RUNNING" {
			t.Fatalf("first query: %+v", first)
		}
		req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader("INSERT INTO t VALUES 1"))
		req.Header.Set("X-Trino-User", "b")
		req.Header.Set("X-Trino-Transaction-Id", "default~tx-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), `"QUEUED"`) {
			t.Errorf("a statement in a made-up transaction skipped admission: %s", b)
		}
		big, _ := call(t, "POST", base+"/v1/statement", "SELECT '"+strings.Repeat("y", 2100)+"'", "c")
		if big.Error == nil || big.Error.ErrorName != "PRESTROID_QUEUE_FULL" || !strings.Contains(big.Error.Message, "bytes") {
			t.Errorf("a 2 KB query waited under max_queued_query_bytes 2048: %+v", big)
		}
		mid, _ := call(t, "POST", base+"/v1/statement", "SELECT '"+strings.Repeat("z", 1500)+"'", "d")
		mid2, _ := call(t, "POST", base+"/v1/statement", "SELECT '"+strings.Repeat("z", 1500)+"'", "e")
		if mid.Stats.State != "QUEUED" || mid2.Error == nil || mid2.Error.ErrorName != "PRESTROID_QUEUE_FULL" {
			t.Errorf("max_queue_bytes 3000: second 1.5 KB query %+v / %+v", mid.Stats, mid2.Error)
		}
		if posts.Load()-n0 != 1 {
			t.Errorf("%d statements reached Trino, want 1", posts.Load()-n0)
		}
	})
}

func lastID(t *testing.T, page string) string {
	i := strings.Index(page, `"id":"`)
	if i < 0 {
		t.Fatalf("no id in %s", page)
	}
	rest := page[i+6:]
	return rest[:strings.IndexByte(rest, '"')]
}
