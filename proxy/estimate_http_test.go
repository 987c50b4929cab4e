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

// gatewayBody is shaped like Trino Gateway's RoutingGroupExternalBody
// (trinoQueryProperties is present when requestAnalyzerConfig.analyzeRequest
// is on).
func gatewayBody(sql string) string {
	b, _ := json.Marshal(map[string]any{
		"trinoQueryProperties": map[string]any{
			"body": sql, "queryType": "Query", "resourceGroupQueryType": "SELECT",
			"tables": []string{"tpch.sf1.lineitem"}, "defaultCatalog": "tpch", "defaultSchema": "sf1",
			"catalogs": []string{"tpch"}, "schemas": []string{"sf1"}, "catalogSchemas": []string{"tpch.sf1"},
			"isNewQuerySubmission": true, "errorMessage": nil,
		},
		"trinoRequestUser": map[string]any{"user": "alice"},
		"contentType":      "application/json", "remoteUser": nil, "method": "POST",
		"requestURI": "/v1/statement", "queryString": nil, "session": nil,
		"remoteAddr": "10.0.0.7", "remoteHost": "10.0.0.7", "parameters": map[string]any{},
	})
	return string(b)
}

func TestRoutingEndpointLikeTrinoGateway(t *testing.T) {
	p := estimateProxy(t)
	// The gateway forwards the client's headers and adds its JSON body.
	h := map[string]string{"Content-Type": "application/json; charset=utf-8", "X-Trino-User": "alice",
		"X-Trino-Source": "trino-cli", "User-Agent": "StatementClientV1/476"}
	str := func(s *string) string {
		if s == nil {
			return "<null>"
		}
		return *s
	}
	cases := []struct {
		name, body string
		user       bool
		group      string
		header     string
		errs       bool
	}{
		{"a light query goes to the interactive group", gatewayBody("SELECT 1 -- cpu=0.5"), true, "interactive", "CPU_TIME=500ms", false},
		{"a heavy query goes to the etl group", gatewayBody("SELECT 2 -- cpu=900"), true, "etl", "CPU_TIME=15m", false},
		{"a statement that is not a query gets the gateway's default", gatewayBody("SET SESSION x = 1"), true, "<null>", "", false},
		{"a failed estimate fails open with the reason", gatewayBody("SELECT fail"), true, "<null>", "", true},
		{"the caller's identity is required", gatewayBody("SELECT 1 -- cpu=1"), false, "<null>", "", true},
		{"without the gateway's analysis there is no query text", `{"trinoQueryProperties": null, "method": "POST"}`, true, "<null>", "", true},
		{"a malformed body is an error, not a failure", `{`, true, "<null>", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hh := map[string]string{}
			for k, v := range h {
				if k != "X-Trino-User" || c.user {
					hh[k] = v
				}
			}
			var r GatewayResponse
			if st := postJSON(t, p+"/v1/routing", c.body, hh, &r); st != 200 {
				t.Fatalf("status %d", st)
			}
			if str(r.RoutingGroup) != c.group || r.ExternalHeaders["X-Trino-Resource-Estimate"] != c.header || (len(r.Errors) > 0) != c.errs {
				t.Errorf("got group %s headers %v errors %q; want group %s header %q errors %v",
					str(r.RoutingGroup), r.ExternalHeaders, r.Errors, c.group, c.header, c.errs)
			}
			if r.Errors == nil || r.ExternalHeaders == nil {
				t.Error("errors and externalHeaders must be present (the gateway reads both)")
			}
		})
	}
}
