// Package gateway tests Prestroid as Trino Gateway's brain end to end: a
// real Trino Gateway 18 (gateway-ha, Java 25, its own throwaway
// PostgreSQL) with external routing rules pointing at the real binary's
// POST /v1/routing, two real Trino clusters in two routing groups, and
// real clients talking to the gateway. See package e2e.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/prestroid/prestroid/testing/pgtest"
	"github.com/trinodb/trino-go-client/trino"
)

const (
	lightSQL = "SELECT count(*) FROM nation" // tpch.tiny: 25 rows
	// heavySQL is estimated at seconds of CPU (a TPC-DS sf1 join): the
	// test cancels it once the large cluster runs it.
	heavySQL = `SELECT ss_store_sk, count(*), sum(ss_net_paid) FROM tpcds.sf1.store_sales
JOIN tpcds.sf1.date_dim ON ss_sold_date_sk = d_date_sk JOIN tpcds.sf1.item ON ss_item_sk = i_item_sk
WHERE d_year BETWEEN 1998 AND 2002 GROUP BY ss_store_sk`
)

// gatewayConfig is Trino Gateway's configuration: PostgreSQL for its
// state, external routing rules at Prestroid's admin listener, the
// gateway's default group large (where a query goes when Prestroid names
// none). The suite's Trino does not process X-Forwarded-* (Trino ≥ 451
// answers 406 to them), so the gateway sends none; clients then follow
// nextUri to the cluster itself.
const gatewayConfig = `serverConfig:
  node.environment: test
  http-server.http.port: %s
  router.http-client.request-timeout: 70s
dataStore:
  jdbcUrl: %s
  user: %s
  password: unused
  driver: org.postgresql.Driver
  queryHistoryHoursRetention: 1
clusterStatsConfiguration:
  monitorType: INFO_API
monitor:
  taskDelay: 1s
routing:
  defaultRoutingGroup: large
  addXForwardedHeaders: false
requestAnalyzerConfig:
  analyzeRequest: true
routingRules:
  rulesEngineEnabled: true
  rulesType: EXTERNAL
  rulesExternalConfiguration:
    urlPath: http://127.0.0.1:%s/v1/routing
    excludeHeaders: []
    propagateErrors: true
`

// gateway is a running Trino Gateway.
type gateway struct {
	base  string
	log   string
	cmd   *exec.Cmd
	ready chan time.Duration // its start time once /trino-gateway/readyz says ok; -1 if it exited first
}

// startGateway launches the gateway JVM and returns at once; wait for it
// with gw.wait.
func startGateway(t *testing.T, jar, jdbcURL, pgUser, routingPort string) *gateway {
	t.Helper()
	java := filepath.Join(os.Getenv("TRINO_JAVA_HOME"), "bin", "java")
	if os.Getenv("TRINO_JAVA_HOME") == "" {
		java = "/usr/lib/jvm/temurin-25-jdk-amd64/bin/java" // as testing/trino/trino.sh
	}
	dir := t.TempDir()
	port := e2e.FreePort(t)
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, gatewayConfig, port, jdbcURL, pgUser, routingPort), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := &gateway{base: "http://127.0.0.1:" + port, log: filepath.Join(dir, "gateway.log"), ready: make(chan time.Duration, 1)}
	logf, err := os.Create(gw.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	gw.cmd = exec.Command(java, "-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", jar, cfg)
	gw.cmd.Dir = dir
	gw.cmd.Stdout, gw.cmd.Stderr = logf, logf
	start := time.Now()
	if err := gw.cmd.Start(); err != nil {
		t.Fatalf("gateway JVM (%s): %v", java, err)
	}
	exited := make(chan struct{})
	go func() { gw.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		gw.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			gw.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(gw.log)
			t.Logf("Trino Gateway log %s (tail):\n%s", gw.log, e2e.Tail(string(b), 6000))
		}
	})
	go func() {
		for {
			select {
			case <-exited:
				gw.ready <- -1 // never ready
				return
			case <-time.After(250 * time.Millisecond):
			}
			if resp, err := http.Get(gw.base + "/trino-gateway/readyz"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					gw.ready <- time.Since(start)
					return
				}
			}
		}
	}()
	return gw
}

// wait returns how long the gateway took to be ready, failing the test
// past a deadline.
func (gw *gateway) wait(t *testing.T) time.Duration {
	t.Helper()
	select {
	case d := <-gw.ready:
		if d < 0 {
			t.Fatal("the Trino Gateway JVM exited before it was ready (its log follows)")
		}
		return d
	case <-time.After(5 * time.Minute):
		t.Fatal("Trino Gateway not ready within 5 minutes")
	}
	return 0
}

// call sends one request to the gateway's own REST API.
func (gw *gateway) call(t *testing.T, path, body string) []byte {
	t.Helper()
	resp, err := http.Post(gw.base+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("gateway %s: %s: %s", path, resp.Status, b)
	}
	return b
}

// addBackends registers the clusters (name → URL, each in its own routing
// group of the same name) and waits until the gateway's monitor finds
// them healthy (it routes only to HEALTHY backends).
func (gw *gateway) addBackends(t *testing.T, clusters map[string]string) {
	t.Helper()
	for name, url := range clusters {
		b, _ := json.Marshal(map[string]any{"name": "trino-" + name, "proxyTo": url, "active": true, "routingGroup": name})
		gw.call(t, "/gateway/backend/modify/add", string(b))
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var all struct {
			Data []struct{ Name, Status string } `json:"data"`
		}
		json.Unmarshal(gw.call(t, "/webapp/getAllBackends", "{}"), &all)
		healthy := 0
		for _, b := range all.Data {
			if b.Status == "HEALTHY" {
				healthy++
			}
		}
		if healthy == len(clusters) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("backends not healthy within 2 minutes: %+v", all.Data)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// estimateOf is prestroid estimate --json's answer, in CPU seconds.
func estimateOf(t *testing.T, bin, server, sql string) float64 {
	t.Helper()
	out, err := exec.Command(bin, "estimate", "--server", server, "--user", "e2e", "--json", sql).Output()
	if err != nil {
		t.Fatalf("prestroid estimate: %v\n%s", err, out)
	}
	var e struct {
		CPUSeconds float64 `json:"cpu_seconds"`
	}
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return e.CPUSeconds
}

// queryOn returns the ids of the queries with marker that Trino at base
// ran or runs (not the EXPLAINs Prestroid ran to estimate them).
func queryOn(t *testing.T, base, marker string) []string {
	t.Helper()
	rows, err := e2e.OpenDB(t, base, "").Query("SELECT query_id FROM system.runtime.queries WHERE query LIKE '%" + marker +
		"%' AND query NOT LIKE '%system.runtime.queries%' AND query NOT LIKE 'EXPLAIN %'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		rows.Scan(&id)
		ids = append(ids, id)
	}
	return ids
}

// resourceEstimate returns the CPU time estimate Trino at base holds for
// query id: its query info's session.resourceEstimates.cpuTime (seconds),
// what it parsed from X-Trino-Resource-Estimate; -1 when there is none.
func resourceEstimate(t *testing.T, base, id string) float64 {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/query/"+id, nil)
	req.Header.Set("X-Trino-User", "e2e")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Session struct {
			ResourceEstimates struct {
				CPUTime *float64 `json:"cpuTime"`
			} `json:"resourceEstimates"`
		} `json:"session"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("query info %s: %v", id, err)
	}
	if info.Session.ResourceEstimates.CPUTime == nil {
		return -1
	}
	return *info.Session.ResourceEstimates.CPUTime
}

// routedEstimate asks Prestroid's /v1/routing what it answers the gateway
// for sql (the same headers as the clients send): the group and the
// CPU_TIME it hands over, in seconds.
func routedEstimate(t *testing.T, admin, sql, catalog, schema string) (string, float64) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"method": "POST", "requestURI": "/v1/statement",
		"trinoQueryProperties": map[string]any{"body": sql, "isNewQuerySubmission": true, "isQueryParsingSuccessful": true, "queryType": "Query"}})
	req, _ := http.NewRequest("POST", admin+"/v1/routing", bytes.NewReader(body))
	req.Header.Set("X-Trino-User", "e2e")
	if catalog != "" {
		req.Header.Set("X-Trino-Catalog", catalog)
		req.Header.Set("X-Trino-Schema", schema)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		RoutingGroup    *string           `json:"routingGroup"`
		ExternalHeaders map[string]string `json:"externalHeaders"`
	}
	json.NewDecoder(resp.Body).Decode(&r)
	if r.RoutingGroup == nil {
		t.Fatalf("/v1/routing named no group (%s)", resp.Header.Get("X-Prestroid-Decision"))
	}
	return *r.RoutingGroup, trinoSeconds(t, estimateField(t, r.ExternalHeaders["X-Trino-Resource-Estimate"], "CPU_TIME"))
}

// estimateField is the value of name in an X-Trino-Resource-Estimate value
// ("EXECUTION_TIME=2s, CPU_TIME=150ms, PEAK_MEMORY=5MB").
func estimateField(t *testing.T, h, name string) string {
	t.Helper()
	for _, f := range strings.Split(h, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(f), name+"="); ok {
			return v
		}
	}
	t.Fatalf("no %s in the resource estimate %q", name, h)
	return ""
}

// same compares two durations in seconds (Trino prints them as decimals).
func same(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// trinoSeconds parses the Trino durations estimate.TrinoDuration writes.
func trinoSeconds(t *testing.T, d string) float64 {
	t.Helper()
	for _, u := range []struct {
		suffix string
		sec    float64
	}{{"ms", 1e-3}, {"s", 1}, {"m", 60}} {
		if n, ok := strings.CutSuffix(d, u.suffix); ok {
			if f, err := strconv.ParseFloat(n, 64); err == nil {
				return f * u.sec
			}
		}
	}
	t.Fatalf("not a Trino duration: %q", d)
	return 0
}

func TestTrinoGatewayRoutesByPrestroid(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	small := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	jar := e2e.RequireEnv(t, "PRESTROID_GATEWAY_JAR")
	e2e.RequireEnv(t, "PRESTROID_PG_BIN") // read by pgtest
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}

	// The class bound between the two queries' estimates, as the routing
	// e2e test sets it: the model ranks them three orders apart.
	light, heavy := estimateOf(t, bin, small, "SELECT count(*) FROM tpch.tiny.nation"), estimateOf(t, bin, small, heavySQL)
	if !(heavy > 100*light) {
		t.Fatalf("the model ranks the TPC-DS sf1 join (%.4gs) not far above a 25-row count (%.4gs)", heavy, light)
	}
	bound := math.Sqrt(light * heavy)

	// The gateway (PostgreSQL, then its JVM) starts while the second
	// Trino does.
	pg := pgtest.Start(t)
	adminPort := e2e.FreePort(t)
	gw := startGateway(t, jar, pg.JDBCURL(), pg.User, adminPort)
	large, _ := e2e.StartTrinoInstance(t, "large", "", nil)

	dir := t.TempDir()
	port := e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
admin_listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: small, url: %q, class: small}
  - {name: large, url: %q, class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: %g, routing_group: small}
    - {name: large, routing_group: large}
  explain: always   # /v1/routing answers with the plan model's numbers the bound was computed from
  monitor_interval: 1s
  estimate_timeout: 60s
`, port, adminPort, strings.Repeat("g", 40), small, large, bound)
	path := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e2e.ServeBinary(t, bin, port, "--config", path)
	admin := "http://127.0.0.1:" + adminPort

	took := gw.wait(t)
	t.Logf("Trino Gateway 18 ready %s after its launch", took.Round(100*time.Millisecond))
	gw.addBackends(t, map[string]string{"small": small, "large": large})
	t.Logf("both backends healthy %s after the test began", time.Since(begin).Round(time.Second))

	run := fmt.Sprintf("%d", rand.Uint32())
	host, gwPort, _ := strings.Cut(strings.TrimPrefix(gw.base, "http://"), ":")
	for _, c := range []struct {
		client string
		run    func(sql string) ([]byte, error)
	}{
		{"the Trino CLI", func(sql string) ([]byte, error) {
			return exec.Command("java", "-jar", cli, "--server", gw.base, "--user", "e2e", "--catalog", "tpch", "--schema", "tiny",
				"--output-format", "TSV", "--execute", sql).CombinedOutput()
		}},
		{"the Python client", func(sql string) ([]byte, error) {
			py := e2e.RequireEnv(t, "PRESTROID_PYTHON")
			return exec.Command(py, "-c", fmt.Sprintf(`
import trino
cur = trino.dbapi.connect(host=%q, port=%s, user="e2e", catalog="tpch", schema="tiny").cursor()
cur.execute(%q)
print(cur.fetchall()[0][0])
`, host, gwPort, sql)).CombinedOutput()
		}},
	} {
		t.Run("a light query from "+c.client+" lands on the small group with its estimate", func(t *testing.T) {
			marker := "gw_light_" + strings.ReplaceAll(c.client, " ", "_") + "_" + run
			sql := lightSQL + " /* " + marker + " */"
			if out, err := c.run(sql); err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "25") {
				t.Fatalf("%s through the gateway: %v\n%s", c.client, err, out)
			}
			ids := queryOn(t, small, marker)
			if len(ids) != 1 || len(queryOn(t, large, marker)) != 0 {
				t.Fatalf("ran on small %d times, on large %d times", len(ids), len(queryOn(t, large, marker)))
			}
			group, want := routedEstimate(t, admin, sql, "tpch", "tiny")
			if got := resourceEstimate(t, small, ids[0]); group != "small" || !same(got, want) {
				t.Errorf("Trino's resourceEstimates.cpuTime %gs, Prestroid's CPU_TIME %gs (group %s)", got, want, group)
			}
		})
	}
	t.Run("a heavy query from trino-go-client lands on the large group with its estimate", func(t *testing.T) {
		marker := "gw_heavy_" + run
		sql := heavySQL + " /* " + marker + " */"
		ctx, cancel := context.WithCancel(t.Context())
		db := e2e.OpenDB(t, gw.base, "")
		done := make(chan error, 1)
		go func() {
			rows, err := db.QueryContext(ctx, sql)
			if err == nil {
				for rows.Next() {
				}
				err = rows.Err()
				rows.Close()
			}
			done <- err
		}()
		// Once the large cluster has it, it has its estimate: cancel (a
		// TPC-DS sf1 join is minutes of CPU on a loaded machine).
		var ids []string
		deadline := time.Now().Add(3 * time.Minute)
		for len(ids) == 0 && time.Now().Before(deadline) {
			select {
			case err := <-done:
				// Over before a poll saw it run: Trino still lists it.
				if ids = queryOn(t, large, marker); len(ids) == 0 {
					t.Fatalf("the query ended (%v) and the large cluster never ran it", err)
				}
				done <- err
			case <-time.After(500 * time.Millisecond):
				ids = queryOn(t, large, marker)
			}
		}
		cancel()
		<-done
		if len(ids) != 1 || len(queryOn(t, small, marker)) != 0 {
			t.Fatalf("ran on large %d times, on small %d times", len(ids), len(queryOn(t, small, marker)))
		}
		group, want := routedEstimate(t, admin, sql, "", "")
		if got := resourceEstimate(t, large, ids[0]); group != "large" || !same(got, want) || got < bound {
			t.Errorf("Trino's resourceEstimates.cpuTime %gs, Prestroid's CPU_TIME %gs (group %s, bound %gs)", got, want, group, bound)
		}
	})
	for _, c := range []struct{ name, sql, errorName string }{
		{"an unknown table", "SELECT * FROM tpch.tiny.no_such_table", "TABLE_NOT_FOUND"}, // the EXPLAIN fails
		{"a syntax error", "SELEC 1", "SYNTAX_ERROR"},                                    // not a statement to estimate
	} {
		t.Run(c.name+" fails open: the gateway's default group, Trino's own error", func(t *testing.T) {
			// With propagateErrors the gateway would answer 400 with
			// whatever /v1/routing put in errors; failing open leaves
			// errors empty.
			marker := "gw_" + strings.ReplaceAll(c.name, " ", "_") + "_" + run
			_, err := e2e.OpenDB(t, gw.base, "").Exec(c.sql + " /* " + marker + " */")
			var te *trino.ErrTrino
			if !errors.As(err, &te) || te.ErrorName != c.errorName {
				t.Fatalf("want Trino's %s, got %v", c.errorName, err)
			}
			if n := len(queryOn(t, large, marker)); n != 1 {
				t.Errorf("the default group's cluster saw it %d times", n)
			}
		})
	}
	t.Run("the gateway's /v1/info still answers (it asks /v1/routing about it too)", func(t *testing.T) {
		resp, err := http.Get(gw.base + "/v1/info")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), `"nodeVersion"`) {
			t.Errorf("%s: %s", resp.Status, b)
		}
	})
	t.Logf("test body done %s after it began", time.Since(begin).Round(time.Second))
}
