package cascade

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// A statement another user ran a moment ago in the same catalog, schema
// and session is served the estimate (and plan) that user's EXPLAIN made:
// Trino runs no second EXPLAIN, hot or background, and the counters say
// so (prestroid_explains_total leaves out the cache hit;
// prestroid_explains_by_reason_total counts one hot EXPLAIN). Another
// schema is another plan: explained.
func TestRepeatByAnotherUserRunsNoExplain(t *testing.T) {
	t.Parallel()
	trino, base := serveEstimator(t, oneClass, "  explain: always           # every statement the history cannot answer is explained on the hot path\n")
	m := marker()
	sql := "SELECT custkey, count(*) FROM orders WHERE orderstatus = 'F' GROUP BY custkey /* " + m + " */"
	session := func(user, schema string) map[string]string {
		return map[string]string{"X-Trino-User": user, "X-Trino-Catalog": "tpch", "X-Trino-Schema": schema}
	}

	h := postAs(t, base, sql, session("alice", "tiny"))
	if st := h.Get("Server-Timing"); !strings.Contains(st, "explain;dur=") {
		t.Fatalf("alice: Server-Timing %q; want her EXPLAIN on the hot path", st)
	}
	if n := explainsOnTrino(t, trino, m); n != 1 {
		t.Fatalf("Trino ran %d EXPLAINs of alice's statement, want 1", n)
	}
	h = postAs(t, base, sql, session("bob", "tiny"))
	est, st := h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing")
	t.Logf("bob's repeat: X-Prestroid-Estimate %s; Server-Timing %s", est, st)
	if !strings.HasPrefix(est, "model") || strings.Contains(st, "explain;dur=") {
		t.Errorf("bob's repeat: X-Prestroid-Estimate %q, Server-Timing %q; want alice's model estimate without an EXPLAIN", est, st)
	}
	if n := explainsOnTrino(t, trino, m); n != 1 {
		t.Errorf("Trino ran %d EXPLAINs after bob's repeat, want alice's 1", n)
	}
	if v := metric(t, base, "prestroid_explains_total"); v != 1 {
		t.Errorf("prestroid_explains_total = %g, want 1 (bob's cache hit ran none)", v)
	}
	if v := metric(t, base, `prestroid_explains_by_reason_total{reason="hot"}`); v != 1 {
		t.Errorf(`prestroid_explains_by_reason_total{reason="hot"} = %g, want 1`, v)
	}
	postAs(t, base, sql, session("bob", "sf1"))
	if n := explainsOnTrino(t, trino, m); n != 2 {
		t.Errorf("Trino ran %d EXPLAINs after the statement on another schema, want 2", n)
	}
}

// The same in the background: under estimator.explain: never the text
// stage answers alice's statement and its EXPLAIN runs off the hot path,
// filling the estimate cache; bob's repeat is served from it, and Trino
// runs no second EXPLAIN, hot or background.
func TestRepeatByAnotherUserRunsNoBackgroundExplain(t *testing.T) {
	t.Parallel()
	trino, base := serveEstimator(t, oneClass, "  explain: never            # the text stage answers; the EXPLAIN runs in the background\n")
	m := marker()
	sql := "SELECT nationkey, count(*) FROM customer WHERE mktsegment = 'MACHINERY' GROUP BY nationkey /* " + m + " */"
	session := func(user string) map[string]string {
		return map[string]string{"X-Trino-User": user, "X-Trino-Catalog": "tpch", "X-Trino-Schema": "tiny"}
	}
	h := postAs(t, base, sql, session("alice"))
	if est, st := h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing"); !strings.HasPrefix(est, "text") || strings.Contains(st, "explain;dur=") {
		t.Fatalf("alice: X-Prestroid-Estimate %q, Server-Timing %q; want the text stage, no EXPLAIN on the hot path", est, st)
	}
	deadline := time.Now().Add(60 * time.Second)
	for metric(t, base, `prestroid_background_explains_total{result="done"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("alice's background EXPLAIN did not finish within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // the estimate reaches the cache (ristretto sets asynchronously)
	h = postAs(t, base, sql, session("bob"))
	t.Logf("bob's repeat: X-Prestroid-Estimate %s; Server-Timing %s", h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing"))
	if st := h.Get("Server-Timing"); !strings.Contains(st, "estimate-cache;desc=hit") {
		t.Errorf("bob's repeat: Server-Timing %q; want the estimate cache's hit", st)
	}
	time.Sleep(time.Second) // a background EXPLAIN of bob's would have reached Trino
	if n := explainsOnTrino(t, trino, m); n != 1 {
		t.Errorf("Trino ran %d EXPLAINs of alice's statement and bob's repeat, want alice's 1", n)
	}
	if v := metric(t, base, `prestroid_explains_by_reason_total{reason="learn"}`); v != 1 {
		t.Errorf(`prestroid_explains_by_reason_total{reason="learn"} = %g, want 1`, v)
	}
}

// postAs is postHeaders with the request headers h (the user, the
// session) on every request of the query.
func postAs(t *testing.T, base, sql string, h map[string]string) http.Header {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, h)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	hdr := resp.Header
	for p.NextURI != "" {
		next := p.NextURI
		if resp, p = e2e.Do(t, "GET", next, "", h); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", next, resp.Status)
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		t.Fatalf("%s: state %s, error %+v", sql, p.Stats.State, p.Error)
	}
	return hdr
}

// Over estimator.explain_rate a statement is decided without its plan:
// with one token and no refill to speak of, the first new statement is
// explained on the real Trino and the second, another shape, is not: the
// proxy fails open (under explain: always there is no text stage to
// place it), Trino runs it and the client gets its rows, and the
// counters say why.
func TestExplainCeilingDecidesWithoutThePlan(t *testing.T) {
	t.Parallel()
	trino, base := serveEstimator(t, oneClass, `  explain: always
  explain_rate: 0.0001      # one token, the next in ~3 hours
  explain_burst: 1
`)
	session := map[string]string{"X-Trino-User": "alice", "X-Trino-Catalog": "tpch", "X-Trino-Schema": "tiny"}
	m1, m2 := marker(), marker()
	h := postAs(t, base, "SELECT orderpriority, count(*) FROM orders GROUP BY orderpriority /* "+m1+" */", session)
	if st := h.Get("Server-Timing"); !strings.Contains(st, "explain;dur=") {
		t.Fatalf("the first statement: Server-Timing %q; want its EXPLAIN on the hot path", st)
	}
	h = postAs(t, base, "SELECT returnflag, sum(quantity) FROM lineitem GROUP BY returnflag /* "+m2+" */", session)
	t.Logf("over the ceiling: X-Prestroid-Estimate %s; Server-Timing %s", h.Get("X-Prestroid-Estimate"), h.Get("Server-Timing"))
	if st := h.Get("Server-Timing"); strings.Contains(st, "explain;dur=") {
		t.Errorf("over the ceiling: Server-Timing %q; want no EXPLAIN", st)
	}
	if n1, n2 := explainsOnTrino(t, trino, m1), explainsOnTrino(t, trino, m2); n1 != 1 || n2 != 0 {
		t.Errorf("Trino ran %d and %d EXPLAINs of the two statements, want 1 and 0", n1, n2)
	}
	for series, want := range map[string]float64{
		`prestroid_explains_by_reason_total{reason="hot"}`:             1,
		`prestroid_explains_by_reason_total{reason="skipped_ceiling"}`: 1,
		`prestroid_fail_open_total{reason="busy"}`:                     1,
	} {
		if v := metric(t, base, series); v != want {
			t.Errorf("%s = %g, want %g", series, v, want)
		}
	}
}

// oneClass is serveEstimator's routing.classes: one class, unbounded.
const oneClass = "    - {name: small}\n"

// serveEstimator starts the binary in front of the real Trino, one
// cluster of class small, with the routing classes' YAML list items
// classes and the estimator block's lines estimator (indented two
// spaces), a history of its own; it returns Trino's URL and the proxy's.
func serveEstimator(t *testing.T, classes, estimator string) (trino, base string) {
	t.Helper()
	trino = e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	cfg := fmt.Sprintf(`clusters:
  - {name: live, url: %q, class: small}
routing:
  classes:
%s  monitor_interval: 1s
  estimate_timeout: 60s
estimator:
%s  history:
    path: %q
`, trino, classes, estimator, filepath.Join(t.TempDir(), "history.db"))
	_, base = e2e.ServeConfig(t, bin, cfg)
	return trino, base
}
