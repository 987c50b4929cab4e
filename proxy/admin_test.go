package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
)

// headerEstimator records the caller headers its estimates were asked with.
type headerEstimator struct {
	mu   sync.Mutex
	seen []http.Header
}

func (e *headerEstimator) Estimate(_ context.Context, q Query) (estimate.Estimate, error) {
	e.mu.Lock()
	e.seen = append(e.seen, q.Header)
	e.mu.Unlock()
	return estimate.Estimate{Estimated: true, CPUSeconds: 1, Model: "m"}, nil
}

const testAdminToken = "an-admin-token-of-32-bytes-long!"

func adminProxy(t *testing.T, o Options) (client, admin string) {
	t.Helper()
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) { io.WriteString(w, `{"starting":false}`) })
	o.Clusters = []ClusterConfig{{Name: "default", URL: stub.URL}}
	o.MonitorInterval = -1
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(withDefaults(o))
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
	return "http://" + ln.Addr().String(), "http://" + aln.Addr().String()
}

func adminCall(t *testing.T, method, url string, h map[string]string) int {
	t.Helper()
	body := ""
	if method == "POST" {
		body = `{"sql":"SELECT 1","headers":{"X-Trino-User":"alice"}}`
	}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func TestAdminSurface(t *testing.T) {
	bearer := map[string]string{"Authorization": "Bearer " + testAdminToken}
	t.Run("with a token, admin endpoints refuse requests without it", func(t *testing.T) {
		est := &headerEstimator{}
		client, admin := adminProxy(t, Options{AdminToken: testAdminToken, Estimator: est})
		for _, base := range []string{client, admin} {
			for _, tc := range []struct {
				method, path string
				h            map[string]string
				want         int
			}{
				{"GET", "/metrics", nil, 401},
				{"GET", "/metrics", map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}, 401},
				{"GET", "/metrics", map[string]string{"Authorization": "Basic " + testAdminToken}, 401},
				{"GET", "/metrics", bearer, 200},
				{"GET", "/metrics", map[string]string{"X-Prestroid-Admin-Token": testAdminToken}, 200},
				{"POST", "/v1/estimate", nil, 401},
				{"POST", "/v1/estimate", bearer, 200},
				{"POST", "/v1/routing", nil, 401},
				{"POST", "/v1/routing", map[string]string{"X-Prestroid-Admin-Token": testAdminToken, "X-Trino-User": "alice"}, 200},
			} {
				if got := adminCall(t, tc.method, base+tc.path, tc.h); got != tc.want {
					t.Errorf("%s %s%s with %v: %d, want %d", tc.method, base, tc.path, tc.h, got, tc.want)
				}
			}
		}
		// The admin token never travels as the caller's credentials; a
		// caller's own Authorization beside X-Prestroid-Admin-Token does.
		adminCall(t, "POST", client+"/v1/estimate", map[string]string{"X-Prestroid-Admin-Token": testAdminToken, "Authorization": "Basic YWxpY2U6cHc="})
		est.mu.Lock()
		defer est.mu.Unlock()
		if len(est.seen) == 0 {
			t.Fatal("no estimate was asked for")
		}
		for i, h := range est.seen {
			for k, vs := range h {
				for _, v := range vs {
					if strings.Contains(v, testAdminToken) {
						t.Errorf("estimate %d carried the admin token in %s", i, k)
					}
				}
			}
		}
		if got := est.seen[len(est.seen)-1].Get("Authorization"); got != "Basic YWxpY2U6cHc=" {
			t.Errorf("the caller's own Authorization was %q, want it kept", got)
		}
	})
	t.Run("with a separate admin listener, the client listener does not serve them", func(t *testing.T) {
		client, admin := adminProxy(t, Options{AdminSeparate: true, Estimator: &headerEstimator{}})
		for _, path := range []string{"/metrics"} {
			if got := adminCall(t, "GET", client+path, nil); got != 404 {
				t.Errorf("client listener %s: %d, want 404", path, got)
			}
			if got := adminCall(t, "GET", admin+path, nil); got != 200 {
				t.Errorf("admin listener %s: %d, want 200", path, got)
			}
		}
		if got := adminCall(t, "POST", client+"/v1/estimate", nil); got != 404 {
			t.Errorf("client listener /v1/estimate: %d, want 404", got)
		}
		if got := adminCall(t, "POST", admin+"/v1/estimate", nil); got != 200 {
			t.Errorf("admin listener /v1/estimate: %d, want 200", got)
		}
		if got := adminCall(t, "GET", admin+"/v1/info", nil); got != 404 {
			t.Errorf("admin listener /v1/info: %d, want 404 (it serves only the admin endpoints)", got)
		}
	})
	t.Run("without a token or separate listener, nothing changes", func(t *testing.T) {
		client, _ := adminProxy(t, Options{Estimator: &headerEstimator{}})
		if got := adminCall(t, "GET", client+"/metrics", nil); got != 200 {
			t.Errorf("/metrics: %d", got)
		}
	})
}
