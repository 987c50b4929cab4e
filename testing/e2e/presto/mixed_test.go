package presto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// versionPy asks a server its coordinator's version with the PrestoDB
// Python client: argv[1] is "prestodb", argv[2] the port.
const versionPy = `
import sys
mod = __import__(sys.argv[1])
try:
    conn = mod.dbapi.connect(host="127.0.0.1", port=int(sys.argv[2]), user="e2e-mixed", catalog="tpch", schema="tiny")
    cur = conn.cursor()
    cur.execute("SELECT node_version FROM system.runtime.nodes WHERE coordinator")
    print("version", cur.fetchall()[0][0])
except Exception as e:
    print("error", getattr(e, "error_name", ""), getattr(e, "message", str(e)))
`

// pyVersion runs versionPy with the client of engine against base.
func pyVersion(t *testing.T, py, client, base string) string {
	t.Helper()
	port := base[strings.LastIndexByte(base, ':')+1:]
	out, err := exec.Command(py, "-c", versionPy, client, port).CombinedOutput()
	if err != nil {
		t.Fatalf("%s client: %v\n%s", client, err, out)
	}
	return strings.TrimSpace(string(out))
}

// goVersion runs the same with Trino's Go client (trino-go-client).
func goVersion(t *testing.T, base string) (string, error) {
	t.Helper()
	var v string
	err := e2e.OpenDB(t, base, "").QueryRow("SELECT node_version FROM system.runtime.nodes WHERE coordinator").Scan(&v)
	return v, err
}

// cliVersion runs the same with presto-cli.
func cliVersion(t *testing.T, cli, base string) string {
	t.Helper()
	cmd := exec.Command(java(t), "-jar", cli, "--server", base, "--user", "e2e-mixed", "--output-format", "TSV",
		"--execute", "SELECT node_version FROM system.runtime.nodes WHERE coordinator")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, _ := cmd.Output()
	return strings.TrimSpace(string(out) + "\n" + stderr.String())
}

// TestTrinoAndPrestoInOneProxy: a proxy in front of the real Trino and the
// real PrestoDB sends each client to its own engine's cluster (whatever
// the configuration order); a proxy that has only the other engine's
// cluster refuses the client with a message every client shows.
func TestTrinoAndPrestoInOneProxy(t *testing.T) {
	t.Parallel()
	presto := prestoURL(t)
	trino := e2e.TrinoURL(t)
	py := need(t, "PRESTROID_PYTHON")
	cli := need(t, "PRESTROID_PRESTO_CLI")
	jar := need(t, "PRESTROID_PRESTO_JDBC")
	start := func(cs ...proxy.ClusterConfig) string {
		u, _ := e2e.StartProxy(t, proxy.Options{Clusters: cs, MonitorInterval: time.Second})
		return u
	}
	// Engines detected by the monitor; the Trino cluster first, so that it
	// is the default a PrestoDB client must not be sent to.
	both := start(proxy.ClusterConfig{Name: "trino", URL: trino}, proxy.ClusterConfig{Name: "presto", URL: presto})
	trinoOnly := start(proxy.ClusterConfig{Name: "trino", URL: trino, Engine: "trino"})
	prestoOnly := start(proxy.ClusterConfig{Name: "presto", URL: presto, Engine: "presto"})
	time.Sleep(1500 * time.Millisecond) // the monitor's first round

	t.Run("PrestoDB's Python client and Trino's Go client each reach their own engine", func(t *testing.T) {
		if got := pyVersion(t, py, "prestodb", both); !strings.HasPrefix(got, "version 0.296") {
			t.Errorf("prestodb client: %s", got)
		}
		if got, err := goVersion(t, both); err != nil || !strings.HasPrefix(got, "476") {
			t.Errorf("trino-go-client: %s %v", got, err)
		}
	})
	t.Run("presto-cli reaches PrestoDB", func(t *testing.T) {
		if got := cliVersion(t, cli, both); !strings.HasPrefix(got, "0.296") {
			t.Errorf("presto-cli: %s", got)
		}
	})
	const mismatch = "needs a PrestoDB cluster, and this proxy has none"
	t.Run("a PrestoDB client of a Trino-only proxy is refused, in words each client shows", func(t *testing.T) {
		if got := pyVersion(t, py, "prestodb", trinoOnly); !strings.Contains(got, "PRESTROID_ENGINE_MISMATCH") || !strings.Contains(got, mismatch) {
			t.Errorf("prestodb client: %s", got)
		}
		if got := cliVersion(t, cli, trinoOnly); !strings.Contains(got, mismatch) {
			t.Errorf("presto-cli: %s", got)
		}
		cmd := exec.Command(java(t), "-cp", jar, "JdbcCorpus.java", "jdbc:presto://"+strings.TrimPrefix(trinoOnly, "http://")+"/tpch/tiny", "e2e")
		cmd.Stdin = strings.NewReader("SELECT 1\n")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), mismatch) {
			t.Errorf("presto-jdbc: %v %s", err, out)
		}
	})
	t.Run("a Trino client of a PrestoDB-only proxy is refused", func(t *testing.T) {
		_, err := goVersion(t, prestoOnly)
		if err == nil || !strings.Contains(err.Error(), "a Trino client (X-Trino-* headers) needs a Trino cluster") {
			t.Errorf("trino-go-client: %v", err)
		}
	})
	t.Run("the proxy's metrics name each cluster's engine", func(t *testing.T) {
		resp, err := http.Get(both + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`prestroid_cluster_engine{cluster="presto",engine="presto"} 1`, `prestroid_cluster_engine{cluster="trino",engine="trino"} 1`} {
			if !strings.Contains(b.String(), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

const (
	lightSQL = "SELECT count(*) FROM tpch.tiny.nation"
	heavySQL = "SELECT l.returnflag, count(*), sum(l.extendedprice) FROM tpch.sf1.lineitem l " +
		"JOIN tpch.sf1.orders o ON l.orderkey = o.orderkey GROUP BY l.returnflag"
)

// TestCostRoutingBetweenPrestoClusters: the real binary with its real model
// in front of two PrestoDB clusters of two classes (two entries for the
// harness's one PrestoDB, as the Trino routing tests do) sends a heavy
// sf1 join to the large class and a tiny count to the small one. The
// estimates come from the text model (estimator.explain: never), which
// reads only the statement: this is the proxy's half, independent of how
// the estimator plans on PrestoDB.
func TestCostRoutingBetweenPrestoClusters(t *testing.T) {
	t.Parallel()
	presto := prestoURL(t)
	bin := need(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	// The text model alone (explain: never): the EXPLAIN path on PrestoDB
	// is covered by the estimator's and the served benchmark's tests.
	const explain = "never"
	serve := func(classes string) string {
		dir := t.TempDir()
		port := e2e.FreePort(t)
		cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
clusters:
  - {name: small, url: %q, class: small}
  - {name: large, url: %q, class: large}
routing:
  classes:
%s
  monitor_interval: 1s
  estimate_timeout: 30s
  class_quantile: 0.5   # the point estimate decides: the bound below lies between two of them
estimator:
  explain: %s
  # The probe's and the router's numbers must be the same: no sizes
  # fetched in the background, nothing learned from the light query's
  # completion.
  table_stats: {disabled: true}
  history: {disabled: true}
`, port, presto, presto, classes, explain)
		path := filepath.Join(dir, "prestroid.yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		_, base := e2e.ServeBinary(t, bin, port, "--config", path)
		time.Sleep(1500 * time.Millisecond) // the monitor's first round tells the engine
		return base
	}
	// First the model's two numbers (POST /v1/estimate as a PrestoDB
	// caller), then a bound between them.
	probe := serve("    - {name: small, max_cpu_seconds: 1000000}\n    - {name: large}")
	estimateOf := func(sql string) float64 {
		req, _ := http.NewRequest("POST", probe+"/v1/estimate", strings.NewReader(sql))
		req.Header.Set("X-Presto-User", "e2e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct {
			CPUSeconds float64 `json:"cpu_seconds"`
			Error      string  `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 200 {
			t.Fatalf("estimate %q: %s %v %s", sql, resp.Status, err, e.Error)
		}
		return e.CPUSeconds
	}
	light, heavy := estimateOf(lightSQL), estimateOf(heavySQL)
	t.Logf("explain %s: light %.4gs, heavy %.4gs", explain, light, heavy)
	if !(heavy > light) {
		t.Fatalf("the model ranks an sf1 join (%.4gs) no higher than a 25-row count (%.4gs)", heavy, light)
	}
	base := serve(fmt.Sprintf("    - {name: small, max_cpu_seconds: %g}\n    - {name: large}", math.Sqrt(light*heavy)))
	for _, tc := range []struct{ sql, cluster string }{{lightSQL, "small"}, {heavySQL, "large"}} {
		resp, p := do(t, "POST", base+"/v1/statement", tc.sql, nil)
		if c, d := resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"); c != tc.cluster || d != "routed: class "+tc.cluster {
			t.Errorf("%.40s: cluster %q, decision %q, estimate %q; want %s", tc.sql, c, d, resp.Header.Get("X-Prestroid-Estimate"), tc.cluster)
		}
		if p.NextURI == "" || !strings.Contains(p.NextURI, "/r/"+tc.cluster+".") {
			t.Errorf("nextUri %q not routed to %s", p.NextURI, tc.cluster)
		}
		if tc.cluster == "small" {
			for p.NextURI != "" {
				_, p = do(t, "GET", p.NextURI, "", nil)
			}
			if p.Error != nil || p.Stats.State != "FINISHED" {
				t.Errorf("the light query through the small cluster: %s %+v", p.Stats.State, p.Error)
			}
			continue
		}
		// The heavy query's placement is what counts: cancel it rather
		// than spend PrestoDB's CPU (shared with the other tests). Once
		// polled: PrestoDB answers 500 to a DELETE of a query it has not
		// dispatched yet (it dispatches on the first poll).
		_, p = do(t, "GET", p.NextURI, "", nil)
		if r, _ := do(t, "DELETE", p.NextURI, "", nil); p.NextURI != "" && r.StatusCode != http.StatusNoContent {
			t.Errorf("cancel: %s", r.Status)
		}
	}
}
