package routing

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/testing/e2e"
)

// memHeavySQL holds every order key of TPC-H sf1's lineitem in a hash
// aggregation: tens of megabytes of peak memory for a few seconds of CPU.
const memHeavySQL = "SELECT count(*) FROM (SELECT orderkey, sum(quantity) FROM tpch.sf1.lineitem GROUP BY orderkey)"

// TestRoutingOnPredictedMemory: a query whose predicted peak memory is
// over the small class's max_peak_memory lands on the large cluster even
// though its CPU fits the small class; over every class's bound it is
// flagged. Two cluster entries name the one harness Trino (small and
// large); the memory prediction comes from the estimator itself (a stage
// that predicts peak memory: the model of a multi-target bundle, or the
// statement's history of its actual peak memory after it ran). Where no
// stage predicts memory yet (no "mem=" in X-Prestroid-Estimate after the
// statement has run), the test skips: the class logic is tested with
// estimates that carry memory in proxy/routing and proxy.
func TestRoutingOnPredictedMemory(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	// small holds any CPU but 4 MB of memory; large 8 MB: the aggregation
	// is over both.
	cfg := fmt.Sprintf(`clusters:
  - {name: small, url: %q, class: small}
  - {name: large, url: %q, class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: 1000000, max_peak_memory: 4MB}
    - {name: large, max_peak_memory: 8MB}
  monitor_interval: 1s
  estimate_timeout: 60s
estimator:
  explain: always
  cache_ttl: -1s      # each run estimated afresh: the history may answer
  history:
    min_count: 1
    max_spread: 3
`, trino, trino)
	_, base := e2e.ServeConfig(t, bin, cfg)
	sql := memHeavySQL + fmt.Sprintf(" /* mem_%d */", rand.Uint32())
	var cluster, decision, est string
	for run := 0; run < 2; run++ {
		resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("POST: %s", resp.Status)
		}
		cluster, decision, est = resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"), resp.Header.Get("X-Prestroid-Estimate")
		t.Logf("run %d: %s on %s, estimate %q", run, decision, cluster, est)
		for p.NextURI != "" {
			_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		}
		if p.Stats.State != "FINISHED" {
			t.Fatalf("run %d: state %s", run, p.Stats.State)
		}
		if strings.Contains(est, "; mem=") {
			break
		}
	}
	if !strings.Contains(est, "; mem=") {
		t.Skipf("no stage of this estimator predicts peak memory yet (X-Prestroid-Estimate %q after the statement ran twice): "+
			"routing on memory is tested with estimates that carry it in proxy/routing and proxy", est)
	}
	if cluster != "large" || decision != "routed: class large; over every class's peak_memory" {
		t.Errorf("a query predicted over 8 MB of peak memory (%q) placed on %q: %q, want the large cluster, flagged", est, cluster, decision)
	}
}
