package proxy

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/health"
	"github.com/prestroid/prestroid/proxy/routing"
)

// healthProxy serves a proxy in front of stub with a separate admin
// listener behind a token and the monitor on (info only, every 20ms).
func healthProxy(t *testing.T, urls ...string) (s *Server, client, admin string) {
	t.Helper()
	var cs []ClusterConfig
	for i, u := range urls {
		cs = append(cs, ClusterConfig{Name: []string{"default", "large"}[i], URL: u})
	}
	s, err := New(withDefaults(Options{Clusters: cs, MonitorInterval: 20 * time.Millisecond, MonitorType: routing.MonitorInfo,
		AdminToken: testAdminToken, AdminSeparate: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))

	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	aln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeAdmin(aln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return s, "http://" + ln.Addr().String(), "http://" + aln.Addr().String()
}

// probe GETs (or HEADs) url with an optional Host and returns status and body.
func probeURL(t *testing.T, method, url, host string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Header.Get("Cache-Control") != "no-store" {
		t.Errorf("%s %s: Cache-Control %q, want no-store", method, url, resp.Header.Get("Cache-Control"))
	}
	return resp.StatusCode, string(b)
}

// waitReady polls url's /readyz until it answers want (or fails the test
// after 5s) and returns the decoded answer.
func waitReady(t *testing.T, base string, want int) health.Readiness {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := probeURL(t, "GET", base+"/readyz", "")
		var r health.Readiness
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			t.Fatalf("/readyz body %q: %v", body, err)
		}
		if code == want {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz stayed %d (want %d): %s", code, want, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func check(r health.Readiness, name string) (health.Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return health.Check{}, false
}

func TestHealthEndpoints(t *testing.T) {
	t.Parallel()
	var up atomic.Bool
	up.Store(true)
	var forwarded atomic.Int32 // anything but the monitor's /v1/info
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, _ string) {
		if r.URL.Path != "/v1/info" {
			forwarded.Add(1)
		}
		if !up.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, `{"starting":false}`)
	})
	_, client, admin := healthProxy(t, stub.URL)

	for _, base := range []string{client, admin} {
		// No admin token, and a Host the client listener refuses elsewhere.
		if code, body := probeURL(t, "GET", base+"/healthz", "evil.example"); code != 200 || body != "ok\n" {
			t.Errorf("%s/healthz = %d %q, want 200 ok", base, code, body)
		}
		if code, body := probeURL(t, "HEAD", base+"/healthz", ""); code != 200 || body != "" {
			t.Errorf("HEAD %s/healthz = %d %q", base, code, body)
		}
		r := waitReady(t, base, 200)
		if r.Status != "ready" {
			t.Errorf("%s/readyz status %q", base, r.Status)
		}
		if c, ok := check(r, "clusters"); !ok || !c.OK || !strings.Contains(c.Detail, "1 of 1 healthy: default") {
			t.Errorf("%s/readyz clusters check %+v", base, c)
		}
		if c, ok := check(r, "listener"); !ok || !c.OK {
			t.Errorf("%s/readyz listener check %+v", base, c)
		}
		if code, _ := probeURL(t, "GET", base+"/readyz", "evil.example"); code != 200 {
			t.Errorf("%s/readyz with a foreign Host = %d", base, code)
		}
	}
	// The admin endpoints still need the token, and the client listener
	// still refuses them: only the health paths are open.
	if code := adminCall(t, "GET", admin+"/metrics", nil); code != 401 {
		t.Errorf("admin /metrics without token = %d, want 401", code)
	}
	if code := adminCall(t, "GET", client+"/metrics", nil); code != 404 {
		t.Errorf("client /metrics = %d, want 404 (admin listener only)", code)
	}

	// Every cluster down: not ready on both listeners, still alive.
	up.Store(false)
	for _, base := range []string{client, admin} {
		r := waitReady(t, base, 503)
		if c, ok := check(r, "clusters"); !ok || c.OK || c.Detail != "no healthy cluster" {
			t.Errorf("%s/readyz clusters check %+v with the cluster down", base, c)
		}
		if code, _ := probeURL(t, "GET", base+"/healthz", ""); code != 200 {
			t.Errorf("%s/healthz = %d with the cluster down, want 200", base, code)
		}
	}
	// Back up: ready again.
	up.Store(true)
	waitReady(t, client, 200)
	if n := forwarded.Load(); n != 0 {
		t.Errorf("%d requests besides the monitor's reached the cluster", n)
	}
}

// A cluster that accepts connections and never answers keeps a new replica
// unready ("not checked yet") while another cluster answers: ready with one.
func TestReadinessClusters(t *testing.T) {
	t.Parallel()
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		hang.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	s, client, _ := healthProxy(t, "http://"+hang.Addr().String())
	r := waitReady(t, client, 503)
	if c, _ := check(r, "clusters"); c.OK || !strings.HasPrefix(c.Detail, "not checked yet: default") {
		t.Errorf("clusters check %+v before the first answer", c)
	}
	if r := s.readiness(); r.Status != "not ready" {
		t.Errorf("readiness() = %+v", r)
	}

	ok := newStub(t, func(w http.ResponseWriter, _ *http.Request, _ string) { io.WriteString(w, `{"starting":false}`) })
	_, client2, _ := healthProxy(t, "http://"+hang.Addr().String(), ok.URL)
	r = waitReady(t, client2, 200)
	if c, _ := check(r, "clusters"); !c.OK || c.Detail != "1 of 2 healthy: large" {
		t.Errorf("clusters check %+v with one of two answering", c)
	}
}

// Before Serve the listener check fails; after Shutdown the shutdown check.
func TestReadinessListenerAndShutdown(t *testing.T) {
	t.Parallel()
	stub := newStub(t, func(w http.ResponseWriter, _ *http.Request, _ string) { io.WriteString(w, `{"starting":false}`) })
	s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, MonitorInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))

	if err != nil {
		t.Fatal(err)
	}
	r := s.readiness()
	if c, _ := check(r, "listener"); r.Status == "ready" || c.OK {
		t.Errorf("before Serve: %+v", r)
	}
	if c, _ := check(r, "clusters"); !c.OK { // monitor off: never-checked clusters count as healthy
		t.Errorf("monitor off: clusters check %+v", c)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	base := "http://" + ln.Addr().String()
	waitReady(t, base, 200)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.Shutdown(ctx)
	r = s.readiness()
	if c, ok := check(r, "shutdown"); r.Status == "ready" || !ok || c.OK {
		t.Errorf("after Shutdown: %+v", r)
	}
}
