// Package sharedhistory runs two proxy replicas (the real binary, with its
// real model) sharing admission and the estimate history through one real
// Redis, in front of the suite's real Trino: a statement learned through
// one replica is served through the other from history, with no EXPLAIN
// (counted on Trino in system.runtime.queries); the history survives a
// restart of both replicas; and with Redis down a replica still places the
// statement (EXPLAIN and the model) and says so in /metrics. See package
// e2e.
package sharedhistory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/prestroid/prestroid/testing/redistest"
)

// repeatSQL takes measurable CPU on tiny, so its history has a non-zero
// log CPU; the marker comment makes its EXPLAINs countable.
const repeatSQL = "SELECT orderpriority, count(*), sum(totalprice) FROM tpch.tiny.orders GROUP BY orderpriority /* %s */"

// replica is one running `prestroid serve`.
type replica struct {
	base string
	proc *os.Process
}

// startReplica runs the binary with admission in Redis and nothing said
// of the history's store: it follows admission.redis (and its prefix).
func startReplica(t *testing.T, bin, trino, redisAddr, prefix string) replica {
	t.Helper()
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	port := e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
clusters:
  - {name: live, url: %q, class: small}
routing:
  classes:
    - {name: small}
  explain: always           # the EXPLAIN on the hot path is what the shared history saves
  monitor_interval: 1s
  estimate_timeout: 60s
admission:
  max_queries: 50
  redis: redis://%s/0
  redis_prefix: %q
  replicas: 2
estimator:
  cache_ttl: -1s            # no estimate cache: only the history may skip an EXPLAIN
  history:
    min_count: 2
    max_spread: 1.5         # tiny's CPU times vary run to run; the mechanism is under test
    redis_timeout: 1s       # the default 50ms read bound is about production, not a test host at load 20
`, port, strings.Repeat("h", 40), trino, redisAddr, prefix)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := e2e.ServeBinary(t, bin, port, "--config", path)
	return replica{base: base, proc: cmd.Process}
}

// stop ends a replica as an operator would (SIGTERM) and waits for it.
func (r replica) stop(t *testing.T) {
	t.Helper()
	if err := r.proc.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.proc.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the proxy did not stop within 20s of SIGTERM")
	}
}

// estimate drives sql to its end through r and returns the
// X-Prestroid-Estimate header of its POST (where the decision is made),
// logging its Server-Timing.
func (r replica) estimate(t *testing.T, sql string) string {
	t.Helper()
	resp, p := e2e.Do(t, "POST", r.base+"/v1/statement", sql, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	est := resp.Header.Get("X-Prestroid-Estimate")
	t.Logf("%s: %s; Server-Timing %s", r.base, est, resp.Header.Get("Server-Timing"))
	for p.NextURI != "" {
		next := p.NextURI
		if resp, p = e2e.Do(t, "GET", next, "", nil); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", next, resp.Status)
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		t.Fatalf("%s: state %s, error %+v", sql, p.Stats.State, p.Error)
	}
	return est
}

// metric reads series (e2e.Metrics.Value) from r's /metrics; -1 when
// absent.
func (r replica) metric(t *testing.T, series string) float64 {
	t.Helper()
	if v, ok := e2e.Metric(t, r.base, series); ok {
		return v
	}
	return -1
}

// waitMetric waits until r's metric reaches at least n (the history's
// writes are asynchronous).
func (r replica) waitMetric(t *testing.T, name string, n float64) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for r.metric(t, name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s = %g after 15s; want at least %g", name, r.metric(t, name), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRecorded waits until the statement's record in Redis (Prefix+"h:"+
// its exact history key, estimator/history.Redis) counts n runs: the
// history is written asynchronously after the query's last page.
func waitRecorded(t *testing.T, addr, prefix, sql string, n uint64) {
	t.Helper()
	exact, _ := estimator.HistoryKeys(sql, http.Header{})
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var s history.Stats
	deadline := time.Now().Add(15 * time.Second)
	for {
		v, err := c.Get(context.Background(), prefix+"h:"+exact).Bytes()
		if err == nil && s.UnmarshalBinary(v) == nil && s.Count >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the statement's record in Redis: %+v (%v) after 15s; want %d runs", s, err, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// explainsOnTrino counts the EXPLAINs of statements carrying marker that
// Trino ran (the proxy's EXPLAIN text starts with its prefix; the counting
// query itself does not).
func explainsOnTrino(t *testing.T, trino, marker string) int {
	t.Helper()
	var n int
	err := e2e.OpenDB(t, trino, "").QueryRow("SELECT count(*) FROM system.runtime.queries WHERE query LIKE 'EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)%' AND strpos(query, ?) > 0", marker).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestReplicasShareTheHistoryThroughRedis(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	rs := redistest.Start(t)
	run := fmt.Sprintf("%016x", rand.Uint64())
	prefix := "sh" + run + ":"
	a, b := startReplica(t, bin, trino, rs.Addr, prefix), startReplica(t, bin, trino, rs.Addr, prefix)
	m := "sharedhistory-" + run
	sql := fmt.Sprintf(repeatSQL, m)

	// Runs 1 and 2 through A: explained (no history, then one run: below
	// min_count), and learned into Redis.
	for i := 1; i <= 2; i++ {
		if est := a.estimate(t, sql); strings.HasPrefix(est, "history") {
			t.Fatalf("run %d through A: X-Prestroid-Estimate %q; want a model estimate", i, est)
		}
		waitRecorded(t, rs.Addr, prefix, sql, uint64(i))
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("Trino ran %d EXPLAINs of the first two runs; want 2", n)
	}
	// Run 3 through B, which never saw the statement: from the shared
	// history, no EXPLAIN.
	if est := b.estimate(t, sql); !strings.HasPrefix(est, "history; cpu=") {
		t.Fatalf("run 3 through B: X-Prestroid-Estimate %q; want history (learned through A)", est)
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("Trino ran %d EXPLAINs after B served the statement; want still 2", n)
	}
	if got := b.metric(t, `prestroid_estimates_total{source="history"}`); got != 1 {
		t.Errorf("B's prestroid_estimates_total{source=\"history\"} = %g, want 1", got)
	}
	b.waitMetric(t, "prestroid_history_observed_total", 1)
	entries := a.metric(t, "prestroid_history_entries")
	if got := b.metric(t, "prestroid_history_entries"); got != entries || entries < 3 {
		t.Errorf("history entries: A sees %g, B %g; want one shared count of at least 3 (statement, shape, calibrations)", entries, got)
	}

	// Both replicas restart: Redis keeps the history.
	a.stop(t)
	b.stop(t)
	a, b = startReplica(t, bin, trino, rs.Addr, prefix), startReplica(t, bin, trino, rs.Addr, prefix)
	for _, r := range []replica{a, b} {
		if est := r.estimate(t, sql); !strings.HasPrefix(est, "history; cpu=") {
			t.Fatalf("after restarting both replicas: X-Prestroid-Estimate %q from %s; want history", est, r.base)
		}
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("after restarting both replicas Trino ran %d EXPLAINs of the statement; want still 2", n)
	}
	a.waitMetric(t, "prestroid_history_observed_total", 1)
	if v := a.metric(t, "prestroid_history_store_down"); v != 0 {
		t.Fatalf("prestroid_history_store_down = %g with Redis up", v)
	}

	// Redis goes away: the history misses, the statement is explained and
	// placed by the model, the observation is dropped and counted.
	rs.Stop()
	if est := a.estimate(t, sql); strings.HasPrefix(est, "history") || !strings.Contains(est, "cpu=") {
		t.Fatalf("with Redis down: X-Prestroid-Estimate %q; want the model's estimate", est)
	}
	if n := explainsOnTrino(t, trino, m); n != 3 {
		t.Fatalf("with Redis down Trino ran %d EXPLAINs of the statement; want 3 (one more)", n)
	}
	a.waitMetric(t, "prestroid_history_store_dropped_total", 1)
	if v := a.metric(t, "prestroid_history_store_down"); v != 1 || a.metric(t, "prestroid_history_store_errors_total") < 1 {
		t.Fatalf("with Redis down: prestroid_history_store_down %g, errors %g; want 1 and some", v, a.metric(t, "prestroid_history_store_errors_total"))
	}
}

// TestAQueryFinishedThroughAnotherReplicaTeachesTheHistory: behind a load
// balancer a client's polls go to any replica. A statement posted to A
// and polled to its end through B is still learned: A leaves what its
// estimate was based on in Redis, B takes it at the last page and
// observes the run. Without the handoff B has nothing tracked for the
// query and the shared history never sees the run.
func TestAQueryFinishedThroughAnotherReplicaTeachesTheHistory(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	rs := redistest.Start(t)
	run := fmt.Sprintf("%016x", rand.Uint64())
	prefix := "ho" + run + ":"
	a, b := startReplica(t, bin, trino, rs.Addr, prefix), startReplica(t, bin, trino, rs.Addr, prefix)
	sql := fmt.Sprintf(repeatSQL, "handoff-"+run)

	for i := 1; i <= 2; i++ {
		resp, p := e2e.Do(t, "POST", a.base+"/v1/statement", sql, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("POST through A: %s", resp.Status)
		}
		if est := resp.Header.Get("X-Prestroid-Estimate"); !strings.Contains(est, "cpu=") {
			t.Fatalf("run %d through A: X-Prestroid-Estimate %q; want an estimate", i, est)
		}
		if !strings.HasPrefix(p.NextURI, a.base+"/") {
			t.Fatalf("run %d: the first page's nextUri %q is not A's (%s)", i, p.NextURI, a.base)
		}
		polls := 0
		for p.NextURI != "" {
			u, err := url.Parse(p.NextURI)
			if err != nil {
				t.Fatal(err)
			}
			u.Host = strings.TrimPrefix(b.base, "http://") // the balancer sends every poll to B
			if resp, p = e2e.Do(t, "GET", u.String(), "", nil); resp.StatusCode != 200 {
				t.Fatalf("GET %s through B: %s", u, resp.Status)
			}
			polls++
		}
		if p.Error != nil || p.Stats.State != "FINISHED" || polls == 0 {
			t.Fatalf("run %d: state %s, error %+v, %d polls through B", i, p.Stats.State, p.Error, polls)
		}
		// The run is in the shared history, learned by B from what A left.
		waitRecorded(t, rs.Addr, prefix, sql, uint64(i))
	}
	b.waitMetric(t, "prestroid_history_observed_total", 2)
	if got := a.metric(t, "prestroid_history_observed_total"); got != 0 {
		t.Errorf("A observed %g runs; want 0 (it never saw a last page)", got)
	}
	if left, taken := a.metric(t, `prestroid_history_handoffs_total{result="left"}`), b.metric(t, `prestroid_history_handoffs_total{result="taken"}`); left != 2 || taken != 2 {
		t.Errorf("handoffs: A left %g, B took %g; want 2 and 2", left, taken)
	}
	// Nothing is left behind in Redis for these queries.
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	if keys, err := c.Keys(context.Background(), prefix+"q:*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("handoff records left in Redis: %v (%v); want none once each query's last page was seen", keys, err)
	}
	// The third run, through B, is served from the history the two runs
	// built, as the shared-history test's third run.
	if est := b.estimate(t, sql); !strings.HasPrefix(est, "history; cpu=") {
		t.Fatalf("run 3 through B: X-Prestroid-Estimate %q; want history", est)
	}
}
