package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/gateway"
)

func estimateProxy(t *testing.T) string {
	c := newCoordinator(t)
	return routingProxy(t, Options{
		Clusters:      []ClusterConfig{{Name: "default", URL: c.URL}},
		Estimator:     &fixedEstimator{},
		RoutingGroups: []gateway.RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60}, {Name: "etl"}},
	})
}

func postJSON(t *testing.T, url, body string, h map[string]string, out any) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return resp
}

func TestEstimateEndpoint(t *testing.T) {
	p := estimateProxy(t)
	cases := []struct {
		name   string
		body   string
		h      map[string]string
		status int
		check  func(t *testing.T, e estimate.JSON)
	}{
		{"a JSON request with Trino headers is estimated", `{"sql": "SELECT 1 -- cpu=90", "headers": {"X-Trino-User": "alice", "X-Trino-Catalog": ["tpch"]}}`, nil, 200,
			func(t *testing.T, e estimate.JSON) {
				if !e.Estimated || e.CPUSeconds != 90 || e.CPUTime != "90s" || e.Model != "test-model" {
					t.Errorf("%+v", e)
				}
			}},
		{"a plain-text statement with request headers is estimated", "SELECT 1 -- cpu=0.25", map[string]string{"X-Trino-User": "alice"}, 200,
			func(t *testing.T, e estimate.JSON) {
				if !e.Estimated || e.CPUTime != "250ms" {
					t.Errorf("%+v", e)
				}
			}},
		{"an estimate of all three targets shows them and the header the cluster gets", `{"sql": "SELECT 1 -- cpu=2 mem=1610612736 elapsed=0.25", "headers": {"X-Trino-User": "alice"}}`, nil, 200,
			func(t *testing.T, e estimate.JSON) {
				if !e.Estimated || e.PeakMemoryBytes != 1610612736 || e.PeakMemoryLo != 1610612736 || e.PeakMemoryHi != 1610612736 ||
					e.ElapsedSeconds != 0.25 || e.ResourceEstimate != "EXECUTION_TIME=250ms, CPU_TIME=2s, PEAK_MEMORY=1536MB" {
					t.Errorf("%+v", e)
				}
			}},
		{"an estimate of CPU alone carries no memory or time", `{"sql": "SELECT 1 -- cpu=2", "headers": {"X-Trino-User": "alice"}}`, nil, 200,
			func(t *testing.T, e estimate.JSON) {
				if e.PeakMemoryBytes != 0 || e.ElapsedSeconds != 0 || e.ResourceEstimate != "CPU_TIME=2s" {
					t.Errorf("%+v", e)
				}
			}},
		{"a statement that is not a query is not estimated", `{"sql": "SET SESSION a = 1", "headers": {"X-Trino-User": "alice"}}`, nil, 200,
			func(t *testing.T, e estimate.JSON) {
				if e.Estimated || e.Reason == "" {
					t.Errorf("%+v", e)
				}
			}},
		{"a request without a user is refused", `{"sql": "SELECT 1"}`, nil, 400, nil},
		{"malformed JSON is refused", `{"sql": `, map[string]string{"X-Trino-User": "a"}, 400, nil},
		{"an empty statement is refused", `{"sql": " "}`, map[string]string{"X-Trino-User": "a"}, 400, nil},
		{"a failing estimate says why", `{"sql": "SELECT fail"}`, map[string]string{"X-Trino-User": "a"}, 422,
			func(t *testing.T, e estimate.JSON) {
				if !strings.Contains(e.Error, "explain failed") {
					t.Errorf("%+v", e)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e estimate.JSON
			if st := postJSON(t, p+"/v1/estimate", c.body, c.h, &e).StatusCode; st != c.status {
				t.Fatalf("status %d, want %d (%+v)", st, c.status, e)
			}
			if c.check != nil {
				c.check(t, e)
			}
		})
	}
}

// routingBody is a Trino Gateway external routing request for a new
// statement (package gateway has the full shape and the captured ones).
func routingBody(sql string) string {
	b, _ := json.Marshal(map[string]any{"method": "POST", "requestURI": "/v1/statement",
		"trinoQueryProperties": map[string]any{"body": sql, "queryType": "Query",
			"isNewQuerySubmission": true, "isQueryParsingSuccessful": true}})
	return string(b)
}

// TestRoutingEndpointWiring: POST /v1/routing (package gateway) estimates
// through the core's estimator, on the default cluster within
// EstimateTimeout, and routes with the core's options.
func TestRoutingEndpointWiring(t *testing.T) {
	c := newCoordinator(t)
	p := routingProxy(t, Options{
		Clusters:        []ClusterConfig{{Name: "default", URL: c.URL}},
		Estimator:       &fixedEstimator{},
		EstimateTimeout: 300 * time.Millisecond,
		ClassTag:        "cost:",
		RoutingGroups:   []gateway.RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60}, {Name: "etl", Class: "large"}},
	})
	call := func(t *testing.T, sql string, h map[string]string) (gateway.Response, *http.Response) {
		t.Helper()
		var r gateway.Response
		resp := postJSON(t, p+"/v1/routing", routingBody(sql), h, &r)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return r, resp
	}
	alice := map[string]string{"X-Trino-User": "alice"}
	t.Run("an estimate routes to its group with the core's options", func(t *testing.T) {
		r, resp := call(t, "SELECT 1 -- cpu=900", alice)
		if r.RoutingGroup == nil || *r.RoutingGroup != "etl" || r.ExternalHeaders["X-Trino-Resource-Estimate"] != "CPU_TIME=15m" ||
			r.ExternalHeaders["X-Trino-Client-Tags"] != "cost:large" || resp.Header.Get("X-Prestroid-Decision") != "routed: group etl" ||
			resp.Header.Get("X-Prestroid-Estimate") != "none; cpu=900; lo=900; hi=900" {
			t.Errorf("%+v %v", r, resp.Header)
		}
	})
	for sql, want := range map[string]string{"SELECT stall": "fail-open: estimate over budget", "SELECT busy": "fail-open: planners busy"} {
		t.Run(want, func(t *testing.T) {
			start := time.Now()
			r, resp := call(t, sql, alice)
			if r.RoutingGroup != nil || len(r.Errors) != 0 || resp.Header.Get("X-Prestroid-Decision") != want {
				t.Errorf("%+v %q", r, resp.Header.Get("X-Prestroid-Decision"))
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("took %v", took)
			}
		})
	}
	t.Run("without an estimator nothing is estimated", func(t *testing.T) {
		q := routingProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: c.URL}}})
		req, _ := http.NewRequest("POST", q+"/v1/routing", strings.NewReader(routingBody("SELECT 1")))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Prestroid-Decision") != "no-estimator" {
			t.Errorf("%d %q", resp.StatusCode, resp.Header.Get("X-Prestroid-Decision"))
		}
	})
}

// TestRoutingOnClientListenerChecksHost: the Host check guards the URIs
// handed to clients, so the client's Host that Trino Gateway forwards
// (package gateway's testdata) is refused there; the gateway must call the
// admin listener, or allowed_hosts must list its clients' Host (README,
// "Prestroid as Trino Gateway's brain").
func TestRoutingOnClientListenerChecksHost(t *testing.T) {
	client, admin := adminProxy(t, Options{Estimator: &fixedEstimator{},
		RoutingGroups: []gateway.RoutingGroup{{Name: "small", MaxCPUSeconds: 60}, {Name: "large"}}})
	for base, want := range map[string]int{client: 400, admin: 200} {
		req, _ := http.NewRequest("POST", base+"/v1/routing", strings.NewReader(routingBody("SELECT 1 -- cpu=1")))
		req.Host = "127.0.0.1:8100" // the gateway's address, as gateway-ha 18 forwards it
		req.Header.Set("X-Trino-User", "alice")
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: status %d, want %d", base, resp.StatusCode, want)
		}
	}
}
