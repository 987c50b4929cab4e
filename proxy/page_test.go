package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// pageProxy runs a proxy in front of url with o's page settings.
func pageProxy(t *testing.T, url string, o Options) (string, *Server) {
	t.Helper()
	o.Clusters = []ClusterConfig{{Name: "default", URL: url}}
	o.MonitorInterval = -1
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.UpstreamTimeout == 0 {
		o.UpstreamTimeout = 2 * time.Second
	}
	addr, s := serveTest(t, o)
	return addr, s
}

// dataPage is an executing page with n rows, pointing at base.
func dataPage(base string, n int, next bool) string {
	var b strings.Builder
	b.WriteString(`{"id":"20260101_000000_00001_abcde","infoUri":"` + base + `/ui/query.html?20260101_000000_00001_abcde",`)
	if next {
		b.WriteString(`"nextUri":"` + base + `/v1/statement/executing/20260101_000000_00001_abcde/yslug/2",`)
	}
	b.WriteString(`"columns":[{"name":"k","type":"bigint"},{"name":"v","type":"varchar"}],"data":[`)
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `[%d,"row %d of a page that compresses well"]`, i, i)
	}
	b.WriteString(`],"stats":{"state":"RUNNING"},"warnings":[]}`)
	return b.String()
}

// get polls uri with the given Accept-Encoding, without Go's transparent
// decoding, and returns the response and its raw body.
func get(t *testing.T, uri, acceptEncoding string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", uri, nil)
	req.Header.Set("X-Trino-User", "alice")
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	resp, err := (&http.Transport{DisableCompression: true}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", uri, err)
	}
	return resp, body
}

// nextURI posts a query and returns the routed nextUri the proxy hands out.
func nextURI(t *testing.T, p string) string {
	t.Helper()
	resp := post(t, p, http.Header{"X-Trino-User": {"alice"}})
	defer resp.Body.Close()
	var qr struct{ NextURI string }
	if err := json.NewDecoder(resp.Body).Decode(&qr); err != nil || qr.NextURI == "" {
		t.Fatalf("no nextUri from the POST (%v)", err)
	}
	return qr.NextURI
}

func TestPagesAreGzippedForClientsThatAcceptIt(t *testing.T) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/statement" {
			io.WriteString(w, queuedPage(base))
			return
		}
		io.WriteString(w, dataPage(base, 5000, true))
	})
	for _, tc := range []struct {
		name, accept, buffer string
		level                int
		gzipped              bool
	}{
		{"gzip accepted: gzip page", "gzip", "", 0, true},
		{"gzip among others with q: gzip page", "br;q=1.0, gzip;q=0.8", "", 0, true},
		{"no Accept-Encoding: plain page", "", "", 0, false},
		{"gzip;q=0: plain page", "gzip;q=0", "", 0, false},
		{"gzip off by configuration: plain page", "gzip", "", -1, false},
		{"a page over the buffer streams gzipped", "gzip", "small", 0, true},
		{"a page over the buffer streams plain", "", "small", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{GzipLevel: tc.level}
			if tc.buffer == "small" {
				o.PageBufferBytes = 4096
			}
			p, _ := pageProxy(t, stub.URL, o)
			resp, body := get(t, nextURI(t, p), tc.accept)
			if got := resp.Header.Get("Content-Encoding") == "gzip"; got != tc.gzipped {
				t.Fatalf("Content-Encoding %q, want gzip %v", resp.Header.Get("Content-Encoding"), tc.gzipped)
			}
			raw := body
			if tc.gzipped {
				zr, err := gzip.NewReader(bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				if raw, err = io.ReadAll(zr); err != nil {
					t.Fatalf("gzip stream: %v", err)
				}
				if len(body)*4 > len(raw) {
					t.Errorf("gzip page %d bytes for %d: less than 4x smaller", len(body), len(raw))
				}
			}
			var qr struct {
				NextURI string
				Data    [][]any
			}
			if err := json.Unmarshal(raw, &qr); err != nil {
				t.Fatalf("page is not JSON: %v", err)
			}
			if len(qr.Data) != 5000 || !strings.HasPrefix(qr.NextURI, p+"/r/") {
				t.Errorf("%d rows, nextUri %q", len(qr.Data), qr.NextURI)
			}
		})
	}
}

// TestFailedPollIsATrinoError: once a query runs, a poll whose cluster is
// gone, or that sends half a page and stalls, gets a well-formed failed
// QueryResults for that query at once (HTTP 200), not a 503 that clients
// retry for minutes nor truncated JSON.
func TestFailedPollIsATrinoError(t *testing.T) {
	var mode sync.Map
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/statement" {
			io.WriteString(w, queuedPage(base))
			return
		}
		if _, stall := mode.Load("stall"); stall {
			page := dataPage(base, 2000, true)
			w.Header().Set("Content-Length", fmt.Sprint(len(page)))
			io.WriteString(w, page[:len(page)/2])
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		io.WriteString(w, dataPage(base, 10, true))
	})
	check := func(t *testing.T, resp *http.Response, body []byte, took time.Duration, within time.Duration) {
		t.Helper()
		var qr struct {
			ID      string
			NextURI string
			Stats   struct{ State string }
			Error   *struct{ ErrorName, ErrorType, Message string }
		}
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d %s, want 200 with a Trino error", resp.StatusCode, body)
		}
		if err := json.Unmarshal(body, &qr); err != nil {
			t.Fatalf("not JSON (%v): %.200s", err, body)
		}
		if qr.Error == nil || qr.Error.ErrorName != "PRESTROID_UPSTREAM_ERROR" || qr.Stats.State != "FAILED" || qr.NextURI != "" {
			t.Fatalf("want a terminal failed page, got %s", body)
		}
		if qr.ID != "20260101_000000_00001_abcde" {
			t.Errorf("error names query %q, want the polled one", qr.ID)
		}
		if took > within {
			t.Errorf("answered after %v, want within %v", took, within)
		}
	}
	t.Run("a half page that stalls: Trino error after upstream_timeout", func(t *testing.T) {
		p, _ := pageProxy(t, stub.URL, Options{UpstreamTimeout: 500 * time.Millisecond})
		next := nextURI(t, p)
		mode.Store("stall", true)
		defer mode.Delete("stall")
		start := time.Now()
		resp, body := get(t, next, "gzip")
		check(t, resp, body, time.Since(start), 3*time.Second)
	})
	t.Run("a dead cluster: Trino error at once", func(t *testing.T) {
		dead := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, queuedPage(base))
		})
		p, s := pageProxy(t, dead.URL, Options{})
		next := nextURI(t, p)
		dead.Close()
		start := time.Now()
		resp, body := get(t, next, "")
		check(t, resp, body, time.Since(start), time.Second)
		if s.clusters[0].Healthy() {
			t.Error("the dead cluster is still counted healthy")
		}
	})
}

// TestBusyClusterIsNotDown: more requests in flight than upstream
// connections wait for one; the slow cluster is not marked down. (The
// issue's case: 1,100 polls in flight at the default limit of 1,024.)
func TestBusyClusterIsNotDown(t *testing.T) {
	for _, tc := range []struct {
		conns, inflight int
	}{{2, 8}, {0, 1100}} {
		limit := fmt.Sprint(tc.conns)
		if tc.conns == 0 {
			limit = "the default 1024"
		}
		t.Run(fmt.Sprintf("%d in flight over %s connections", tc.inflight, limit), func(t *testing.T) {
			busyCluster(t, tc.conns, tc.inflight)
		})
	}
}

func busyCluster(t *testing.T, conns, inflight int) {
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/statement" {
			io.WriteString(w, queuedPage(base))
			return
		}
		time.Sleep(time.Second) // a long poll
		io.WriteString(w, dataPage(base, 1, true))
	})
	p, s := pageProxy(t, stub.URL, Options{UpstreamMaxConns: conns, UpstreamTimeout: 10 * time.Second})
	next := nextURI(t, p)
	var wg sync.WaitGroup
	codes := make(chan int, inflight)
	for i := 0; i < inflight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := get(t, next, "")
			if bytes.Contains(body, []byte(`"error"`)) {
				codes <- 0
				return
			}
			codes <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		if c != 200 {
			t.Errorf("a poll got %d (0: a Trino error)", c)
		}
	}
	if !s.clusters[0].Healthy() {
		t.Error("a busy cluster was marked down")
	}
}

// TestCancelToADeadClusterIsNotRetried: DELETE of a query whose cluster
// refuses connections answers 204 at once (a 503 makes clients retry the
// cancel for as long as the cluster is down).
func TestCancelToADeadClusterIsNotRetried(t *testing.T) {
	dead := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, queuedPage(base))
	})
	p, _ := pageProxy(t, dead.URL, Options{})
	next := nextURI(t, p)
	dead.Close()
	for _, uri := range []string{next, p + "/v1/query/20260101_000000_00001_abcde"} {
		req, _ := http.NewRequest("DELETE", uri, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Errorf("DELETE %s: %d, want 204", uri, resp.StatusCode)
		}
	}
}
