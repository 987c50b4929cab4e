package cascade

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/testing/e2e"
)

// The text stage (estimator.explain: when-uncertain) against the real
// binary, its real text model and the real Trino: a statement whose text
// interval lies inside one class is routed with no EXPLAIN on the hot
// path; its EXPLAIN still runs on Trino shortly after (in the background),
// and the query's feedback record carries the model's number and the plan.
func TestTextStageRoutesWithoutExplainAndLearnsInBackground(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	dir := t.TempDir()
	// A tiny aggregate takes tens of milliseconds: its text interval lies
	// far inside the small class (up to 100 s).
	cfg := fmt.Sprintf(`clusters:
  - {name: live, url: %q, class: small}
  - {name: live-large, url: %q, class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: 100}
    - {name: large}
  explain: when-uncertain
  monitor_interval: 1s
  estimate_timeout: 60s
estimator:
  cache_ttl: -1s
  history:
    path: %q
feedback:
  dir: %q
`, trino, trino, filepath.Join(dir, "history.db"), filepath.Join(dir, "feedback"))
	cmd, base := e2e.ServeConfig(t, bin, cfg)
	m := marker()
	// A table no other test reads, so that its SHOW STATS on Trino is this
	// proxy's.
	sql := "SELECT nationkey, count(*), sum(acctbal) FROM tpch.tiny.supplier GROUP BY nationkey /* " + m + " */"

	// The text model reads the sizes of the tables a statement names: the
	// first statement over tpch.tiny.supplier finds its size unknown and is
	// explained on the hot path (the plan decides), and asks Trino for the
	// table's statistics in the background, as the caller.
	first := postHeaders(t, base, "SELECT count(*) FROM tpch.tiny.supplier /* "+m+" first */")
	if est, st := first.Get("X-Prestroid-Estimate"), first.Get("Server-Timing"); !strings.HasPrefix(est, "model") || !strings.Contains(st, "explain;dur=") {
		t.Fatalf("a statement over a table of unknown size: X-Prestroid-Estimate %q, Server-Timing %q; want the model after a hot-path EXPLAIN", est, st)
	}
	deadline := time.Now().Add(60 * time.Second)
	for statsOnTrino(t, trino, `"tpch"."tiny"."supplier"`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("Trino ran no SHOW STATS FOR tpch.tiny.supplier within 60s; want the table-statistics cache's fetch")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the fetch's answer reaches the cache

	h := postHeaders(t, base, sql)
	est, dec, st := h.Get("X-Prestroid-Estimate"), h.Get("X-Prestroid-Decision"), h.Get("Server-Timing")
	t.Logf("X-Prestroid-Estimate %s; Server-Timing %s", est, st)
	if !strings.HasPrefix(est, "text; cpu=") || !strings.Contains(est, "; hi=") {
		t.Fatalf("X-Prestroid-Estimate %q; want the text stage with an interval", est)
	}
	if dec != "routed: class small" {
		t.Fatalf("decision %q; want routed: class small", dec)
	}
	if !strings.Contains(st, "estimate;desc=text") || strings.Contains(st, "explain;dur=") {
		t.Fatalf("Server-Timing %q; want no EXPLAIN on the hot path", st)
	}
	// The EXPLAIN runs off the hot path: Trino sees it shortly after (the
	// first statement's and this one's).
	deadline = time.Now().Add(60 * time.Second)
	for explainsOnTrino(t, trino, m) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Trino ran %d EXPLAINs of the two statements within 60s; want the first's and the background one", explainsOnTrino(t, trino, m))
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitObserved(t, base, 2)
	if got := metric(t, base, `prestroid_estimates_total{source="text"}`); got != 1 {
		t.Errorf(`prestroid_estimates_total{source="text"} = %g, want 1`, got)
	}
	if got := metric(t, base, `prestroid_background_explains_total{result="done"}`); got != 1 {
		t.Errorf(`prestroid_background_explains_total{result="done"} = %g, want 1`, got)
	}
	if v, _ := e2e.Metric(t, base, "prestroid_explains_total"); v != 1 {
		t.Errorf("prestroid_explains_total = %g; want 1 (the first statement's; none for the one the text stage answered)", v)
	}

	// SIGTERM flushes the feedback log: the query's record has the model's
	// number and the plan from the background EXPLAIN.
	stop(t, cmd.Process)
	files, _ := filepath.Glob(filepath.Join(dir, "feedback", "*.jsonl.gz"))
	recs, err := collector.ReadAll(files...)
	if err != nil {
		t.Fatal(err)
	}
	var found *collector.Record
	for _, r := range recs {
		if strings.Contains(r.SQL, m) {
			found = r
		}
	}
	if found == nil || found.Estimate == nil {
		t.Fatalf("no feedback record with an estimate for the statement among %d records", len(recs))
	}
	e := found.Estimate
	t.Logf("feedback record: source %s, cpu %.3g ms [%.3g, %.3g], model %.3g ms, plan %v", e.Source, e.CPUMillis, e.LoCPUMillis, e.HiCPUMillis, e.ModelCPUMillis, found.Plan != nil)
	if e.Source != "text" || !(e.ModelCPUMillis > 0) || found.Plan == nil || len(found.Plan.JSON) == 0 {
		t.Fatalf("feedback record: source %q, model %g ms, plan %v; want text, the background model's number and plan", e.Source, e.ModelCPUMillis, found.Plan != nil)
	}
}
