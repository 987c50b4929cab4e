// Package metrics holds the integration test of GET /metrics: the real
// binary in front of the real Trino, a few queries through it, and the
// exposition checked by promtool (`promtool check metrics`) and for the
// series the README documents.
//
// Environment: PRESTROID_TRINO_URL (the test skips without it),
// PRESTROID_BIN (`go build -o bin/prestroid ./cmd/prestroid`),
// PRESTROID_ORT_LIB (for the model), and PRESTROID_PROMTOOL or promtool on
// PATH (Debian's package `prometheus`, or
// `go install github.com/prometheus/prometheus/cmd/promtool@latest`).
package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

const (
	// estimatedSQL scans enough rows for a CPU time above 0 ms, so its
	// q-error is recorded.
	estimatedSQL = "SELECT orderpriority, count(*), sum(totalprice) FROM tpch.tiny.orders GROUP BY orderpriority"
	notEstimated = "SET SESSION query_max_run_time = '1h'"
	// cheapSQL is cheap by nature: a constant estimate, no EXPLAIN.
	cheapSQL = "SHOW CATALOGS"
	// failingSQL cannot be planned: its EXPLAIN fails, so the proxy fails
	// open, and Trino then fails the query itself.
	failingSQL = "SELECT * FROM tpch.tiny.no_such_table"
)

func TestMetricsPassPromtoolAndHoldTheDocumentedSeries(t *testing.T) {
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	promtool := findPromtool(t)

	// The first cluster is dead and the monitor finds it so at once: the
	// live one plans, estimates and serves, and both are reported.
	port := e2e.FreePort(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: dead, url: "http://127.0.0.1:%s", class: small}
  - {name: live, url: %q, class: small}
routing:
  classes:
    - {name: small}
  explain: always   # EXPLAINs (and a failing one) on the hot path are counted here
  monitor_interval: 1s
  estimate_timeout: 60s
admission:
  max_queries: 100
`, port, strings.Repeat("m", 40), e2e.FreePort(t), trino)
	cfgPath := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", cfgPath)
	time.Sleep(1500 * time.Millisecond) // the first health round

	for _, q := range []struct{ sql, decision, state string }{
		{estimatedSQL, "routed: class small", "FINISHED"},
		{estimatedSQL + " ", "routed: class small", "FINISHED"},
		{notEstimated, "not-estimated: ", "FINISHED"},
		{cheapSQL, "routed: class small", "FINISHED"},
		{failingSQL, "fail-open: estimate failed", "FAILED"},
	} {
		got, state := runQuery(t, base, q.sql)
		if !strings.HasPrefix(got, q.decision) || state != q.state {
			t.Errorf("%s: X-Prestroid-Decision %q, state %s; want %q, %s (PRESTROID_ORT_LIB=%q)",
				q.sql, got, state, q.decision, q.state, os.Getenv("PRESTROID_ORT_LIB"))
		}
	}

	body := get(t, base+"/metrics")
	path := filepath.Join(dir, "metrics.txt")
	os.WriteFile(path, body, 0o600)
	t.Run("promtool finds no problem in the exposition", func(t *testing.T) {
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = bytes.NewReader(body)
		out, err := cmd.CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("%s check metrics: %v\n%s\n(exposition in %s)", promtool, err, out, path)
		}
	})

	samples := parse(t, body)
	for _, c := range []struct {
		name   string
		series string
		labels map[string]string
		ok     func(float64) bool
		want   string
	}{
		{"the fail-open is counted by reason", "prestroid_fail_open_total", map[string]string{"reason": "error"}, eq(1), "1"},
		{"the fail-open decision is counted by kind", "prestroid_decisions_total",
			map[string]string{"kind": "fail-open", "cluster": "live", "class": ""}, eq(1), "1"},
		{"routed decisions are counted by class and cluster", "prestroid_decisions_total",
			map[string]string{"kind": "routed", "cluster": "live", "class": "small"}, eq(3), "3"},
		{"the cheap statement's estimate is counted by source", "prestroid_estimates_total", map[string]string{"source": "cheap"}, eq(1), "1"},
		{"EXPLAINs are counted by planning cluster", "prestroid_explains_total", map[string]string{"cluster": "live"}, between(1, 2), "1 or 2 (the repeat may hit the cache)"},
		{"the history learned from the finished estimated queries", "prestroid_history_observed_total", nil, between(2, 3), "2 or 3"},
		{"the history holds entries", "prestroid_history_entries", nil, gt(0), "> 0"},
		{"nothing was lost on the way to the history", "prestroid_history_dropped_total", nil, eq(0), "0"},
		{"the not-estimated statement is counted", "prestroid_decisions_total", map[string]string{"kind": "not-estimated"}, eq(1), "1"},
		{"estimates are timed", "prestroid_estimate_seconds_count", nil, eq(3), "3"},
		{"estimate latency has a positive sum", "prestroid_estimate_seconds_sum", nil, gt(0), "> 0"},
		{"every estimate is a cache hit or a miss", "prestroid_estimate_cache_total", map[string]string{"result": "miss"}, between(1, 2), "1 or 2"},
		{"finished queries are counted by state and cluster", "prestroid_completed_queries_total",
			map[string]string{"state": "FINISHED", "cluster": "live"}, eq(4), "4"},
		{"a query Trino failed is counted as failed", "prestroid_completed_queries_total",
			map[string]string{"state": "FAILED", "cluster": "live"}, eq(1), "1"},
		{"the q-error of estimated finished queries is observed", "prestroid_qerror_count", nil, between(2, 3), "2 (3 if SHOW CATALOGS took CPU)"},
		{"the q-error is at least 1", "prestroid_qerror_sum", nil, gt(1.99), ">= 2 (two queries, each >= 1)"},
		{"the histogram's +Inf bucket holds every observation", "prestroid_qerror_bucket", map[string]string{"le": "+Inf"}, between(2, 3), "2 or 3"},
		{"the live cluster is healthy", "prestroid_cluster_healthy", map[string]string{"cluster": "live"}, eq(1), "1"},
		{"the dead cluster is reported down", "prestroid_cluster_healthy", map[string]string{"cluster": "dead"}, eq(0), "0"},
		{"cluster load is reported", "prestroid_cluster_queries", map[string]string{"cluster": "live"}, gt(-1), "present"},
		{"the admission queue is empty", "prestroid_queue_length", nil, eq(0), "0"},
		{"nothing is in flight after the last pages", "prestroid_inflight_queries", nil, eq(0), "0"},
		{"scanned tables are counted", "prestroid_scanned_tables_total", map[string]string{"known": "true"}, gt(-1), "present"},
		{"the estimator's estimate cache counts its misses", "prestroid_estimator_cache_misses_total", map[string]string{"cache": "estimate"}, gt(0), "> 0"},
		{"the estimator's predicate-vector cache is exported", "prestroid_estimator_cache_hits_total", map[string]string{"cache": "predicate"}, gt(-1), "present"},
		{"the estimator's plan cache is exported", "prestroid_estimator_cache_evictions_total", map[string]string{"cache": "plan"}, gt(-1), "present"},
		{"no inference waits for a batch once the queries are done", "prestroid_estimator_batch_queue_depth", nil, eq(0), "0"},
		{"the Go runtime collector is on", "go_goroutines", nil, gt(0), "> 0"},
		{"the process collector is on", "process_start_time_seconds", nil, gt(0), "> 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, ok := samples.find(c.series, c.labels)
			if !ok {
				t.Fatalf("no sample %s%v in /metrics (saved in %s)", c.series, c.labels, path)
			}
			if !c.ok(v) {
				t.Errorf("%s%v = %g, want %s", c.series, c.labels, v, c.want)
			}
		})
	}
}

func eq(want float64) func(float64) bool { return func(v float64) bool { return v == want } }
func gt(min float64) func(float64) bool  { return func(v float64) bool { return v > min } }
func between(lo, hi float64) func(float64) bool {
	return func(v float64) bool { return v >= lo && v <= hi }
}

// findPromtool returns $PRESTROID_PROMTOOL, else promtool on PATH; it skips
// the test only when neither is there.
func findPromtool(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PRESTROID_PROMTOOL"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("PRESTROID_PROMTOOL=%s: %v", p, err)
		}
		return p
	}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found and PRESTROID_PROMTOOL not set: apt-get install prometheus, or " +
			"go install github.com/prometheus/prometheus/cmd/promtool@latest and set PRESTROID_PROMTOOL")
	}
	return p
}

func get(t *testing.T, u string) []byte {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s %v", u, resp.Status, err)
	}
	return b
}

// runQuery submits sql as a Trino client would, follows nextUri to the
// last page, and returns the POST's X-Prestroid-Decision and the query's
// final state.
func runQuery(t *testing.T, base, sql string) (string, string) {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, map[string]string{"X-Trino-User": "metrics-test"})
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	decision := resp.Header.Get("X-Prestroid-Decision")
	for p.NextURI != "" {
		next := p.NextURI
		if resp, p = e2e.Do(t, "GET", next, "", map[string]string{"X-Trino-User": "metrics-test"}); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", next, resp.Status)
		}
	}
	if p.Error != nil {
		t.Logf("%s: %s", sql, p.Error.Message)
	}
	return decision, p.Stats.State
}

// sample is one line of the text exposition.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type samples []sample

// find returns the first sample named name whose labels include want.
func (ss samples) find(name string, want map[string]string) (float64, bool) {
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range want {
			if s.labels[k] != v {
				continue next
			}
		}
		return s.value, true
	}
	return 0, false
}

// parse reads the Prometheus text format (the subset promhttp writes:
// no timestamps, label values with \\, \" and \n escapes).
func parse(t *testing.T, body []byte) samples {
	t.Helper()
	var out samples
	for _, line := range strings.Split(string(body), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		i := strings.IndexAny(line, "{ ")
		if i < 0 {
			t.Fatalf("bad line %q", line)
		}
		s.name, line = line[:i], line[i:]
		if line[0] == '{' {
			line = line[1:]
			for line[0] != '}' {
				eq := strings.IndexByte(line, '=')
				if eq < 0 || len(line) < eq+2 || line[eq+1] != '"' {
					t.Fatalf("bad labels in %q", line)
				}
				key := line[:eq]
				line = line[eq+2:]
				var v strings.Builder
				for line[0] != '"' {
					if line[0] == '\\' && len(line) > 1 {
						switch line[1] {
						case 'n':
							v.WriteByte('\n')
						default:
							v.WriteByte(line[1])
						}
						line = line[2:]
						continue
					}
					v.WriteByte(line[0])
					line = line[1:]
				}
				s.labels[key] = v.String()
				line = strings.TrimPrefix(line[1:], ",")
			}
			line = line[1:]
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(line), 64)
		if err != nil {
			t.Fatalf("bad value in %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out
}
