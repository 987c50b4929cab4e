package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/gateway"
	"github.com/prestroid/prestroid/proxy/protocol"
)

const fixtureModel = "../../estimator/testdata/bundle-fixture"

// needORTAndTrino skips unless PRESTROID_ORT_LIB and PRESTROID_TRINO_URL
// are set; when set, a broken library or an unreachable Trino fails.
func needORTAndTrino(t *testing.T) (lib, trino string) {
	t.Helper()
	lib, trino = os.Getenv("PRESTROID_ORT_LIB"), os.Getenv("PRESTROID_TRINO_URL")
	if lib == "" || trino == "" {
		t.Skip("needs PRESTROID_ORT_LIB and PRESTROID_TRINO_URL")
	}
	resp, err := http.Get(trino + "/v1/info")
	if err != nil {
		t.Fatalf("PRESTROID_TRINO_URL=%s: %v", trino, err)
	}
	resp.Body.Close()
	return lib, trino
}

// estimatingProxy runs the proxy as `prestroid serve` wires it, with the
// fixture model, in front of the real Trino.
func estimatingProxy(t *testing.T, lib, trino string) string {
	t.Helper()
	cfg := &config.Config{
		Listen:   "127.0.0.1:0",
		Clusters: []config.Cluster{{Name: "default", URL: trino}},
		Routing: config.Routing{Classes: []config.CostClass{
			{Name: "small", MaxCPUSeconds: 1e-6, RoutingGroup: "interactive"},
			{Name: "large", RoutingGroup: "etl"},
		}, EstimateTimeout: config.Duration(30 * time.Second), MonitorInterval: config.Duration(-1)},
		Estimator: config.Estimator{Model: fixtureModel, ORTLib: lib},
	}
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	signer, _ := protocol.NewSigner(nil)
	o := proxy.OptionsFrom(cfg)
	o.Signer, o.Logger = signer, logger
	closeEstimator, err := wireEstimator(cfg, &o, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeEstimator)
	if o.Estimator == nil {
		t.Fatal("no estimator wired")
	}
	srv, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

func post(t *testing.T, url string, h map[string]string, body string, out any) int {
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
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return resp.StatusCode
}

const lineitemSQL = "SELECT returnflag, sum(quantity) FROM lineitem WHERE shipdate <= DATE '1998-09-01' AND linestatus = 'F' GROUP BY 1"

func TestEstimateEndpointsOnTrino(t *testing.T) {
	lib, trino := needORTAndTrino(t)
	p := estimatingProxy(t, lib, trino)

	t.Run("POST /v1/estimate plans as the caller and predicts", func(t *testing.T) {
		var e estimate.JSON
		body := `{"sql": "` + lineitemSQL + `", "headers": {"X-Trino-User": "alice", "X-Trino-Catalog": "tpch", "X-Trino-Schema": "tiny"}}`
		if st := post(t, p+"/v1/estimate", nil, body, &e); st != 200 {
			t.Fatalf("status %d: %+v", st, e)
		}
		if !e.Estimated || e.CPUSeconds <= 0 || e.Model != "fixture-untrained-subtree-15-9-16" || e.ExplainMS <= 0 || e.Cached {
			t.Errorf("%+v", e)
		}
		// The same query with another literal in an equality hits the
		// estimate cache; a moved range is estimated for itself.
		time.Sleep(50 * time.Millisecond)
		var again estimate.JSON
		post(t, p+"/v1/estimate", nil, strings.Replace(body, "linestatus = 'F'", "linestatus = 'O'", 1), &again)
		if !again.Cached || again.CPUSeconds != e.CPUSeconds {
			t.Errorf("repeat with another equality literal: %+v", again)
		}
		var moved estimate.JSON
		post(t, p+"/v1/estimate", nil, strings.Replace(body, "1998-09-01", "1997-01-01", 1), &moved)
		if !moved.Estimated || moved.Cached {
			t.Errorf("repeat with a moved range: %+v", moved)
		}
	})
	t.Run("a query Trino rejects is a clear error", func(t *testing.T) {
		var e estimate.JSON
		st := post(t, p+"/v1/estimate", map[string]string{"X-Trino-User": "alice", "X-Trino-Catalog": "tpch", "X-Trino-Schema": "tiny"}, "SELECT nope FROM lineitem", &e)
		if st != 422 || !strings.Contains(e.Error, "COLUMN_NOT_FOUND") {
			t.Errorf("status %d: %+v", st, e)
		}
	})

	gw := func(sql, catalog, schema string) string {
		b, _ := json.Marshal(map[string]any{
			"trinoQueryProperties": map[string]any{"body": sql, "queryType": "Query", "defaultCatalog": catalog,
				"defaultSchema": schema, "tables": []string{}, "isNewQuerySubmission": true},
			"trinoRequestUser": map[string]any{"user": "alice"}, "contentType": "application/json",
			"method": "POST", "requestURI": "/v1/statement", "remoteAddr": "127.0.0.1", "parameters": map[string]any{},
		})
		return string(b)
	}
	clientHeaders := map[string]string{"Content-Type": "application/json", "X-Trino-User": "alice",
		"X-Trino-Catalog": "tpch", "X-Trino-Schema": "sf1", "X-Trino-Source": "trino-cli"}
	t.Run("Trino Gateway's routing request gets a group and the estimate header", func(t *testing.T) {
		var r gateway.Response
		if st := post(t, p+"/v1/routing", clientHeaders, gw(lineitemSQL, "tpch", "sf1"), &r); st != 200 {
			t.Fatalf("status %d", st)
		}
		if r.RoutingGroup == nil || *r.RoutingGroup != "etl" || len(r.Errors) != 0 ||
			!strings.HasPrefix(r.ExternalHeaders["X-Trino-Resource-Estimate"], "CPU_TIME=") {
			t.Errorf("%+v", r)
		}
	})
	t.Run("the gateway's default catalog and schema are used when headers lack them", func(t *testing.T) {
		var r gateway.Response
		post(t, p+"/v1/routing", map[string]string{"X-Trino-User": "alice"}, gw("SELECT count(*) FROM nation", "tpch", "tiny"), &r)
		if r.RoutingGroup == nil || len(r.Errors) != 0 {
			t.Errorf("%+v", r)
		}
	})
	t.Run("a failing EXPLAIN leaves the choice to the gateway's default group and says why", func(t *testing.T) {
		// With errors filled, Trino Gateway (propagateErrors) would answer
		// the client 400 and never run the query: the failure is a null
		// group, the reason in X-Prestroid-Decision.
		req, _ := http.NewRequest("POST", p+"/v1/routing", strings.NewReader(gw("SELECT * FROM no_such_table", "tpch", "sf1")))
		for k, v := range clientHeaders {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var r gateway.Response
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			t.Fatal(err)
		}
		why := resp.Header.Get("X-Prestroid-Decision")
		if resp.StatusCode != 200 || r.RoutingGroup != nil || len(r.Errors) != 0 || why != "fail-open: estimate failed" {
			t.Errorf("HTTP %d %+v, X-Prestroid-Decision %q", resp.StatusCode, r, why)
		}
	})
}

func TestEstimateCommandOnTrino(t *testing.T) {
	lib, trino := needORTAndTrino(t)
	out := captureStdout(t, func() int {
		return runEstimate([]string{"--server", trino, "--user", "alice", "--catalog", "tpch", "--schema", "tiny",
			"--model", fixtureModel, "--ort-lib", lib, "--json", lineitemSQL})
	})
	var e map[string]any
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	for _, k := range []string{"cpu_seconds", "model", "explain_ms", "featurize_us", "infer_us"} {
		if _, ok := e[k]; !ok {
			t.Errorf("--json output lacks %q: %s", k, out)
		}
	}
	if e["estimated"] != true || e["untrained"] != true {
		t.Errorf("%s", out)
	}
	out = captureStdout(t, func() int {
		return runEstimate([]string{"--server", trino, "--model", fixtureModel, "--ort-lib", lib, "SET SESSION query_max_run_time = '1h'"})
	})
	if !strings.HasPrefix(string(out), "not estimated") {
		t.Errorf("SET SESSION: %s", out)
	}
	// Cheap by nature: the constant, without EXPLAIN.
	out = captureStdout(t, func() int {
		return runEstimate([]string{"--server", trino, "--model", fixtureModel, "--ort-lib", lib, "SHOW CATALOGS"})
	})
	if !strings.HasPrefix(string(out), "0.010 CPU seconds") || !strings.Contains(string(out), "cheap") {
		t.Errorf("SHOW CATALOGS: %s", out)
	}
}

func captureStdout(t *testing.T, f func() int) []byte {
	t.Helper()
	r, w, _ := os.Pipe()
	old := os.Stdout
	os.Stdout = w
	code := f()
	os.Stdout = old
	w.Close()
	var buf bytes.Buffer
	io.Copy(&buf, r)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, buf.Bytes())
	}
	return buf.Bytes()
}

// TestEmbeddedDefaultModel: with no model configured, the embedded
// bundle loads (all its golden cases pass) and serves estimates.
func TestEmbeddedDefaultModel(t *testing.T) {
	lib := os.Getenv("PRESTROID_ORT_LIB")
	if lib == "" {
		t.Skip("PRESTROID_ORT_LIB not set")
	}
	cfg := &config.Config{Estimator: config.Estimator{ORTLib: lib}}
	cfg.FillDefaults()
	svc, _, _, err := newEstimatorService(cfg.Estimator, cfg.Routing, cfg.Guardrails, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	m := svc.Model()
	if m.Source() != "embedded:models/default" || m.Manifest().Untrained() {
		t.Errorf("model %s from %s, untrained %v", m.ID(), m.Source(), m.Manifest().Untrained())
	}
	plan, err := os.ReadFile("../../estimator/testdata/explain/tpcds-q64-sf1.json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := svc.EstimatePlan(context.Background(), plan)
	if err != nil || !e.Estimated || e.CPUSeconds <= 0 {
		t.Fatalf("%+v, %v", e, err)
	}
}

func TestHistoryFileHeldByAnotherProcessIsAnError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "history.db")
	held, err := newHistory(config.History{Path: path, MaxEntries: 10}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	cfg := &config.Config{Clusters: []config.Cluster{{Name: "default", URL: "http://127.0.0.1:1"}}}
	cfg.Estimator.Model = ""
	cfg.Estimator.History.Path = path
	cfg.FillDefaults()
	signer, _ := protocol.NewSigner(nil)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	o := proxy.OptionsFrom(cfg)
	o.Signer, o.Logger = signer, logger
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set: the estimator would be off before the history is opened")
	}
	if closeFn, err := wireEstimator(cfg, &o, logger); err == nil || !strings.Contains(err.Error(), "estimator.history") {
		closeFn()
		t.Fatalf("wireEstimator with a held history file: %v; want an estimator.history error", err)
	}
}

// TestEstimateCommandOnPresto: the engine is read from the coordinator's
// version, the EXPLAIN runs in PrestoDB's dialect and its plan is scored;
// `prestroid plan --server` prints the same plan's O-T-P tree.
func TestEstimateCommandOnPresto(t *testing.T) {
	lib := os.Getenv("PRESTROID_ORT_LIB")
	presto := os.Getenv("PRESTROID_PRESTO_URL")
	if lib == "" || presto == "" {
		t.Skip("needs PRESTROID_ORT_LIB and PRESTROID_PRESTO_URL")
	}
	out := captureStdout(t, func() int {
		return runEstimate([]string{"--server", presto, "--user", "alice", "--catalog", "tpch", "--schema", "tiny",
			"--ort-lib", lib, "--json", lineitemSQL})
	})
	var e map[string]any
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if e["estimated"] != true || e["source"] != "model" {
		t.Errorf("want a model estimate of PrestoDB's plan: %s", out)
	}
	out = captureStdout(t, func() int {
		return runPlan([]string{"--server", presto, "--user", "alice", "--catalog", "tpch", "--schema", "tiny", lineitemSQL})
	})
	if !strings.Contains(string(out), "TBL tpch.tiny.lineitem") {
		t.Errorf("prestroid plan --server on PrestoDB: no lineitem scan in\n%s", out)
	}
}

// TestPlanPrintsTheTreeTheEmbeddedModelReads: `prestroid plan` builds the
// tree with the embedded model's readings by default (it reads the scans'
// dynamic filters: tree_features), and --dynamic-filters=false prints the
// plain tree.
func TestPlanPrintsTheTreeTheEmbeddedModelReads(t *testing.T) {
	if !embeddedTree().DynamicFilters {
		t.Fatal("the embedded model's manifest names no dynamic_filters reading")
	}
	file := filepath.Join("..", "..", "estimator", "testdata", "explain", "tpcds-q03-sf1.json")
	out := captureStdout(t, func() int { return runPlan([]string{file}) })
	if !strings.Contains(string(out), "[ss_item_sk DYNAMIC]") {
		t.Errorf("prestroid plan: no dynamic filter clause in\n%s", out)
	}
	out = captureStdout(t, func() int { return runPlan([]string{"--dynamic-filters=false", file}) })
	if strings.Contains(string(out), "DYNAMIC") || !strings.Contains(string(out), "TBL tpcds.sf1.store_sales") {
		t.Errorf("prestroid plan --dynamic-filters=false:\n%s", out)
	}
}
