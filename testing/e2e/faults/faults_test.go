// Package faults tests what the proxy does when the environment fails: a
// Trino killed (-9) while a large result streams, the proxy itself
// restarted mid-query, a cluster that accepts connections and never
// answers, an estimate given up on. Each test is bounded in time; the
// figures they log are in RELIABILITY.md ("Faults"). See package e2e.
package faults

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/testnet"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestKillTrinoWhileAResultStreams: kill -9 of the only cluster while the
// Go client streams lineitem through the proxy: the client gets a
// well-formed Trino error at once (not minutes of retried 503s), a raw
// poll of the dead query gets a failed QueryResults for that query, and
// once Trino is back the proxy serves the next query.
func TestKillTrinoWhileAResultStreams(t *testing.T) {
	t.Parallel()
	e2e.TrinoURL(t)
	trino := e2e.StartKillable(t, "killed")
	base, _ := e2e.StartProxy(t, proxy.Options{
		Clusters:        []proxy.ClusterConfig{{Name: "default", URL: trino.URL}},
		MonitorInterval: time.Second,
	})
	db := e2e.OpenDB(t, base, "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// A raw query too, left in mid-stream, to look at the answer's fields.
	resp, raw := e2e.Do(t, "POST", base+"/v1/statement", "SELECT * FROM tpch.sf1.orders", nil)
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %s", resp.Status)
	}
	for len(raw.Data) == 0 && raw.NextURI != "" {
		_, raw = e2e.Do(t, "GET", raw.NextURI, "", nil)
	}

	rows, err := db.QueryContext(ctx, "SELECT * FROM tpch.sf1.lineitem")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for n < 20000 && rows.Next() {
		n++
	}
	if n < 20000 {
		t.Fatalf("only %d rows before the kill: %v", n, rows.Err())
	}
	trino.Kill9(t)
	killed := time.Now()
	for rows.Next() {
		n++
	}
	err = rows.Err()
	took := time.Since(killed)
	rows.Close()
	t.Logf("Go client: %d rows, then after the kill -9: %v (%s)", n, err, took.Round(time.Millisecond))
	t.Run("the streaming client gets a Trino error at once", func(t *testing.T) {
		if err == nil || !strings.Contains(err.Error(), "PRESTROID_UPSTREAM_ERROR") && !strings.Contains(err.Error(), "the query is lost") {
			t.Fatalf("error %v, want the proxy's Trino error", err)
		}
		if took > 15*time.Second {
			t.Errorf("the error came %s after the kill", took)
		}
	})
	t.Run("a poll of the dead query is a failed QueryResults for it", func(t *testing.T) {
		start := time.Now()
		resp, p := e2e.Do(t, "GET", raw.NextURI, "", nil)
		// The page after the one the client holds may have been read
		// ahead (page_read_ahead_bytes) before the kill: it is served, rows
		// Trino made, and the poll after it fails. No more than that one.
		if resp.StatusCode == 200 && p.Error == nil && p.NextURI != "" && len(p.Data) > 0 {
			t.Logf("one page read ahead before the kill served (%d bytes of rows)", len(p.Data))
			resp, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		}
		if resp.StatusCode != 200 || p.Error == nil || p.Error.ErrorName != "PRESTROID_UPSTREAM_ERROR" || p.NextURI != "" || p.Stats.State != "FAILED" {
			t.Fatalf("HTTP %d, state %s, error %+v, next %q", resp.StatusCode, p.Stats.State, p.Error, p.NextURI)
		}
		if p.ID != raw.ID {
			t.Errorf("the error names query %s, want %s", p.ID, raw.ID)
		}
		t.Logf("raw poll after the kill: %s in %s", p.Error.ErrorName, time.Since(start).Round(time.Millisecond))
	})
	t.Run("the proxy serves the next query once Trino is back", func(t *testing.T) {
		up := trino.Up(t)
		// Its own bound, from when Trino answers again: on a saturated
		// machine the restart alone can outlast the test's first context.
		qctx, qcancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer qcancel()
		start := time.Now()
		var count int
		var err error
		for qctx.Err() == nil {
			if err = db.QueryRowContext(qctx, "SELECT count(*) FROM tpch.tiny.nation").Scan(&count); err == nil {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || count != 25 {
			t.Fatalf("after Trino came back: %d, %v", count, err)
		}
		t.Logf("Trino restarted in %s; first query through the proxy %s later", up.Round(time.Second), time.Since(start).Round(time.Millisecond))
	})
}

// TestProxyRestartMidQuery: the proxy binary is killed (-9) while a query
// streams and started again with the same route secret: the client's next
// poll (retried while the port is closed, as clients retry connection
// errors) continues the query, and the rows are those of the query run
// directly.
func TestProxyRestartMidQuery(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	port := e2e.FreePort(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("r", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--listen", "127.0.0.1:" + port, "--upstream", direct, "--route-secret-file", secret}
	cmd, base := e2e.ServeBinary(t, bin, port, args...)
	const q = "SELECT orderkey, linenumber, partkey FROM tpch.tiny.lineitem"
	get := func(uri string) (e2e.Page, time.Duration) {
		start := time.Now()
		for {
			req, _ := http.NewRequest("GET", uri, nil)
			req.Header.Set("X-Trino-User", "e2e")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				if time.Since(start) > 30*time.Second {
					t.Fatalf("the proxy did not come back: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var p e2e.Page
			if resp.StatusCode != 200 || json.Unmarshal(b, &p) != nil {
				t.Fatalf("HTTP %d: %.300s", resp.StatusCode, b)
			}
			return p, time.Since(start)
		}
	}
	rowsOf := func(p e2e.Page, into *[]string) {
		var rows [][]any
		if len(p.Data) > 0 {
			if err := json.Unmarshal(p.Data, &rows); err != nil {
				t.Fatal(err)
			}
		}
		for _, r := range rows {
			*into = append(*into, fmt.Sprint(r...))
		}
	}
	_, p := e2e.Do(t, "POST", base+"/v1/statement", q, nil)
	var got []string
	for len(got) == 0 && p.NextURI != "" {
		p, _ = get(p.NextURI)
		rowsOf(p, &got)
	}
	if p.NextURI == "" {
		t.Fatal("the query ended before the restart")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed := time.Now()
	e2eServe(t, bin, args)
	down := time.Since(killed)
	for p.NextURI != "" {
		p, _ = get(p.NextURI)
		rowsOf(p, &got)
	}
	if p.Error != nil {
		t.Fatalf("the query failed after the restart: %+v", p.Error)
	}
	var want []string
	_, d := e2e.Do(t, "POST", direct+"/v1/statement", q, nil)
	for d.NextURI != "" {
		_, d = e2e.Do(t, "GET", d.NextURI, "", nil)
		rowsOf(d, &want)
	}
	t.Logf("proxy killed (-9) and restarted with the same route secret: answering again %s after the kill; the query finished with %d rows", down.Round(time.Millisecond), len(got))
	if len(got) != len(want) || len(got) != 60175 {
		t.Fatalf("%d rows through the restarted proxy, %d directly", len(got), len(want))
	}
	if !sameMultiset(got, want) {
		t.Error("the rows differ from the direct run")
	}
}

// e2eServe starts the binary again (the port is the one in args).
func e2eServe(t *testing.T, bin string, args []string) {
	t.Helper()
	e2e.ServeBinary(t, bin, strings.TrimPrefix(args[1], "127.0.0.1:"), args...)
}

func sameMultiset(a, b []string) bool {
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, n := range m {
		if n != 0 {
			return false
		}
	}
	return true
}

// TestHangingClusterTimesOutAndTheOtherServes: the default cluster accepts
// connections and never answers. A query placed before the monitor knows
// it: the EXPLAIN is given up at the estimate budget (fail-open), the
// POST sent there times out at upstream_timeout into a Trino error; the
// monitor marks the cluster down within its probe timeout; from then on
// every query runs on the other cluster.
func TestHangingClusterTimesOutAndTheOtherServes(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	e2e.RequireEnv(t, "PRESTROID_ORT_LIB") // the estimator runs the EXPLAIN
	hang := testnet.Hanging(t)
	port := e2e.FreePort(t)
	dir := t.TempDir()
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
upstream_timeout: 3s
clusters:
  - {name: hang, url: %q}
  - {name: live, url: %q}
routing:
  estimate_timeout: 500ms
  explain: always    # the EXPLAIN on the hot path is what hangs
  monitor_interval: 1s
  planners: [hang]   # the estimator's EXPLAINs go to the hanging cluster too
`, port, hang, direct)
	path := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	_, base := e2e.ServeBinary(t, bin, port, "--config", path)

	t.Run("a query placed on it fails open, then times out into a Trino error", func(t *testing.T) {
		start := time.Now()
		// A statement that reads a table: one without is cheap (placed
		// without an EXPLAIN).
		resp, p := e2e.Do(t, "POST", base+"/v1/statement", "SELECT count(*) FROM tpch.tiny.nation", nil)
		took := time.Since(start)
		t.Logf("first query: %s, %q on %s, %s", resp.Status, resp.Header.Get("X-Prestroid-Decision"), resp.Header.Get("X-Prestroid-Cluster"), took.Round(time.Millisecond))
		if c := resp.Header.Get("X-Prestroid-Cluster"); c != "hang" {
			t.Fatalf("placed on %q %s after start, want hang: the monitor cannot know yet", c, time.Since(started))
		}
		if d := resp.Header.Get("X-Prestroid-Decision"); !strings.HasPrefix(d, "fail-open") {
			t.Errorf("decision %q, want fail-open", d)
		}
		if resp.StatusCode != 200 || p.Error == nil || p.Error.ErrorName != "PRESTROID_UPSTREAM_ERROR" || p.NextURI != "" {
			t.Errorf("HTTP %d, page %+v: want a Trino error", resp.StatusCode, p)
		}
		if took > 8*time.Second {
			t.Errorf("took %s: estimate budget 0.5 s + upstream_timeout 3 s", took)
		}
	})
	t.Run("the monitor marks it down within its probe timeout", func(t *testing.T) {
		for {
			if strings.Contains(scrape(t, base), `prestroid_cluster_healthy{cluster="hang"} 0`) {
				t.Logf("hang marked down %s after the proxy started", time.Since(started).Round(100*time.Millisecond))
				return
			}
			if time.Since(started) > 15*time.Second {
				t.Fatal("the hanging cluster is still counted healthy after 15 s")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("the other cluster serves every query", func(t *testing.T) {
		db := e2e.OpenDB(t, base, "")
		for i := 0; i < 5; i++ {
			start := time.Now()
			var n int
			if err := db.QueryRow("SELECT count(*) FROM tpch.tiny.nation").Scan(&n); err != nil || n != 25 {
				t.Fatalf("query %d: %d, %v", i, n, err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("query %d took %s", i, d)
			}
		}
		resp, _ := e2e.Do(t, "POST", base+"/v1/statement", "SELECT 2", nil)
		if c := resp.Header.Get("X-Prestroid-Cluster"); c != "live" {
			t.Errorf("placed on %q, want live", c)
		}
	})
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestGivenUpExplainIsCancelledOnTrino: when the estimate budget expires,
// the proxy fails open and the EXPLAIN is cancelled on Trino (it would
// otherwise keep planning a statement nobody waits for).
func TestGivenUpExplainIsCancelledOnTrino(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	e2e.RequireEnv(t, "PRESTROID_ORT_LIB")
	port := e2e.FreePort(t)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	cfg := fmt.Sprintf("listen: 127.0.0.1:%s\nclusters: [{name: default, url: %q}]\nrouting: {estimate_timeout: 300ms, explain: always}\n", port, direct)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", path)
	user := fmt.Sprintf("faults_explain_%d", rand.Uint32())
	// 400 joined UNION ALL branches: seconds of analysis and planning.
	parts := make([]string, 400)
	for i := range parts {
		parts[i] = fmt.Sprintf("SELECT count(*) FROM tpch.tiny.nation n JOIN tpch.tiny.region r ON n.regionkey = r.regionkey WHERE n.nationkey > %d", i)
	}
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", strings.Join(parts, " UNION ALL "), map[string]string{"X-Trino-User": user})
	if d := resp.Header.Get("X-Prestroid-Decision"); d != "fail-open: estimate over budget" {
		t.Fatalf("decision %q: the EXPLAIN was not given up on", d)
	}
	if p.NextURI != "" {
		e2e.Do(t, "DELETE", p.NextURI, "", nil) // the query itself is never run
	}
	db := e2e.OpenDB(t, direct, "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state, code sql.NullString
		var ms sql.NullInt64
		err := db.QueryRow("SELECT state, error_code, date_diff('millisecond', created, \"end\") FROM system.runtime.queries WHERE \"user\" = ? AND query LIKE 'EXPLAIN%'", user).Scan(&state, &code, &ms)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		if state.String == "FAILED" || state.String == "FINISHED" {
			t.Logf("the given-up EXPLAIN: %s %s after %d ms on Trino", state.String, code.String, ms.Int64)
			if state.String != "FAILED" || code.String != "USER_CANCELED" {
				t.Errorf("EXPLAIN ended %s %s, want FAILED USER_CANCELED", state.String, code.String)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the EXPLAIN is still %q 30 s later: not cancelled", state.String)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
