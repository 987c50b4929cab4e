package cascade

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// memElapsed reads the peak memory and elapsed medians of an
// X-Prestroid-Estimate header (0 when absent).
var memElapsed = regexp.MustCompile(`; mem=([0-9.e+]+)|; elapsed=([0-9.e+-]+)`)

// The history keeps a value per target: two runs of a statement through
// the real proxy on the real Trino teach its peak memory and elapsed time
// (the final page's peakMemoryBytes and elapsedTimeMillis) beside its CPU
// time, and the history stage then serves all three, no EXPLAIN.
func TestHistoryServesPeakMemoryAndElapsed(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	_, base := serve(t, bin, trino, filepath.Join(t.TempDir(), "history.db"), 10000)
	m := marker()
	sql := fmt.Sprintf(repeatSQL, m)
	for i := 1; i <= 2; i++ {
		run(t, base, sql)
		waitObserved(t, base, float64(i))
	}
	est, _ := run(t, base, sql)
	t.Logf("third run: %s", est)
	var mem, elapsed float64
	for _, g := range memElapsed.FindAllStringSubmatch(est, -1) {
		if g[1] != "" {
			mem, _ = strconv.ParseFloat(g[1], 64)
		} else {
			elapsed, _ = strconv.ParseFloat(g[2], 64)
		}
	}
	// tiny's orders grouped: a few kB of user memory, tens of ms.
	if !strings.HasPrefix(est, "history;") || !(mem >= 100) || !(elapsed > 0 && elapsed < 60) {
		t.Fatalf("X-Prestroid-Estimate %q (memory %g B, elapsed %g s); want the history with what Trino reported of both", est, mem, elapsed)
	}
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Fatalf("Trino ran %d EXPLAINs; want the first two runs' alone", n)
	}
}

// estimator.decision_bounds against the real binary, its real text model
// and the real Trino: with a peak memory bound, a statement the text
// stage would place by its CPU time alone is explained on the hot path
// when its pre-plan estimate predicts no memory; once a statement of its
// shape ran, the shape's history knows the memory (far below the bound)
// and another statement of that shape is placed before the plan.
func TestDecisionBoundsExplainATargetThePrePlanStageCannotPlace(t *testing.T) {
	t.Parallel()
	trino, base := serveEstimator(t, "    - {name: small, max_cpu_seconds: 100}\n    - {name: large}\n", `  explain: when-uncertain
  decision_bounds:
    peak_memory: [4GB]
  cache_ttl: -1s
`)
	m := marker()
	// A table no other test of this package reads: the text model (which
	// reads table sizes) defers its first statement to the plan until its
	// size is known.
	postHeaders(t, base, "SELECT count(*) FROM tpch.tiny.part /* "+m+" first */")
	deadline := time.Now().Add(60 * time.Second)
	for statsOnTrino(t, trino, `"tpch"."tiny"."part"`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("Trino ran no SHOW STATS FOR tpch.tiny.part within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	waitObserved(t, base, 1)

	const shape = "SELECT brand, count(*) FROM tpch.tiny.part WHERE size > %d GROUP BY brand /* %s */"
	h := postHeaders(t, base, fmt.Sprintf(shape, 10, m))
	est, st := h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing")
	t.Logf("a new shape: %s; Server-Timing %s", est, st)
	switch {
	case strings.HasPrefix(est, "text;") && strings.Contains(est, "; mem="):
		// A text model that predicts the peak memory may place it: far
		// below 4 GiB.
	case strings.HasPrefix(est, "model") && strings.Contains(st, "explain;dur="):
		// A text model that predicts none: the bound makes it uncertain.
	default:
		t.Fatalf("a new shape under a memory bound: X-Prestroid-Estimate %q, Server-Timing %q; want a text estimate with its memory, or the plan", est, st)
	}
	waitObserved(t, base, 2)
	h = postHeaders(t, base, fmt.Sprintf(shape, 20, m))
	est, st = h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing")
	t.Logf("its shape ran: %s; Server-Timing %s", est, st)
	if !(strings.HasPrefix(est, "history;") || strings.HasPrefix(est, "text;")) || !strings.Contains(est, "; mem=") || strings.Contains(st, "explain;dur=") {
		t.Fatalf("other literals of a shape that ran: X-Prestroid-Estimate %q, Server-Timing %q; want a pre-plan estimate with its memory, no EXPLAIN on the hot path", est, st)
	}
}
