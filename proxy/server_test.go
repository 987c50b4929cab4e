package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// stubTrino is a minimal upstream for the proxy's own unit tests: it records
// what reaches it and answers like a coordinator. Protocol behaviour against
// the real Trino is tested in testing/e2e.
type stubTrino struct {
	*httptest.Server
	hits    atomic.Int64
	lastReq atomic.Pointer[http.Request]
	handle  func(w http.ResponseWriter, r *http.Request, base string)
}

func newStub(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, base string)) *stubTrino {
	s := &stubTrino{handle: handle}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.lastReq.Store(r.Clone(context.Background()))
		s.handle(w, r, "http://"+r.Host)
	}))
	t.Cleanup(s.Close)
	return s
}

func queuedPage(base string) string {
	return `{"id":"20260101_000000_00001_abcde","infoUri":"` + base + `/ui/query.html?20260101_000000_00001_abcde",` +
		`"nextUri":"` + base + `/v1/statement/queued/20260101_000000_00001_abcde/yslug/1",` +
		`"stats":{"state":"QUEUED","queued":true},"warnings":[]}`
}

func startTestProxy(t *testing.T, urls ...string) string {
	t.Helper()
	var cs []ClusterConfig
	for i, u := range urls {
		cs = append(cs, ClusterConfig{Name: []string{"default", "large"}[i], URL: u})
	}
	addr, _ := serveTest(t, Options{Clusters: cs, UpstreamTimeout: 2 * time.Second, MonitorInterval: -1})
	return addr
}

func post(t *testing.T, url string, h http.Header) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/statement", strings.NewReader("SELECT 1"))
	for k, vs := range h {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestHeadersPassThrough(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Add("X-Trino-Set-Session", "a=1")
		w.Header().Add("X-Trino-Set-Session", "b=2")
		w.Header().Add("X-Trino-Set-Session", "c=3")
		w.Header().Add("X-Trino-Added-Prepare", "p1=SELECT+1")
		w.Header().Add("X-Trino-Added-Prepare", "p2=SELECT+2")
		w.Header().Add("X-Trino-Clear-Session", "d")
		w.Header().Set("Connection", "X-Upstream-Hop")
		w.Header().Set("X-Upstream-Hop", "must not reach the client")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage(base))
	})
	p := startTestProxy(t, stub.URL)
	resp := post(t, p, http.Header{
		"X-Trino-User":        {"alice"},
		"X-Trino-Session":     {"x=1", "y=2"},
		"X-Trino-Client-Tags": {"a,b"},
		"Connection":          {"X-Fake-Hop"},
		"X-Fake-Hop":          {"secret hop"},
		"Te":                  {"trailers"},
		"X-Forwarded-For":     {"10.0.0.1"},
		"X-Forwarded-Prefix":  {"/x"},
		"Forwarded":           {"for=10.0.0.1"},
	})
	defer resp.Body.Close()
	io.ReadAll(resp.Body)
	got := stub.lastReq.Load()

	t.Run("every X-Trino request header arrives with all values in order", func(t *testing.T) {
		if v := got.Header.Values("X-Trino-Session"); strings.Join(v, "|") != "x=1|y=2" {
			t.Errorf("X-Trino-Session = %q", v)
		}
		if got.Header.Get("X-Trino-User") != "alice" || got.Header.Get("X-Trino-Client-Tags") != "a,b" {
			t.Errorf("headers = %v", got.Header)
		}
	})
	t.Run("hop-by-hop headers, and those named in Connection, are stripped", func(t *testing.T) {
		for _, h := range []string{"X-Fake-Hop", "Te"} {
			if got.Header.Get(h) != "" {
				t.Errorf("%s reached upstream", h)
			}
		}
		if resp.Header.Get("X-Upstream-Hop") != "" {
			t.Errorf("upstream hop header reached the client")
		}
	})
	t.Run("X-Forwarded headers are not sent by default (Trino answers 406)", func(t *testing.T) {
		for k := range got.Header {
			if strings.HasPrefix(strings.ToLower(k), "x-forwarded") || strings.EqualFold(k, "Forwarded") {
				t.Errorf("%s reached upstream", k)
			}
		}
	})
	t.Run("multi-valued response headers come back complete and in order", func(t *testing.T) {
		if v := resp.Header.Values("X-Trino-Set-Session"); strings.Join(v, "|") != "a=1|b=2|c=3" {
			t.Errorf("X-Trino-Set-Session = %q", v)
		}
		if v := resp.Header.Values("X-Trino-Added-Prepare"); strings.Join(v, "|") != "p1=SELECT+1|p2=SELECT+2" {
			t.Errorf("X-Trino-Added-Prepare = %q", v)
		}
		if resp.Header.Get("X-Trino-Clear-Session") != "d" {
			t.Errorf("X-Trino-Clear-Session missing")
		}
	})
}

func TestForgedTokensNeverReachUpstream(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage(base))
	})
	p := startTestProxy(t, stub.URL)
	resp := post(t, p, nil)
	var page struct{ NextURI string }
	json.NewDecoder(resp.Body).Decode(&page)
	resp.Body.Close()
	if !strings.HasPrefix(page.NextURI, p+"/r/default.") {
		t.Fatalf("nextUri not routed through the proxy: %s", page.NextURI)
	}
	before := stub.hits.Load()
	forged := []string{
		strings.Replace(page.NextURI, "/yslug/1", "/yslug/2", 1),          // tampered path
		strings.Replace(page.NextURI, "/r/default.", "/r/large.", 1),      // other cluster
		p + "/r/default.AAAAAAAAAAAAAAAAAAAAAA/v1/statement/queued/x/y/1", // forged MAC
		p + "/r/nonsense/v1/statement/queued/x/y/1",                       // malformed
		p + "/r/default.AAAAAAAAAAAAAAAAAAAAAA/ui/query.html",             // forged UI token
	}
	for _, u := range forged {
		for _, m := range []string{"GET", "DELETE", "HEAD"} {
			req, _ := http.NewRequest(m, u, nil)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusForbidden {
				t.Errorf("%s %s: status %d, want 403", m, u, r.StatusCode)
			}
		}
	}
	if n := stub.hits.Load() - before; n != 0 {
		t.Errorf("forged tokens caused %d upstream requests", n)
	}
	// The genuine URI still works.
	r, err := http.Get(page.NextURI)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("genuine nextUri: %v %v", r, err)
	}
	r.Body.Close()
}

func TestUpstreamFailures(t *testing.T) {
	t.Run("a cluster that never got the POST gives 503", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := "http://" + ln.Addr().String()
		ln.Close()
		resp := post(t, startTestProxy(t, dead), nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("status %d, want 503", resp.StatusCode)
		}
	})
	t.Run("a cluster that failed after getting the POST gives a Trino error in a 200", func(t *testing.T) {
		stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			io.ReadAll(r.Body)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
		})
		resp := post(t, startTestProxy(t, stub.URL), nil)
		defer resp.Body.Close()
		var page struct {
			ID      string
			NextURI string
			Stats   struct{ State string }
			Error   struct {
				Message   string
				ErrorName string
				ErrorType string
				ErrorCode int
			}
		}
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || page.Stats.State != "FAILED" || page.Error.ErrorName != "PRESTROID_UPSTREAM_ERROR" ||
			page.Error.ErrorType != "EXTERNAL" || page.NextURI != "" || page.ID == "" || page.Error.ErrorCode == 0 {
			t.Errorf("status %d, page %+v", resp.StatusCode, page)
		}
		if stub.hits.Load() != 1 {
			t.Errorf("the POST was sent %d times", stub.hits.Load())
		}
	})
}

func TestGzipUpstreamIsDecodedAndRewritten(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		if r.Header.Get("Accept-Encoding") != "identity" {
			t.Errorf("Accept-Encoding upstream = %q, want identity", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Encoding", "gzip") // sent anyway
		zw := gzip.NewWriter(w)
		io.WriteString(zw, queuedPage(base))
		zw.Close()
	})
	p := startTestProxy(t, stub.URL)
	req, _ := http.NewRequest("POST", p+"/v1/statement", strings.NewReader("SELECT 1"))
	req.Header.Set("Accept-Encoding", "identity")
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("Content-Encoding %q passed on for a decoded body", resp.Header.Get("Content-Encoding"))
	}
	if !bytes.Contains(body, []byte(p+"/r/default.")) || bytes.Contains(body, []byte(stub.URL)) {
		t.Errorf("body not decoded and rewritten: %s", body)
	}
}

func TestQueryResourceFindsTheCluster(t *testing.T) {
	mk := func(known string) *stubTrino {
		return newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			if r.URL.Path == "/v1/query/"+known {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			http.NotFound(w, r)
		})
	}
	a, b := mk("q_on_a"), mk("q_on_b")
	p := startTestProxy(t, a.URL, b.URL)
	for _, tc := range []struct {
		id     string
		status int
	}{{"q_on_b", 204}, {"q_on_a", 204}, {"q_nowhere", 404}} {
		req, _ := http.NewRequest("DELETE", p+"/v1/query/"+tc.id, nil)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != tc.status {
			t.Errorf("DELETE %s: %d, want %d", tc.id, r.StatusCode, tc.status)
		}
	}
	req, _ := http.NewRequest("DELETE", p+"/v1/query/q;rm%20-rf", nil)
	r, _ := http.DefaultClient.Do(req)
	r.Body.Close()
	if r.StatusCode != http.StatusBadRequest {
		t.Errorf("path-injecting query id: %d, want 400", r.StatusCode)
	}
}

// serveTest runs New(withDefaults(o)) on a loopback port of its own until
// the test ends (a quiet logger unless o has one) and returns its base URL.
func serveTest(t *testing.T, o Options) (string, *Server) {
	t.Helper()
	return serveTestOn(t, o, nil)
}

// serveTestOn is serveTest over wrap(the listener) when wrap is set (TLS),
// its URL then with scheme https.
func serveTestOn(t *testing.T, o Options, wrap func(net.Listener) net.Listener) (string, *Server) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := New(withDefaults(o))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme, served := "http://", ln
	if wrap != nil {
		scheme, served = "https://", wrap(ln)
	}
	go s.Serve(served)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return scheme + ln.Addr().String(), s
}
