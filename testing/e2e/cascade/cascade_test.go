// Package cascade tests the estimate cascade end to end (docs/design.md §5.1): the
// real binary with its real model in front of the harness's real Trino. An
// exact repeat with a confident history is placed without an EXPLAIN, the
// history survives a restart of the proxy, it stays within its bound, and a
// client polling system.runtime.queries never waits for an EXPLAIN. EXPLAINs
// are counted on Trino itself (system.runtime.queries). See package e2e.
package cascade

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// repeatSQL takes measurable CPU on tiny (tens of milliseconds), so its
// history has a non-zero log CPU; the marker comment makes its EXPLAINs
// countable.
const repeatSQL = "SELECT orderpriority, count(*), sum(totalprice) FROM tpch.tiny.orders GROUP BY orderpriority /* %s */"

func marker() string { return fmt.Sprintf("cascade-%016x", rand.Uint64()) }

// serve starts the binary on a fresh port with the cascade settings and
// extra YAML under estimator.history.
func serve(t *testing.T, bin, trino, historyPath string, maxEntries int) (*os.Process, string) {
	t.Helper()
	cfg := fmt.Sprintf(`clusters:
  - {name: live, url: %q, class: small}
routing:
  classes:
    - {name: small}
  explain: always           # the EXPLAIN on the hot path is what the history saves (text_test.go: the text stage)
  monitor_interval: 1s
  estimate_timeout: 60s
estimator:
  cache_ttl: -1s            # no estimate cache: only the history may skip an EXPLAIN
  history:
    path: %q
    max_entries: %d
    min_count: 2
    max_spread: 1.5         # tiny's CPU times vary run to run; the mechanism is under test
`, trino, historyPath, maxEntries)
	cmd, base := e2e.ServeConfig(t, bin, cfg)
	return cmd.Process, base
}

// stop ends the proxy as an operator would (SIGTERM: it flushes the
// history) and waits for it.
func stop(t *testing.T, p *os.Process) {
	t.Helper()
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the proxy did not stop within 20s of SIGTERM")
	}
}

// run drives a statement to its end through the proxy and returns the
// X-Prestroid-Estimate and X-Prestroid-Decision headers of its POST (where
// the decision is made).
func run(t *testing.T, base, sql string) (estimate, decision string) {
	t.Helper()
	h := postHeaders(t, base, sql)
	return h.Get("X-Prestroid-Estimate"), h.Get("X-Prestroid-Decision")
}

// postHeaders returns the response headers of the POST alone (the
// decision is made there) and drives the query to its end.
func postHeaders(t *testing.T, base, sql string) http.Header {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	h := resp.Header
	for p.NextURI != "" {
		next := p.NextURI
		if resp, p = e2e.Do(t, "GET", next, "", nil); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", next, resp.Status)
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		t.Fatalf("%s: state %s, error %+v", sql, p.Stats.State, p.Error)
	}
	return h
}

// statsOnTrino counts the finished SHOW STATS queries of a table (its
// quoted name) that Trino ran (the table-statistics cache's fetches).
func statsOnTrino(t *testing.T, trino, table string) int {
	return queriesOnTrino(t, trino, "query LIKE 'SHOW STATS FOR %' AND state = 'FINISHED'", table)
}

// explainsOnTrino counts the EXPLAINs of statements carrying marker that
// Trino ran (the proxy's EXPLAIN text starts with its prefix; the counting
// query itself does not).
func explainsOnTrino(t *testing.T, trino, marker string) int {
	return queriesOnTrino(t, trino, "query LIKE 'EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)%'", marker)
}

// queriesOnTrino counts the queries of system.runtime.queries that match
// the condition where and whose text contains needle.
func queriesOnTrino(t *testing.T, trino, where, needle string) int {
	t.Helper()
	var n int
	err := e2e.OpenDB(t, trino, "").QueryRow("SELECT count(*) FROM system.runtime.queries WHERE "+where+" AND strpos(query, ?) > 0", needle).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// metric reads series (e2e.Metrics.Value) from the proxy's /metrics; the
// test fails when it is absent.
func metric(t *testing.T, base, series string) float64 {
	t.Helper()
	v, ok := e2e.Metric(t, base, series)
	if !ok {
		t.Fatalf("no %s in /metrics", series)
	}
	return v
}

// waitObserved waits until the proxy's history has learned from n
// completed queries (the write is asynchronous).
func waitObserved(t *testing.T, base string, n float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for metric(t, base, "prestroid_history_observed_total") < n {
		if time.Now().After(deadline) {
			t.Fatalf("the history learned from %g queries within 10s; want %g", metric(t, base, "prestroid_history_observed_total"), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestExactRepeatSkipsExplainAndHistorySurvivesRestart(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	historyPath := filepath.Join(t.TempDir(), "history.db")
	proc, base := serve(t, bin, trino, historyPath, 10000)
	m := marker()
	sql := fmt.Sprintf(repeatSQL, m)

	// Runs 1 and 2: explained (no history, then one run: below min_count).
	for i := 1; i <= 2; i++ {
		h := postHeaders(t, base, sql)
		est, dec := h.Get("X-Prestroid-Estimate"), h.Get("X-Prestroid-Decision")
		if strings.HasPrefix(est, "history") || !strings.HasPrefix(dec, "routed") {
			t.Fatalf("run %d: X-Prestroid-Estimate %q, decision %q; want a model estimate, routed", i, est, dec)
		}
		t.Logf("run %d: %s; Server-Timing %s", i, est, h.Get("Server-Timing"))
		waitObserved(t, base, float64(i))
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("Trino ran %d EXPLAINs of the first two runs; want 2", n)
	}
	// Runs 3 and 4: the same statement (other spacing and case too) from
	// its history, with no EXPLAIN on Trino.
	for i, q := range []string{sql, strings.ToLower(strings.ReplaceAll(sql, " FROM ", "\n  FROM "))} {
		h := postHeaders(t, base, strings.Replace(q, strings.ToLower(m), m, 1))
		est := h.Get("X-Prestroid-Estimate")
		if !strings.HasPrefix(est, "history; cpu=") || !strings.Contains(est, "; lo=") {
			t.Fatalf("run %d: X-Prestroid-Estimate %q; want history with an interval", i+3, est)
		}
		if st := h.Get("Server-Timing"); !strings.Contains(st, "estimate;desc=history") || strings.Contains(st, "explain;dur=") {
			t.Errorf("run %d: Server-Timing %q; want no explain", i+3, st)
		}
		t.Logf("run %d: %s; Server-Timing %s", i+3, est, h.Get("Server-Timing"))
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("Trino ran %d EXPLAINs after two exact repeats with a confident history; want still 2", n)
	}
	if got := metric(t, base, `prestroid_estimates_total{source="history"}`); got != 2 {
		t.Errorf("prestroid_estimates_total{source=\"history\"} = %g, want 2", got)
	}

	// Restart the real binary on the same history file: the first run of
	// the statement is already served from history.
	waitObserved(t, base, 4)
	stop(t, proc)
	_, base2 := serve(t, bin, trino, historyPath, 10000)
	if h := postHeaders(t, base2, sql); !strings.HasPrefix(h.Get("X-Prestroid-Estimate"), "history") {
		t.Fatalf("after a restart: X-Prestroid-Estimate %q; want history", h.Get("X-Prestroid-Estimate"))
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("after a restart, Trino ran %d EXPLAINs of the statement; want still 2", n)
	}
	if v := metric(t, base2, "prestroid_history_entries"); v < 3 {
		t.Errorf("prestroid_history_entries after a restart = %g; want the statement's, its shape's, the calibrations", v)
	}
}

func TestHistoryStaysWithinItsBound(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	const bound = 6
	_, base := serve(t, bin, trino, filepath.Join(t.TempDir(), "history.db"), bound)
	m := marker()
	// Each distinct shape adds three keys (statement, shape, residual): five
	// of them overflow the bound twice over.
	tables := []string{"nation", "region", "supplier", "customer", "part"}
	for i, tb := range tables {
		run(t, base, fmt.Sprintf("SELECT count(*) FROM tpch.tiny.%s /* %s */", tb, m))
		waitObserved(t, base, float64(i+1))
		if v := metric(t, base, "prestroid_history_entries"); v > bound {
			t.Fatalf("after %d statements the history holds %g keys; the bound is %d", i+1, v, bound)
		}
	}
	if v := metric(t, base, "prestroid_history_entries"); v != bound {
		t.Fatalf("the history holds %g keys after overflowing; want the bound %d", v, bound)
	}
}

func TestPollingSystemTablesNeverExplains(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	_, base := serve(t, bin, trino, filepath.Join(t.TempDir(), "history.db"), 1000)
	m := marker()
	// As a client test suite polls for its own running query.
	for i := range 5 {
		h := postHeaders(t, base, fmt.Sprintf("SELECT query_id, state FROM system.runtime.queries WHERE query LIKE '%%%s-%d%%'", m, i))
		if est := h.Get("X-Prestroid-Estimate"); !strings.HasPrefix(est, "cheap; cpu=") {
			t.Fatalf("poll %d: X-Prestroid-Estimate %q; want the cheap constant", i, est)
		}
	}
	for _, q := range []string{"SHOW SCHEMAS FROM tpch /* %s */", "SELECT table_name FROM tpch.information_schema.tables /* %s */", "VALUES (1), (2) /* %s */"} {
		if est := postHeaders(t, base, fmt.Sprintf(q, m)).Get("X-Prestroid-Estimate"); !strings.HasPrefix(est, "cheap") {
			t.Errorf("%s: X-Prestroid-Estimate %q; want cheap", q, est)
		}
	}
	if n := explainsOnTrino(t, trino, m); n != 0 {
		t.Fatalf("Trino ran %d EXPLAINs for statements cheap by nature; want none", n)
	}
	if v, ok := e2e.Metric(t, base, "prestroid_explains_total"); ok {
		t.Fatalf("prestroid_explains_total = %g; want no EXPLAIN counted", v)
	}
	if got := metric(t, base, `prestroid_estimates_total{source="cheap"}`); got != 8 {
		t.Errorf("prestroid_estimates_total{source=\"cheap\"} = %g, want 8", got)
	}
}
