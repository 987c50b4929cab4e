// Package routing tests cost-aware routing end to end: two real Trino
// clusters, the real binary with its real model, real clients; and failing
// open when the planning cluster is down or the estimate is late. See
// package e2e.
package routing

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/testing/e2e"
)

// Cost-aware routing end to end: two real Trino clusters ("small", the
// harness's, and "large", started here with a resource-groups file), the
// real binary with its real model, real clients.

// The large cluster runs with resource groups that select on the
// estimate's ranges (resourcegroups_test.go): proof that Trino received and
// used the proxy's header.

const (
	lightSQL = "SELECT count(*) FROM tpch.tiny.nation"
	heavySQL = `SELECT ss_store_sk, count(*), sum(ss_net_paid) FROM tpcds.sf1.store_sales
JOIN tpcds.sf1.date_dim ON ss_sold_date_sk = d_date_sk JOIN tpcds.sf1.item ON ss_item_sk = i_item_sk
WHERE d_year BETWEEN 1998 AND 2002 GROUP BY ss_store_sk`
)

type estimateOut struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	Model      string  `json:"model"`
}

func estimateWithCLI(t *testing.T, bin, server, sql string) estimateOut {
	t.Helper()
	out, err := exec.Command(bin, "estimate", "--server", server, "--user", "e2e", "--json", sql).Output()
	if err != nil {
		t.Fatalf("prestroid estimate: %v\n%s", err, out)
	}
	var e estimateOut
	if err := json.Unmarshal(out, &e); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return e
}

// writeConfig writes a YAML configuration into dir and returns its path.
func writeConfig(t *testing.T, dir, cfg string) string {
	t.Helper()
	path := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestCostRoutingOnTwoRealClusters(t *testing.T) {
	t.Parallel()
	small := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	large, _ := e2e.StartTrinoInstanceEnv(t, "large", "", nil, []string{"TRINO_RESOURCE_GROUPS=" + resourceGroupsJSON(t)})

	light, heavy := estimateWithCLI(t, bin, small, lightSQL), estimateWithCLI(t, bin, small, heavySQL)
	t.Logf("model %s: light %.4gs, heavy %.4gs", light.Model, light.CPUSeconds, heavy.CPUSeconds)
	if !(heavy.CPUSeconds > light.CPUSeconds) {
		t.Fatalf("the model ranks a TPC-DS sf1 join (%.4gs) no higher than a 25-row count (%.4gs)", heavy.CPUSeconds, light.CPUSeconds)
	}
	bound := math.Sqrt(light.CPUSeconds * heavy.CPUSeconds)

	dir := t.TempDir()
	port := e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: small, url: %q, class: small}
  - {name: large, url: %q, class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: %g}
    - {name: large}
  explain: always   # routed by the plan model's numbers, as the bound was computed
  monitor_interval: 1s
  estimate_timeout: 60s
feedback:
  dir: %s
`, port, strings.Repeat("s", 40), small, large, bound, filepath.Join(dir, "feedback"))
	cmd, base := e2e.ServeBinary(t, bin, port, "--config", writeConfig(t, dir, cfg))
	time.Sleep(2 * time.Second) // first health round of both clusters

	run := fmt.Sprintf("%d", rand.Uint32())
	var lastEst string // the X-Prestroid-Estimate of the last placed query
	placed := func(sql string) (cluster, decision string, p e2e.Page) {
		resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("POST: %s", resp.Status)
		}
		lastEst = resp.Header.Get("X-Prestroid-Estimate")
		return resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"), p
	}
	finish := func(p e2e.Page) e2e.Page {
		for p.NextURI != "" {
			_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		}
		return p
	}

	t.Run("a light query goes to the small cluster", func(t *testing.T) {
		marker := "light_" + run
		c, d, p := placed(lightSQL + " /* " + marker + " */")
		if c != "small" || d != "routed: class small" {
			t.Fatalf("placed on %q (%q)", c, d)
		}
		if last := finish(p); last.Stats.State != "FINISHED" {
			t.Fatalf("state %s", last.Stats.State)
		}
		if e2e.SeenByTrino(t, small, marker) != 1 || e2e.SeenByTrino(t, large, marker) != 0 {
			t.Errorf("system.runtime.queries: small %d, large %d", e2e.SeenByTrino(t, small, marker), e2e.SeenByTrino(t, large, marker))
		}
	})
	t.Run("a heavy query goes to the large cluster, whose resource groups use the estimate", func(t *testing.T) {
		marker := "heavy_" + run
		c, d, p := placed(heavySQL + " /* " + marker + " */")
		heavyEst := lastEst
		if c != "large" || d != "routed: class large" {
			t.Fatalf("placed on %q (%q)", c, d)
		}
		if last := finish(p); last.Stats.State != "FINISHED" {
			t.Fatalf("state %s", last.Stats.State)
		}
		if e2e.SeenByTrino(t, large, marker) != 1 || e2e.SeenByTrino(t, small, marker) != 0 {
			t.Errorf("system.runtime.queries: large %d, small %d", e2e.SeenByTrino(t, large, marker), e2e.SeenByTrino(t, small, marker))
		}
		if g := checkResourceGroup(t, large, queryIDOf(t, large, marker), heavyEst); g == "global.other" {
			t.Errorf("resource group %q: Trino did not select on X-Trino-Resource-Estimate", g)
		}
		// Directly (no estimate header) the same cluster puts it elsewhere.
		direct := "heavy_direct_" + run
		finish(e2e.RunRaw(t, large, lightSQL+" /* "+direct+" */"))
		if g := checkResourceGroup(t, large, queryIDOf(t, large, direct), ""); g != "global.other" {
			t.Errorf("unestimated query in resource group %q", g)
		}
	})
	t.Run("each estimate selects the resource group its ranges name", func(t *testing.T) {
		// A second proxy in front of the large cluster alone: every
		// estimated query goes there with its estimate.
		port := e2e.FreePort(t)
		cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: large, url: %q}
routing:
  monitor_interval: 1s
  estimate_timeout: 60s
estimator:
  explain: always
`, port, strings.Repeat("s", 40), large)
		_, only := e2e.ServeBinary(t, bin, port, "--config", writeConfig(t, t.TempDir(), cfg))
		groups := map[string]bool{}
		for i, sql := range []string{lightSQL, "SELECT count(*) FROM tpch.tiny.lineitem",
			"SELECT returnflag, sum(quantity) FROM tpch.sf1.lineitem GROUP BY 1", "SELECT count(*) FROM tpch.sf1.orders"} {
			marker := fmt.Sprintf("rg%d_%s", i, run)
			resp, p := e2e.Do(t, "POST", only+"/v1/statement", sql+" /* "+marker+" */", nil)
			if resp.StatusCode != 200 {
				t.Fatalf("POST: %s", resp.Status)
			}
			est := resp.Header.Get("X-Prestroid-Estimate")
			if est == "" {
				t.Fatalf("%s: not estimated (%s)", sql, resp.Header.Get("X-Prestroid-Decision"))
			}
			if last := finish(p); last.Stats.State != "FINISHED" {
				t.Fatalf("state %s", last.Stats.State)
			}
			groups[checkResourceGroup(t, large, queryIDOf(t, large, marker), est)] = true
		}
		// The estimates span orders of magnitude: the half-decade bands
		// put them in more than one group.
		if len(groups) < 2 {
			t.Errorf("every query in one resource group: %v", groups)
		}
	})
	t.Run("the memory and time ranges select on the header the proxy makes of all three targets", func(t *testing.T) {
		// Whether or not this estimator predicts memory and time yet, the
		// header it sends for an estimate that does (ResourceEstimate) is
		// what Trino parses and selects on: sent directly, as the proxy
		// sends it.
		for i, c := range []struct {
			e    estimate.Estimate
			want string
		}{
			{estimate.Estimate{Estimated: true, CPUSeconds: 0.5, PeakMemory: estimate.Quantity{Median: 3 << 30}}, "global.mem_64mb_up"},
			{estimate.Estimate{Estimated: true, CPUSeconds: 0.5, PeakMemory: estimate.Quantity{Median: 1 << 20}, Elapsed: estimate.Quantity{Median: 90}}, "global.time_10s_up"},
			{estimate.Estimate{Estimated: true, CPUSeconds: 0.5, PeakMemory: estimate.Quantity{Median: 1 << 20}, Elapsed: estimate.Quantity{Median: 2}}, "global.cpu_06"},
		} {
			marker := fmt.Sprintf("rgh%d_%s", i, run)
			h := c.e.ResourceEstimate()
			resp, p := e2e.Do(t, "POST", large+"/v1/statement", lightSQL+" /* "+marker+" */", map[string]string{"X-Trino-Resource-Estimate": h})
			if resp.StatusCode != 200 || p.Error != nil {
				t.Fatalf("%s: %s %+v", h, resp.Status, p.Error)
			}
			finish(p)
			if g := checkResourceGroup(t, large, queryIDOf(t, large, marker), string(c.e.AppendHeader(nil))); g != c.want {
				t.Errorf("X-Trino-Resource-Estimate %q: resource group %q, want %q", h, g, c.want)
			}
		}
	})
	t.Run("a Go client transaction sticks to one cluster", func(t *testing.T) {
		db := e2e.OpenDB(t, base, "")
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		marker := "tx_heavy_" + run
		var n int64
		if err := tx.QueryRow("SELECT count(*) FROM (" + heavySQL + ") /* " + marker + " */").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		// START TRANSACTION is not estimated, so it ran on the default
		// (small) cluster; the heavy statement inside followed it.
		if e2e.SeenByTrino(t, small, marker) != 1 || e2e.SeenByTrino(t, large, marker) != 0 {
			t.Errorf("transaction statement: small %d, large %d", e2e.SeenByTrino(t, small, marker), e2e.SeenByTrino(t, large, marker))
		}
	})
	t.Run("a Go client query gets the same rows as direct", func(t *testing.T) {
		want, err := e2e.RowsAsStrings(t.Context(), e2e.OpenDB(t, small, ""), lightSQL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e2e.RowsAsStrings(t.Context(), e2e.OpenDB(t, base, ""), lightSQL)
		if err != nil || strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("got %v (%v), want %v", got, err, want)
		}
	})
	t.Run("CREATE TABLE AS through the estimating proxy creates the table once", func(t *testing.T) {
		db := e2e.OpenDB(t, base, "")
		table := "memory.default.ctas_" + run
		if _, err := db.Exec("CREATE TABLE " + table + " AS SELECT nationkey FROM tpch.tiny.nation"); err != nil {
			t.Fatalf("CTAS through the proxy: %v", err)
		}
		var n int
		if err := db.QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 25 {
			t.Errorf("count %d, %v", n, err)
		}
		db.Exec("DROP TABLE " + table)
	})
	t.Run("metrics count the scanned tables the model knows and does not know", func(t *testing.T) {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The heavy query scans store_sales, date_dim and item at sf1; the
		// default model was trained on tpcds sf1 and tiny plans.
		if v := metricValue(string(body), `prestroid_scanned_tables_total{known="true"}`); v < 3 {
			t.Errorf("known scanned tables %v, want ≥ 3:\n%s", v, body)
		}
		if !strings.Contains(string(body), `prestroid_scanned_tables_total{known="false"}`) {
			t.Errorf("no unknown-table series:\n%s", body)
		}
	})
	repeatRuns := 0 // runs of the repeated query, for the feedback log's count
	t.Run("a repeated query is estimated from the cache", func(t *testing.T) {
		// A statement of its own (no other subtest runs it): once a run was
		// estimated (explained and cached; under this machine's load an
		// EXPLAIN may miss the estimate's budget and the run fail open,
		// caching nothing), the next must hit that entry, unless the
		// statement's own history (which comes first in the cascade) is
		// confident by then: either way, no EXPLAIN. (A statement sharing
		// the light query's key could hit its entry just before the cache's
		// TTL ran out, and miss it on the next run.)
		sql := "SELECT count(*) FROM tpch.tiny.region /* repeat_" + run + " */"
		estimated := false
		for i := 0; i < 4; i++ {
			resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, nil)
			repeatRuns++
			if last := finish(p); last.Stats.State != "FINISHED" {
				t.Fatalf("run %d: state %s", i, last.Stats.State)
			}
			st := resp.Header.Get("Server-Timing")
			if estimated {
				if !strings.Contains(st, "estimate-cache;desc=hit") && !strings.Contains(st, "estimate;desc=history") {
					t.Errorf("run %d: Server-Timing %q, want an estimate-cache hit or the statement's history", i, st)
				}
				return
			}
			estimated = resp.Header.Get("X-Prestroid-Cpu-Estimate") != ""
			t.Logf("run %d: Server-Timing %q, estimated %v", i, st, estimated)
		}
		t.Fatal("no run of the statement was estimated")
	})
	t.Run("the feedback log records completed queries with estimate, plan and actual CPU", func(t *testing.T) {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		files, _ := filepath.Glob(filepath.Join(dir, "feedback", "feedback-*.jsonl.gz"))
		if len(files) == 0 {
			t.Fatal("no feedback file")
		}
		recs, err := collector.ReadAll(files...)
		if err != nil {
			t.Fatal(err)
		}
		var heavy *collector.Record
		for _, r := range recs {
			if strings.Contains(r.SQL, "/* heavy_"+run+" */") { // not tx_heavy_
				heavy = r
			}
		}
		if heavy == nil {
			t.Fatalf("feedback log lacks the heavy query (%d records)", len(recs))
		}
		if heavy.Stats == nil || heavy.Stats.CPUMillis <= 0 || heavy.Estimate == nil || heavy.Estimate.CPUMillis <= 0 {
			t.Fatalf("heavy query record without CPU time or estimate: %+v", heavy)
		}
		if heavy.Plan == nil || len(heavy.Plan.JSON) == 0 {
			t.Fatal("heavy query record without its plan")
		}
		p, err := plan.Parse(heavy.Plan.JSON)
		if err != nil {
			t.Fatalf("recorded plan: %v", err)
		}
		if st := featurize.Stats(mustOTP(t, p)); len(st.Tables) != 3 {
			t.Errorf("recorded plan scans %v, want 3 tables", st.Tables)
		}
		// The repeated query: the estimate-cache hit has its plan too (from
		// the plan cache). An estimate from the statement's history (no
		// EXPLAIN) has it only while the plan cache still holds it (its TTL
		// may have passed while the heavy queries ran); the statement's
		// earlier records carry it.
		var repeats int
		for _, r := range recs {
			if strings.Contains(r.SQL, "/* repeat_"+run+" */") {
				repeats++
				fromHistory := r.Estimate != nil && r.Estimate.Source == "history"
				if r.Estimate == nil || !fromHistory && (r.Plan == nil || len(r.Plan.JSON) == 0) {
					t.Errorf("repeated query record %d without plan or estimate: %+v", repeats, r.Estimate)
				} else if r.Plan == nil {
					t.Logf("repeated query record %d: from history, the plan cache no longer had its plan", repeats)
				} else if _, err := plan.Parse(r.Plan.JSON); err != nil {
					t.Errorf("repeated query record %d: plan: %v", repeats, err)
				}
			}
		}
		if repeats != repeatRuns {
			t.Errorf("%d feedback records of the repeated query, want %d", repeats, repeatRuns)
		}
	})
}

// TestFailOpen: queries still run, with the real model and a real Trino,
// when the planning (first) cluster is down — whether or not the health
// monitor has noticed yet — and when the estimate misses its time budget.
func TestFailOpen(t *testing.T) {
	t.Parallel()
	live := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	dead := "http://127.0.0.1:" + e2e.FreePort(t) // nothing listens there
	cases := []struct {
		name, monitor, budget string
		wantWhy               []string // substrings of X-Prestroid-Decision
	}{
		// The monitor found the first cluster down: the next one plans and serves.
		{"planning cluster down, monitor knows", "1s", "60s", []string{"routed: class small"}},
		// No monitor: the EXPLAIN on the dead cluster fails, the query fails
		// open to it, its dial fails, and it goes to the other cluster.
		{"planning cluster down, monitor off", "-1s", "60s", []string{"fail-open: estimate failed", "failover: first unreachable"}},
		// EXPLAIN cannot finish within 1 ms.
		{"estimate over budget", "-1s", "1ms", []string{"fail-open: estimate over budget"}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			first := dead
			if tc.budget == "1ms" {
				first = live
			}
			port := e2e.FreePort(t)
			cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: first, url: %q, class: small}
  - {name: second, url: %q, class: small}
routing:
  classes:
    - {name: small}
  explain: always   # the EXPLAIN on the hot path is what fails or runs over
  monitor_interval: %s
  estimate_timeout: %s
`, port, strings.Repeat("f", 40), first, live, tc.monitor, tc.budget)
			_, base := e2e.ServeBinary(t, bin, port, "--config", writeConfig(t, t.TempDir(), cfg))
			if tc.monitor == "1s" {
				time.Sleep(1500 * time.Millisecond)
			}
			marker := fmt.Sprintf("failopen_%d_%d", i, rand.Uint32())
			resp, p := e2e.Do(t, "POST", base+"/v1/statement", lightSQL+" /* "+marker+" */", nil)
			if resp.StatusCode != 200 {
				t.Fatalf("POST: %s", resp.Status)
			}
			why := resp.Header.Get("X-Prestroid-Decision")
			for _, w := range tc.wantWhy {
				if !strings.Contains(why, w) {
					t.Errorf("X-Prestroid-Decision %q lacks %q", why, w)
				}
			}
			wantCluster := "second"
			if first == live {
				wantCluster = "first" // both clusters are the live Trino here
			}
			if c := resp.Header.Get("X-Prestroid-Cluster"); c != wantCluster {
				t.Errorf("X-Prestroid-Cluster %q, want %q", c, wantCluster)
			}
			for p.NextURI != "" {
				_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
			}
			if p.Stats.State != "FINISHED" || p.Error != nil {
				t.Fatalf("state %s, error %v", p.Stats.State, p.Error)
			}
			if n := e2e.SeenByTrino(t, live, marker); n != 1 {
				t.Errorf("Trino ran the query %d times", n)
			}
			if first == dead {
				// Known down now: the next query is planned and served by
				// the live cluster without a detour.
				resp, _ := e2e.Do(t, "POST", base+"/v1/statement", lightSQL, nil)
				if c, why := resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"); c != "second" || why != "routed: class small" {
					t.Errorf("next query on %q (%q)", c, why)
				}
			}
		})
	}
}

// metricValue is series' value in an exposition (e2e.Metrics.Value), or
// -1.
func metricValue(exposition, series string) float64 {
	m, err := e2e.ParseMetrics(strings.NewReader(exposition))
	if err != nil {
		return -1
	}
	if v, ok := m.Value(series); ok {
		return v
	}
	return -1
}

func mustOTP(t *testing.T, p *plan.Plan) *featurize.OTPNode {
	t.Helper()
	root, err := featurize.BuildOTP(p)
	if err != nil {
		t.Fatal(err)
	}
	return root
}
