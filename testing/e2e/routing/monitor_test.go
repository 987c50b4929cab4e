package routing

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestMonitorReadsLoadFromTrinosGauges: with the default monitor type the
// proxy's view of a real cluster's load (prestroid_cluster_queries) comes
// from Trino's OpenMetrics query-manager gauges: a query left running on
// Trino (directly, so the proxy did not send it) shows up in it.
func TestMonitorReadsLoadFromTrinosGauges(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	base, _ := e2e.StartProxy(t, proxy.Options{
		Clusters:        []proxy.ClusterConfig{{Name: "default", URL: direct}},
		MonitorInterval: 300 * time.Millisecond,
	})
	// A query that stays RUNNING without using the CPU: its output buffer
	// fills and nobody reads it.
	_, p := e2e.Do(t, "POST", direct+"/v1/statement", "SELECT * FROM tpch.sf1.lineitem", nil)
	for i := 0; i < 3 && p.NextURI != ""; i++ {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
	}
	if p.NextURI == "" {
		t.Fatal("the query ended")
	}
	defer e2e.Do(t, "DELETE", p.NextURI, "", nil)
	gauge := regexp.MustCompile(`(?m)^prestroid_cluster_queries\{cluster="default"\} (\S+)$`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if m := gauge.FindSubmatch(b); m != nil {
			if v, _ := strconv.ParseFloat(string(m[1]), 64); v >= 1 {
				t.Logf("prestroid_cluster_queries{cluster=\"default\"} = %g with a query running on Trino", v)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the running query never showed in the proxy's load gauge:\n%s", gauge.Find(b))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
