package proxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/routing"
)

// engineStub is a stub coordinator of one engine: /v1/info tells its
// version, statements are answered in its dialect (a PrestoDB page carries
// its slug as a query parameter), and what reached it is recorded.
type engineStub struct {
	*stubTrino
	lastPost   atomic.Pointer[http.Request]
	lastTarget atomic.Pointer[string] // the last request's path and query
	lastMethod atomic.Pointer[string]
}

func newEngineStub(t *testing.T, e dialect.Engine) *engineStub {
	c := &engineStub{}
	version := map[dialect.Engine]string{dialect.Trino: "476", dialect.Presto: "0.296-8661b73"}[e]
	c.stubTrino = newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		target, method := r.URL.RequestURI(), r.Method
		c.lastTarget.Store(&target)
		c.lastMethod.Store(&method)
		switch {
		case r.URL.Path == "/v1/info":
			io.WriteString(w, `{"nodeVersion":{"version":"`+version+`"},"coordinator":true,"starting":false}`)
		case r.URL.Path == "/v1/cluster" && e == dialect.Presto:
			io.WriteString(w, `{"runningQueries":0,"queuedQueries":0}`)
		case r.URL.Path == "/v1/statement":
			c.lastPost.Store(r.Clone(context.Background()))
			if r.Header.Get(e.Header("Transaction-Id")) == "NONE" {
				w.Header().Set(e.Header("Started-Transaction-Id"), "tx-uuid-1")
			}
			w.Header().Add(e.Header("Set-Session"), "a=1")
			w.Header().Add(e.Header("Set-Session"), "b=2")
			w.Header().Set("Content-Type", "application/json")
			const id = "20261205_174539_00005_ts93y"
			next := base + "/v1/statement/queued/" + id + "/yslug/1"
			if e == dialect.Presto {
				next = base + "/v1/statement/queued/" + id + "/1?slug=xsecret"
			}
			io.WriteString(w, `{"id":"`+id+`","infoUri":"`+base+`/ui/query.html?`+id+`","nextUri":"`+next+`",`+
				`"partialCancelUri":"`+base+`/v1/stage/`+id+`.0","stats":{"state":"QUEUED","queued":true},"warnings":[]}`)
		case strings.HasPrefix(r.URL.Path, "/v1/statement/"), strings.HasPrefix(r.URL.Path, "/v1/stage/"):
			if r.Method == http.MethodDelete {
				w.WriteHeader(http.StatusNoContent)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"20261205_174539_00005_ts93y","stats":{"state":"FINISHED"},"warnings":[]}`)
		default:
			http.NotFound(w, r)
		}
	})
	return c
}

// recordingEstimator is fixedEstimator that keeps the queries it saw.
type recordingEstimator struct {
	fixedEstimator
	mu sync.Mutex
	qs []Query
}

func (r *recordingEstimator) Estimate(ctx context.Context, q Query) (estimate.Estimate, error) {
	r.mu.Lock()
	r.qs = append(r.qs, q)
	r.mu.Unlock()
	return r.fixedEstimator.Estimate(ctx, q)
}

func (r *recordingEstimator) last() Query {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.qs[len(r.qs)-1]
}

func sendAs(t *testing.T, p, sql string, h map[string]string) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", p+"/v1/statement", strings.NewReader(sql))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page map[string]any
	b, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(b, &page)
	return resp, page
}

var (
	trinoClient  = map[string]string{"X-Trino-User": "alice"}
	prestoClient = map[string]string{"X-Presto-User": "alice", "X-Presto-Catalog": "tpch"}
)

func with(h map[string]string, kv ...string) map[string]string {
	out := map[string]string{}
	for k, v := range h {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestMixedEngines: one proxy in front of a Trino cluster and two PrestoDB
// clusters (a small and a large class, detected from /v1/info) sends each
// client only to clusters of its own engine, routes within them by cost,
// names the headers it adds after the engine, and refuses what no cluster
// of the client's engine can serve.
func TestMixedEngines(t *testing.T) {
	trino, psmall, plarge := newEngineStub(t, dialect.Trino), newEngineStub(t, dialect.Presto), newEngineStub(t, dialect.Presto)
	est := &recordingEstimator{}
	p := routingProxy(t, Options{
		Clusters: []ClusterConfig{
			{Name: "trino", URL: trino.URL, Class: "large", Engine: dialect.Trino},
			{Name: "presto-small", URL: psmall.URL, Class: "small"},
			{Name: "presto-large", URL: plarge.URL, Class: "large"},
		},
		Estimator: est, Classes: []routing.CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}},
		EstimateTimeout: 200 * time.Millisecond, ClassTag: "cost:",
	})
	t.Run("the metrics name each cluster's engine, configured or detected", func(t *testing.T) {
		resp, err := http.Get(p + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{
			`prestroid_cluster_engine{cluster="trino",engine="trino"} 1`,
			`prestroid_cluster_engine{cluster="presto-small",engine="presto"} 1`,
			`prestroid_cluster_engine{cluster="presto-large",engine="presto"} 1`,
		} {
			if !strings.Contains(string(b), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Run("a PrestoDB client asking /v1/info learns of a PrestoDB cluster", func(t *testing.T) {
		req, _ := http.NewRequest("GET", p+"/v1/info", nil)
		req.Header.Set("X-Presto-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "0.296") {
			t.Errorf("/v1/info %s", b)
		}
	})
	for _, tc := range []struct {
		name, sql string
		client    map[string]string
		cluster   string
		stub      *engineStub
		engine    dialect.Engine
	}{
		{"a heavy Trino query goes to the Trino cluster", "SELECT 1 -- cpu=900", trinoClient, "trino", trino, dialect.Trino},
		{"a light Trino query too: no small Trino cluster, so the larger class", "SELECT 1 -- cpu=1", trinoClient, "trino", trino, dialect.Trino},
		{"a light PrestoDB query goes to the small PrestoDB cluster", "SELECT 1 -- cpu=1", prestoClient, "presto-small", psmall, dialect.Presto},
		{"a heavy PrestoDB query goes to the large PrestoDB cluster", "SELECT 1 -- cpu=900", prestoClient, "presto-large", plarge, dialect.Presto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, page := sendAs(t, p, tc.sql, tc.client)
			if got := resp.Header.Get("X-Prestroid-Cluster"); got != tc.cluster {
				t.Fatalf("cluster %q (%s), want %q", got, resp.Header.Get("X-Prestroid-Decision"), tc.cluster)
			}
			up := tc.stub.lastPost.Load()
			own, other := tc.engine, dialect.Presto
			if own == dialect.Presto {
				other = dialect.Trino
			}
			if up.Header.Get(own.Header("Resource-Estimate")) == "" || up.Header.Get(other.Header("Resource-Estimate")) != "" {
				t.Errorf("upstream estimate headers: %v", up.Header)
			}
			if !strings.Contains(up.Header.Get(own.Header("Client-Tags")), "cost:") || up.Header.Get(other.Header("Client-Tags")) != "" {
				t.Errorf("upstream class tag headers: %v", up.Header)
			}
			q := est.last()
			if q.Engine != tc.engine || q.Header.Get("X-Trino-User") != "alice" {
				t.Errorf("estimator saw engine %v, header %v", q.Engine, q.Header)
			}
			for _, u := range q.Planners {
				if (u == trino.URL) != (tc.engine == dialect.Trino) {
					t.Errorf("planners %v for a %v client", q.Planners, tc.engine)
				}
			}
			if q.Server != q.Planners[0] {
				t.Errorf("server %s, planners %v", q.Server, q.Planners)
			}
			if got := resp.Header.Values(tc.engine.Header("Set-Session")); strings.Join(got, "|") != "a=1|b=2" {
				t.Errorf("set-session values %q", got)
			}
			if next, _ := page["nextUri"].(string); !strings.HasPrefix(next, p+"/r/") {
				t.Errorf("nextUri %q not routed", next)
			}
		})
	}
	t.Run("a PrestoDB poll and cancel reach the cluster with the slug intact", func(t *testing.T) {
		_, page := sendAs(t, p, "SELECT 1 -- cpu=1", prestoClient)
		next := page["nextUri"].(string)
		req, _ := http.NewRequest("GET", next, nil)
		req.Header.Set("X-Presto-User", "alice")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got := *psmall.lastTarget.Load(); !strings.HasSuffix(got, "/1?slug=xsecret") || resp.StatusCode != 200 {
			t.Errorf("poll reached %q with %d", got, resp.StatusCode)
		}
		for _, u := range []string{next, page["partialCancelUri"].(string)} {
			req, _ = http.NewRequest("DELETE", u, nil)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent || *psmall.lastMethod.Load() != "DELETE" {
				t.Errorf("DELETE %s: %d, upstream %s %s", u, resp.StatusCode, *psmall.lastMethod.Load(), *psmall.lastTarget.Load())
			}
		}
	})
	t.Run("a PrestoDB transaction sticks to its cluster and refuses a Trino client", func(t *testing.T) {
		resp, _ := sendAs(t, p, "START TRANSACTION -- cpu=900", with(prestoClient, "X-Presto-Transaction-Id", "NONE"))
		tx := resp.Header.Get("X-Presto-Started-Transaction-Id")
		if tx != "presto-large~tx-uuid-1" || resp.Header.Get("X-Trino-Started-Transaction-Id") != "" {
			t.Fatalf("started transaction %q (headers %v)", tx, resp.Header)
		}
		resp, _ = sendAs(t, p, "SELECT 2 -- cpu=1", with(prestoClient, "X-Presto-Transaction-Id", tx))
		if resp.Header.Get("X-Prestroid-Cluster") != "presto-large" || plarge.lastPost.Load().Header.Get("X-Presto-Transaction-Id") != "tx-uuid-1" {
			t.Errorf("follow-up went to %q with id %q", resp.Header.Get("X-Prestroid-Cluster"), plarge.lastPost.Load().Header.Get("X-Presto-Transaction-Id"))
		}
		resp, page := sendAs(t, p, "SELECT 3", with(trinoClient, "X-Trino-Transaction-Id", tx))
		if e, _ := page["error"].(map[string]any); resp.StatusCode != 200 || e["errorName"] != "PRESTROID_ENGINE_MISMATCH" ||
			!strings.Contains(e["message"].(string), "presto-large, which runs PrestoDB") {
			t.Errorf("Trino client in a PrestoDB transaction: %d %v", resp.StatusCode, page)
		}
	})
	t.Run("a client without either dialect's headers may go anywhere", func(t *testing.T) {
		resp, _ := sendAs(t, p, "SELECT 1", map[string]string{"Authorization": "Basic YWxpY2U6"})
		if resp.StatusCode != 200 || resp.Header.Get("X-Prestroid-Cluster") == "" {
			t.Errorf("%d %v", resp.StatusCode, resp.Header)
		}
	})
}

// TestEngineMismatchRefused: a client whose engine no cluster runs gets a
// failed query in the shape its client reads, and nothing reaches a
// cluster.
func TestEngineMismatchRefused(t *testing.T) {
	trino := newEngineStub(t, dialect.Trino)
	p := routingProxy(t, Options{Clusters: []ClusterConfig{{Name: "trino", URL: trino.URL}}})
	trino.lastPost.Store(nil)
	resp, page := sendAs(t, p, "SELECT 1", prestoClient)
	e, _ := page["error"].(map[string]any)
	if resp.StatusCode != 200 || e["errorName"] != "PRESTROID_ENGINE_MISMATCH" || e["errorType"] != "USER_ERROR" ||
		!strings.Contains(e["message"].(string), "a PrestoDB client (X-Presto-* headers) needs a PrestoDB cluster") {
		t.Errorf("answer %d %v", resp.StatusCode, page)
	}
	if st, _ := page["stats"].(map[string]any); st["state"] != "FAILED" || page["nextUri"] != nil {
		t.Errorf("page %v", page)
	}
	if trino.lastPost.Load() != nil {
		t.Error("the refused query reached the cluster")
	}
	resp, _ = sendAs(t, p, "SELECT 1", trinoClient)
	if resp.StatusCode != 200 || trino.lastPost.Load() == nil {
		t.Errorf("the Trino client was not served: %d", resp.StatusCode)
	}
}

// A PrestoDB client's source, catalog, schema and session reach the
// feedback record, read under its own header names.
func TestFeedbackOfAPrestoClient(t *testing.T) {
	stub := newEngineStub(t, dialect.Presto)
	fb := sink{got: make(chan Completed, 4)}
	p := routingProxy(t, Options{Clusters: []ClusterConfig{{Name: "presto", URL: stub.URL, Engine: dialect.Presto}}, Feedback: fb})
	_, page := sendAs(t, p, "SELECT 1", map[string]string{"X-Presto-User": "carol", "X-Presto-Source": "presto-cli",
		"X-Presto-Catalog": "tpch", "X-Presto-Schema": "tiny", "X-Presto-Session": "a=1"})
	req, _ := http.NewRequest("GET", page["nextUri"].(string), nil)
	req.Header.Set("X-Presto-User", "carol")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	select {
	case c := <-fb.got:
		if c.User != "carol" || c.Source != "presto-cli" || c.Catalog != "tpch" || c.Schema != "tiny" || strings.Join(c.Session, ",") != "a=1" {
			t.Errorf("feedback record %+v", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no feedback record")
	}
}
