package cascade

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

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
