package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/valyala/fasthttp"
)

// authStub is a coordinator with one password (alice:secret): like Trino,
// every protocol resource answers 401 with a Basic challenge to any other
// credential. Its queries run until their executing URI is polled.
type authStub struct {
	*stubTrino
	posts, probes atomic.Int64
}

func newAuthStub(t *testing.T) *authStub {
	a := &authStub{}
	var n atomic.Int64
	a.stubTrino = newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		if u, p, ok := r.BasicAuth(); (!ok || u != "alice" || p != "secret") && r.Header.Get("Authorization") != "Bearer good" {
			w.Header().Add("WWW-Authenticate", `Basic realm="Trino"`)
			w.Header().Add("WWW-Authenticate", `Bearer x_redirect_server="`+base+`/oauth2/token/initiate/abc", x_token_server="`+base+`/oauth2/token/abc"`)
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, "Unauthorized")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/v1/statement":
			a.posts.Add(1)
			id := fmt.Sprintf("20260101_000000_%05d_auth", n.Add(1))
			fmt.Fprintf(w, `{"id":"%s","nextUri":"%s/v1/statement/executing/%s/yslug/1","stats":{"state":"RUNNING"}}`, id, base, id)
		case strings.HasPrefix(r.URL.Path, "/v1/statement/executing/"):
			fmt.Fprintf(w, `{"id":"%s","stats":{"state":"FINISHED"}}`, strings.Split(r.URL.Path, "/")[4])
		case strings.HasPrefix(r.URL.Path, "/v1/query/"):
			a.probes.Add(1)
			w.WriteHeader(http.StatusGone)
		case strings.HasPrefix(r.URL.Path, "/oauth2/"):
			io.WriteString(w, `{"token":"t"}`)
		default:
			http.NotFound(w, r)
		}
	})
	return a
}

func identityProxy(t *testing.T, o Options) (string, *Server) {
	t.Helper()
	o.MonitorInterval, o.Logger = -1, quietLogger()
	addr, s := serveTest(t, o)
	return addr, s
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

func submit(t *testing.T, base string, h map[string]string, sql string) (pg, *http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(sql))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var p pg
	if resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
	}
	return p, resp, string(b)
}

// authEstimator refuses like the real EXPLAIN client when the stub would:
// an *AuthError carrying the cluster's answer.
type authEstimator struct{ calls atomic.Int64 }

func (e *authEstimator) Estimate(ctx context.Context, q Query) (estimate.Estimate, error) {
	e.calls.Add(1)
	if q.Header.Get("Authorization") != basic("alice", "secret") {
		h := http.Header{}
		h.Add("WWW-Authenticate", `Basic realm="Trino"`)
		return estimate.Estimate{}, fmt.Errorf("estimator: EXPLAIN: %w", &frontdoor.AuthError{StatusCode: 401, Header: h, Body: []byte("Unauthorized")})
	}
	if strings.HasPrefix(q.SQL, "SHOW") {
		return estimate.Estimate{Reason: "not explained"}, nil
	}
	return estimate.Estimate{Estimated: true, CPUSeconds: 1, Model: "m"}, nil
}

// noExplainEstimator answers every statement from a stage that runs no
// EXPLAIN, whatever the credentials.
type noExplainEstimator struct{ src estimate.Source }

func (e noExplainEstimator) Estimate(context.Context, Query) (estimate.Estimate, error) {
	return estimate.Estimate{Estimated: true, CPUSeconds: 1, Source: e.src}, nil
}

func TestVerifiedIdentity(t *testing.T) {
	t.Run("a wrong password gets Trino's own 401: no statement upstream, no queue slot", func(t *testing.T) {
		up := newAuthStub(t)
		base, s := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified,
			Admission: &admission.Options{MaxQueries: 1}})
		_, resp, body := submit(t, base, map[string]string{"Authorization": basic("alice", "wrong"), "X-Trino-User": "alice"}, "SELECT 1")
		if resp.StatusCode != 401 || body != "Unauthorized" {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
		if v := resp.Header.Values("WWW-Authenticate"); len(v) != 2 || v[0] != `Basic realm="Trino"` {
			t.Errorf("WWW-Authenticate = %q", v)
		}
		if up.posts.Load() != 0 {
			t.Errorf("%d statements reached Trino", up.posts.Load())
		}
		if q, in, _ := s.admit.Lengths(context.Background()); q != 0 || in != 0 {
			t.Errorf("admission holds %d queued, %d in flight", q, in)
		}
	})
	t.Run("the OAuth2 challenge's URIs point back through the proxy, routed to the cluster", func(t *testing.T) {
		up := newAuthStub(t)
		base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified})
		_, resp, _ := submit(t, base, map[string]string{"X-Trino-User": "alice"}, "SELECT 1")
		v := resp.Header.Values("WWW-Authenticate")
		if len(v) != 2 || strings.Contains(v[1], up.URL) || !strings.Contains(v[1], `x_token_server="`+base+"/r/default.") {
			t.Fatalf("WWW-Authenticate = %q", v)
		}
		tokenURI := strings.Split(strings.Split(v[1], `x_token_server="`)[1], `"`)[0]
		req, _ := http.NewRequest("GET", tokenURI, nil)
		req.Header.Set("Authorization", basic("alice", "secret"))
		r2, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r2.Body)
		r2.Body.Close()
		if r2.StatusCode != 200 || string(b) != `{"token":"t"}` {
			t.Errorf("token server through the proxy: %d %s", r2.StatusCode, b)
		}
	})
	t.Run("budgets key on the Basic user, not on a rotating X-Trino-User", func(t *testing.T) {
		up := newAuthStub(t)
		base, s := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified,
			Admission: &admission.Options{UserMaxQueries: 1}})
		var states []string
		for _, u := range []string{"u1", "u2", "u3"} {
			p, resp, body := submit(t, base, map[string]string{"Authorization": basic("alice", "secret"), "X-Trino-User": u}, "SELECT 1")
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			states = append(states, p.Stats.State)
		}
		if strings.Join(states, ",") != "RUNNING,QUEUED,QUEUED" {
			t.Errorf("states %v, want one running and two queued as alice", states)
		}
		if q, in, _ := s.admit.Lengths(context.Background()); q != 2 || in != 1 {
			t.Errorf("admission: %d queued, %d in flight", q, in)
		}
		if n := up.probes.Load(); n != 1 {
			t.Errorf("%d probes for one credential, want 1 (then remembered)", n)
		}
	})
	t.Run("header mode keys on X-Trino-User (the unauthenticated default)", func(t *testing.T) {
		up := newAuthStub(t)
		base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}},
			Admission: &admission.Options{UserMaxQueries: 1}})
		for _, u := range []string{"u1", "u2"} {
			p, _, _ := submit(t, base, map[string]string{"Authorization": basic("alice", "secret"), "X-Trino-User": u}, "SELECT 1")
			if p.Stats.State != "RUNNING" {
				t.Errorf("%s: %s", u, p.Stats.State)
			}
		}
		if up.probes.Load() != 0 {
			t.Errorf("header mode probed")
		}
	})
	t.Run("an EXPLAIN the cluster accepted verifies; one it refused is relayed in either mode", func(t *testing.T) {
		for _, mode := range []string{frontdoor.IdentityVerified, frontdoor.IdentityHeader} {
			up := newAuthStub(t)
			est := &authEstimator{}
			base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: mode, Estimator: est})
			p, resp, body := submit(t, base, map[string]string{"Authorization": basic("alice", "secret"), "X-Trino-User": "bob"}, "SELECT 1")
			if resp.StatusCode != 200 || p.Stats.State != "RUNNING" {
				t.Fatalf("%s: %d %s", mode, resp.StatusCode, body)
			}
			if up.probes.Load() != 0 {
				t.Errorf("%s: probed although the EXPLAIN ran with the credentials", mode)
			}
			_, resp, body = submit(t, base, map[string]string{"Authorization": basic("mallory", "x"), "X-Trino-User": "alice"}, "SELECT 1")
			if resp.StatusCode != 401 || resp.Header.Get("WWW-Authenticate") != `Basic realm="Trino"` || body != "Unauthorized" {
				t.Errorf("%s: %d %q %s", mode, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
			}
			if up.posts.Load() != 1 {
				t.Errorf("%s: %d statements upstream, want 1", mode, up.posts.Load())
			}
		}
	})
	t.Run("an estimate made without an EXPLAIN (cheap, history, text) does not verify: a probe does", func(t *testing.T) {
		for _, src := range []estimate.Source{estimate.SourceCheap, estimate.SourceHistory, estimate.SourceText} {
			up := newAuthStub(t)
			est := noExplainEstimator{src}
			base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified, Estimator: est})
			p, resp, body := submit(t, base, map[string]string{"Authorization": basic("alice", "secret"), "X-Trino-User": "bob"}, "SELECT 1")
			if resp.StatusCode != 200 || p.Stats.State != "RUNNING" {
				t.Fatalf("%s: %d %s", src, resp.StatusCode, body)
			}
			if up.probes.Load() != 1 {
				t.Errorf("%s: %d probes; want 1 (no EXPLAIN ran with the credentials)", src, up.probes.Load())
			}
			_, resp, body = submit(t, base, map[string]string{"Authorization": basic("mallory", "x"), "X-Trino-User": "alice"}, "SELECT 1")
			if resp.StatusCode != 401 || body != "Unauthorized" || up.posts.Load() != 1 {
				t.Errorf("%s: %d %s, %d statements upstream; want the probe's 401 and only the first statement", src, resp.StatusCode, body, up.posts.Load())
			}
		}
	})
	t.Run("a statement the cascade does not explain is verified by a probe, then remembered", func(t *testing.T) {
		up := newAuthStub(t)
		base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified,
			Estimator: &authEstimator{}, CredentialTTL: 200 * time.Millisecond})
		h := map[string]string{"Authorization": basic("alice", "secret")}
		for i := 0; i < 3; i++ {
			if _, resp, body := submit(t, base, h, "SHOW CATALOGS"); resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
		}
		if n := up.probes.Load(); n != 1 {
			t.Errorf("%d probes, want 1", n)
		}
		time.Sleep(250 * time.Millisecond)
		submit(t, base, h, "SHOW CATALOGS")
		if n := up.probes.Load(); n != 2 {
			t.Errorf("%d probes after the TTL, want 2", n)
		}
	})
	t.Run("a cluster that does not answer the probe: 503, nothing sent", func(t *testing.T) {
		ln, _ := net.Listen("tcp", "127.0.0.1:0")
		dead := "http://" + ln.Addr().String()
		ln.Close()
		base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: dead}}, Identity: frontdoor.IdentityVerified})
		_, resp, _ := submit(t, base, map[string]string{"Authorization": basic("alice", "secret")}, "SELECT 1")
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Errorf("status %d", resp.StatusCode)
		}
	})
	t.Run("a locally verified token needs no cluster", func(t *testing.T) {
		up := newAuthStub(t)
		base, _ := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified,
			TokenVerifier: tokenFunc(func(tok string) (string, error) {
				if tok == "good" {
					return "carol", nil
				}
				return "", fmt.Errorf("bad token")
			}), Admission: &admission.Options{UserMaxQueries: 1}})
		var states []string
		for _, u := range []string{"x", "y"} {
			p, resp, body := submit(t, base, map[string]string{"Authorization": "Bearer good", "X-Trino-User": u}, "SELECT 1")
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, body)
			}
			states = append(states, p.Stats.State)
		}
		if strings.Join(states, ",") != "RUNNING,QUEUED" {
			t.Errorf("states %v, want both counted as carol", states)
		}
		if up.probes.Load() != 0 {
			t.Errorf("probed a locally verified token")
		}
		// A token the verifier refuses is offered to the cluster, which
		// refuses it too: its 401, nothing forwarded.
		posts := up.posts.Load()
		if _, resp, _ := submit(t, base, map[string]string{"Authorization": "Bearer other"}, "SELECT 1"); resp.StatusCode != 401 || up.posts.Load() != posts {
			t.Errorf("a token both refuse: %d, %d statements forwarded", resp.StatusCode, up.posts.Load()-posts)
		}
	})
}

func newRequestHeader(h map[string]string) *fasthttp.RequestHeader {
	r := &fasthttp.RequestHeader{}
	for k, v := range h {
		if v != "" {
			r.Set(k, v)
		}
	}
	return r
}

type tokenFunc func(string) (string, error)

func (f tokenFunc) VerifyToken(tok string) (string, error) { return f(tok) }
