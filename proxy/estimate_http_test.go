package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func estimateProxy(t *testing.T) string {
	c := newCoordinator(t)
	return routingProxy(t, Options{
		Clusters:      []ClusterConfig{{Name: "default", URL: c.URL}},
		Estimator:     &fixedEstimator{},
		RoutingGroups: []RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60}, {Name: "etl"}},
	})
}

func postJSON(t *testing.T, url, body string, h map[string]string, out any) int {
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
	return resp.StatusCode
}

func TestEstimateEndpoint(t *testing.T) {
	p := estimateProxy(t)
	cases := []struct {
		name   string
		body   string
		h      map[string]string
		status int
		check  func(t *testing.T, e EstimateJSON)
	}{
		{"a JSON request with Trino headers is estimated", `{"sql": "SELECT 1 -- cpu=90", "headers": {"X-Trino-User": "alice", "X-Trino-Catalog": ["tpch"]}}`, nil, 200,
			func(t *testing.T, e EstimateJSON) {
				if !e.Estimated || e.CPUSeconds != 90 || e.CPUTime != "90s" || e.Model != "test-model" {
					t.Errorf("%+v", e)
				}
			}},
		{"a plain-text statement with request headers is estimated", "SELECT 1 -- cpu=0.25", map[string]string{"X-Trino-User": "alice"}, 200,
			func(t *testing.T, e EstimateJSON) {
				if !e.Estimated || e.CPUTime != "250ms" {
					t.Errorf("%+v", e)
				}
			}},
		{"a statement that is not a query is not estimated", `{"sql": "SET SESSION a = 1", "headers": {"X-Trino-User": "alice"}}`, nil, 200,
			func(t *testing.T, e EstimateJSON) {
				if e.Estimated || e.Reason == "" {
					t.Errorf("%+v", e)
				}
			}},
		{"a request without a user is refused", `{"sql": "SELECT 1"}`, nil, 400, nil},
		{"malformed JSON is refused", `{"sql": `, map[string]string{"X-Trino-User": "a"}, 400, nil},
		{"an empty statement is refused", `{"sql": " "}`, map[string]string{"X-Trino-User": "a"}, 400, nil},
		{"a failing estimate says why", `{"sql": "SELECT fail"}`, map[string]string{"X-Trino-User": "a"}, 422,
			func(t *testing.T, e EstimateJSON) {
				if !strings.Contains(e.Error, "explain failed") {
					t.Errorf("%+v", e)
				}
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e EstimateJSON
			if st := postJSON(t, p+"/v1/estimate", c.body, c.h, &e); st != c.status {
				t.Fatalf("status %d, want %d (%+v)", st, c.status, e)
			}
			if c.check != nil {
				c.check(t, e)
			}
		})
	}
}
