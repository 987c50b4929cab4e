package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/routing"
)

// Routing on peak memory and elapsed time through the proxy: the class,
// the decision's flag and the three-target header the cluster receives.
func TestCostRoutingOnMemoryAndTime(t *testing.T) {
	small, large := newCoordinator(t), newCoordinator(t)
	classes := []routing.CostClass{
		{Name: "small", MaxCPUSeconds: 10, MaxPeakMemory: 1 << 30, MaxElapsed: 60},
		{Name: "large", MaxPeakMemory: 16 << 30},
	}
	p := routingProxy(t, Options{
		Clusters:  []ClusterConfig{{Name: "small", URL: small.URL, Class: "small"}, {Name: "large", URL: large.URL, Class: "large"}},
		Estimator: &fixedEstimator{}, Classes: classes, EstimateTimeout: time.Second, ClassQuantile: 0.9,
	})
	for _, tc := range []struct {
		name, sql, cluster, decision, estimate string
	}{
		{"little CPU and little memory stay small", "SELECT 1 -- cpu=1 mem=104857600 elapsed=2",
			"small", "routed: class small", "EXECUTION_TIME=2s, CPU_TIME=1s, PEAK_MEMORY=102400kB"},
		{"little CPU but more memory than the small class holds goes large", "SELECT 2 -- cpu=1 mem=4294967296",
			"large", "routed: class large", "CPU_TIME=1s, PEAK_MEMORY=4096MB"},
		{"little CPU but a long elapsed time goes large", "SELECT 3 -- cpu=1 elapsed=600",
			"large", "routed: class large", "EXECUTION_TIME=10m, CPU_TIME=1s"},
		{"more memory than any class holds goes to the largest, flagged", "SELECT 4 -- cpu=1 mem=107374182400",
			"large", "routed: class large; over every class's peak_memory", "CPU_TIME=1s, PEAK_MEMORY=102400MB"},
		{"an estimate of CPU alone is routed on CPU as before", "SELECT 5 -- cpu=1",
			"small", "routed: class small", "CPU_TIME=1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := sendSQL(t, p, tc.sql, nil)
			if got := resp.Header.Get("X-Prestroid-Cluster"); got != tc.cluster {
				t.Errorf("cluster %q, want %q", got, tc.cluster)
			}
			if got := resp.Header.Get("X-Prestroid-Decision"); got != tc.decision {
				t.Errorf("decision %q, want %q", got, tc.decision)
			}
			up := map[string]*coordinator{"small": small, "large": large}[tc.cluster].lastPost.Load()
			if got := up.Header.Get("X-Trino-Resource-Estimate"); got != tc.estimate {
				t.Errorf("upstream X-Trino-Resource-Estimate %q, want %q", got, tc.estimate)
			}
		})
	}
	t.Run("the flagged placement is counted by target", func(t *testing.T) {
		resp, err := http.Get(p + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, want := range []string{`prestroid_decisions_over_class_total{target="peak_memory"} 1`,
			`prestroid_decisions_over_class_total{target="elapsed"} 0`} {
			if !strings.Contains(string(b), want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}
