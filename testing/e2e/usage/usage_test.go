// Package usage runs two proxy replicas (the real binary) that share cost
// accounting through a real Redis, in front of the suite's Trino: a
// workload of several users, some queries of real CPU and one that fails
// at run time, goes through both; then /prestroid/api/usage (through
// either replica: summed in Redis) and the prestroid_usage_* metrics
// (summed over both replicas' counters) must agree on each user's actual
// CPU with Trino's own account within 1%.
//
// Trino's own account: Trino 476's system.runtime.queries has no CPU
// column, so each query's CPU is the sum of its tasks' split_cpu_time_ms
// in system.runtime.tasks (the same TaskStats.totalCpuTime the query's
// statistics add up), joined to system.runtime.queries for the user and
// the statement. The estimator's EXPLAINs, which carry the marker too,
// are left out (they are not the user's queries, and the proxy's
// accounting does not see them).
//
// Environment: PRESTROID_TRINO_URL, PRESTROID_BIN; redis-server (package
// redistest). See package e2e.
package usage

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/prestroid/prestroid/testing/redistest"
)

// startReplica runs `prestroid serve` sharing usage through redisAddr,
// with users mapped to groups.
func startReplica(t *testing.T, bin, direct, redisAddr, secret string, groups map[string]string) string {
	t.Helper()
	port := e2e.FreePort(t)
	var ug strings.Builder
	for u, g := range groups {
		fmt.Fprintf(&ug, "    %q: %q\n", u, g)
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: default, url: %q}
routing:
  monitor_interval: -1s
  estimate_timeout: 30s
admission:
  user_groups:
%susage:
  redis: redis://%s/0
  redis_prefix: "usage-e2e:"
`, port, secret, direct, ug.String(), redisAddr)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", path)
	return base
}

// via points a URI a replica handed out at the replica at base (the
// route token in it is good on every replica).
func via(uri, base string) string {
	i := strings.Index(uri, "/r/")
	if i < 0 {
		return uri
	}
	return base + uri[i:]
}

// run sends sql as user through replicas[0] and polls it to its end,
// through the replicas in turn when alternate is set (so that its last
// page may pass through a replica that did not place it), else through
// the first; it returns the final state and the replica the last page
// came through.
func run(t *testing.T, replicas []string, alternate bool, user, source, sql string) (string, int) {
	h := map[string]string{"X-Trino-User": user, "X-Trino-Source": source}
	resp, p := e2e.Do(t, "POST", replicas[0]+"/v1/statement", sql, h)
	if resp.StatusCode != 200 {
		t.Errorf("POST as %s: %s", user, resp.Status)
		return "", 0
	}
	last := 0
	for i := 1; p.NextURI != ""; i++ {
		if alternate {
			last = i % len(replicas)
		}
		if resp, p = e2e.Do(t, "GET", via(p.NextURI, replicas[last]), "", h); resp.StatusCode != 200 {
			t.Errorf("poll as %s: %s", user, resp.Status)
			return "", 0
		}
	}
	return p.Stats.State, last
}

type usageRow struct {
	Key        string  `json:"key"`
	Queries    int64   `json:"queries"`
	Failed     int64   `json:"failed"`
	Predicted  int64   `json:"predicted"`
	CPUSeconds float64 `json:"cpu_seconds"`
	MemoryGBs  float64 `json:"memory_gb_seconds"`
	Elapsed    float64 `json:"elapsed_seconds"`
}

type report struct {
	By     string     `json:"by"`
	Shared bool       `json:"shared"`
	Rows   []usageRow `json:"rows"`
	Totals usageRow   `json:"totals"`
}

func getReport(t *testing.T, base, query string) report {
	t.Helper()
	resp, err := http.Get(base + "/prestroid/api/usage?" + query)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET usage?%s: %s %s", query, resp.Status, b)
	}
	var r report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("usage: %v: %s", err, b)
	}
	return r
}

func (r report) byKey() map[string]usageRow {
	m := map[string]usageRow{}
	for _, row := range r.Rows {
		m[row.Key] = row
	}
	return m
}

// metricCPU sums prestroid_usage_cpu_seconds_total{dimension="user"} of
// base's /metrics by name.
func metricCPU(t *testing.T, base string, into map[string]float64) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams["prestroid_usage_cpu_seconds_total"]
	if f == nil {
		t.Fatalf("%s/metrics has no prestroid_usage_cpu_seconds_total", base)
	}
	for _, m := range f.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["dimension"] == "user" {
			into[labels["name"]] += m.GetCounter().GetValue()
		}
	}
}

// trinoCPU is Trino's own account of each user's CPU seconds over the
// run's statements (the EXPLAINs left out), and their count.
func trinoCPU(t *testing.T, direct, marker string) (map[string]float64, map[string]int) {
	t.Helper()
	rows, err := e2e.OpenDB(t, direct, "").Query(`SELECT q."user", q.query_id, coalesce(sum(k.split_cpu_time_ms), 0)
FROM system.runtime.queries q LEFT JOIN system.runtime.tasks k ON k.query_id = q.query_id
WHERE q.query LIKE '%` + marker + `%' AND q.query NOT LIKE 'EXPLAIN %' AND q.query NOT LIKE '%system.runtime%'
GROUP BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cpu, n := map[string]float64{}, map[string]int{}
	for rows.Next() {
		var user, id string
		var ms int64
		if err := rows.Scan(&user, &id, &ms); err != nil {
			t.Fatal(err)
		}
		cpu[user] += float64(ms) / 1000
		n[user]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cpu, n
}

func within(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(want, 1e-3)
}

func TestUsageAgreesWithTrinoAcrossTwoReplicas(t *testing.T) {
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	rs := redistest.Start(t)
	runID := fmt.Sprintf("%d", rand.Uint32())
	marker := "usage_e2e_" + runID
	users := []string{"ann_" + runID, "ben_" + runID, "cat_" + runID, "dan_" + runID}
	groups := map[string]string{users[0]: "analysts_" + runID, users[1]: "analysts_" + runID, users[2]: "etl_" + runID}
	secret := strings.Repeat("u", 40)
	a := startReplica(t, bin, direct, rs.Addr, secret, groups)
	b := startReplica(t, bin, direct, rs.Addr, secret, groups) // the same secret: either serves any poll
	replicas := []string{a, b}

	// Per user: two small aggregations, one of real CPU (sf1), and for
	// two users a query that fails at run time after spending CPU.
	workload := func(i int) []string {
		qs := []string{
			fmt.Sprintf("SELECT orderpriority, count(*), sum(totalprice) FROM tpch.tiny.orders GROUP BY 1 /* %s %d */", marker, i),
			fmt.Sprintf("SELECT returnflag, linestatus, sum(quantity), avg(discount) FROM tpch.tiny.lineitem GROUP BY 1, 2 /* %s %d */", marker, i),
			fmt.Sprintf("SELECT orderstatus, count(*), sum(totalprice * %d), max(comment) FROM tpch.sf1.orders GROUP BY 1 /* %s */", i+1, marker),
		}
		if i%2 == 1 {
			qs = append(qs, fmt.Sprintf("SELECT sum(1 / (custkey - custkey)) FROM tpch.sf1.orders /* %s %d */", marker, i))
		}
		return qs
	}
	want := map[string]struct{ queries, failed int64 }{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	crossed := 0 // last pages through the replica that did not place the query
	for i, u := range users {
		qs := workload(i)
		want[u] = struct{ queries, failed int64 }{int64(len(qs)), int64(len(qs) - 3)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, q := range qs {
				// Each user through both replicas; every other query
				// polled through both in turn.
				order := []string{replicas[(i+j)%2], replicas[(i+j+1)%2]}
				state, last := run(t, order, j%2 == 0, u, "usage-e2e", q)
				mu.Lock()
				if last != 0 {
					crossed++
				}
				if wantState := map[bool]string{true: "FAILED", false: "FINISHED"}[j == 3]; state != wantState {
					t.Errorf("%s query %d: %s, want %s", u, j, state, wantState)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d of the run's last pages passed through the replica that had not placed the query", crossed)
	if crossed == 0 {
		t.Error("no last page passed through the other replica: the test did not check that path")
	}

	// The replicas write to Redis off the request path: wait for all.
	var total int64
	for _, w := range want {
		total += w.queries
	}
	deadline := time.Now().Add(15 * time.Second)
	var got map[string]usageRow
	for {
		rep := getReport(t, a, "by=user&window=1h&limit=0")
		got = rep.byKey()
		var n int64
		for _, u := range users {
			n += got[u].Queries
		}
		if !rep.Shared {
			t.Fatal("the report is not shared through Redis")
		}
		if n == total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("usage counts %d of the run's %d queries after 15s: %+v", n, total, rep.Rows)
		}
		time.Sleep(200 * time.Millisecond)
	}

	trino, seen := trinoCPU(t, direct, marker)
	fromB := getReport(t, b, "by=user&window=5m&limit=0").byKey()
	metrics := map[string]float64{}
	metricCPU(t, a, metrics)
	metricCPU(t, b, metrics)
	for _, u := range users {
		w, g := want[u], got[u]
		t.Logf("%s: Trino %.3f s over %d statements; API %.3f s (%d queries, %d failed, %d predicted, %.3f GB·s, %.2f s elapsed); metrics %.3f s",
			u, trino[u], seen[u], g.CPUSeconds, g.Queries, g.Failed, g.Predicted, g.MemoryGBs, g.Elapsed, metrics[u])
		if seen[u] != int(w.queries) {
			t.Errorf("%s: Trino saw %d of the run's statements, want %d", u, seen[u], w.queries)
		}
		if g.Queries != w.queries || g.Failed != w.failed {
			t.Errorf("%s: API counts %d queries, %d failed; want %d, %d", u, g.Queries, g.Failed, w.queries, w.failed)
		}
		if trino[u] < 0.5 {
			t.Errorf("%s: Trino reports %.3f s of CPU: the workload is too light to compare", u, trino[u])
		}
		if !within(g.CPUSeconds, trino[u], 0.01) {
			t.Errorf("%s: API says %.3f s of CPU, Trino %.3f s: more than 1%% apart", u, g.CPUSeconds, trino[u])
		}
		if !within(metrics[u], trino[u], 0.01) {
			t.Errorf("%s: the metrics (both replicas) say %.3f s of CPU, Trino %.3f s: more than 1%% apart", u, metrics[u], trino[u])
		}
		if b := fromB[u]; b.Queries != g.Queries || !within(b.CPUSeconds, g.CPUSeconds, 1e-9) {
			t.Errorf("%s: replica B reports %+v, replica A %+v: not the same shared sums", u, b, g)
		}
		if g.MemoryGBs <= 0 || g.Elapsed <= 0 {
			t.Errorf("%s: memory-seconds %.6f, elapsed %.3f: want both positive", u, g.MemoryGBs, g.Elapsed)
		}
	}

	// Groups: ann and ben share one; dan, unmapped, is his own.
	grp := getReport(t, a, "by=group&window=1h&limit=0").byKey()
	an := grp["analysts_"+runID]
	if an.Queries != want[users[0]].queries+want[users[1]].queries ||
		!within(an.CPUSeconds, got[users[0]].CPUSeconds+got[users[1]].CPUSeconds, 1e-6) {
		t.Errorf("group analysts: %+v, want ann's and ben's sums", an)
	}
	if d := grp[users[3]]; d.Queries != want[users[3]].queries {
		t.Errorf("unmapped %s's own group: %+v", users[3], d)
	}
}
