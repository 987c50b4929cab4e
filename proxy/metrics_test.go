package proxy

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func scrape(t *testing.T, o Options) (string, *Server) {
	t.Helper()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.MonitorInterval = -1
	addr, s := serveTest(t, o)
	resp, err := http.Get(addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	return string(b), s
}

func TestMetricsRegistry(t *testing.T) {
	t.Run("each server has its own registry, so many can live in one process", func(t *testing.T) {
		_, a := scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}}})
		_, b := scrape(t, Options{Clusters: []ClusterConfig{{Name: "b", URL: "http://127.0.0.1:1"}}})
		if a.Registry() == b.Registry() || a.Registry() == nil {
			t.Error("servers share a registry")
		}
	})
	t.Run("a registry handed in serves the caller's collectors too, even one holding the Go collector", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector())
		extra := prometheus.NewCounter(prometheus.CounterOpts{Name: "cmd_extra_total", Help: "From cmd."})
		reg.MustRegister(extra)
		extra.Inc()
		body, s := scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}}, Registry: reg})
		if s.Registry() != reg {
			t.Error("Registry() is not the one handed in")
		}
		for _, want := range []string{"cmd_extra_total 1", "# TYPE go_goroutines gauge", `prestroid_cluster_healthy{cluster="a"} 1`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
	t.Run("label values use Prometheus escaping", func(t *testing.T) {
		body, _ := scrape(t, Options{Clusters: []ClusterConfig{{Name: `a"b\c`, URL: "http://127.0.0.1:1"}}})
		if want := `prestroid_cluster_healthy{cluster="a\"b\\c"} 1`; !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s\n%s", want, body)
		}
	})
	t.Run("the estimator's cache and batcher figures are exported when wired", func(t *testing.T) {
		body, _ := scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}},
			EstimatorStats: func() estimate.Stats {
				return estimate.Stats{Caches: []estimate.CacheStats{{Name: "predicate", Hits: 7, Misses: 3, Evictions: 1, Entries: 4, Bytes: 2048}, {Name: "plan"}}, BatchQueueDepth: 2}
			}})
		for _, want := range []string{
			`prestroid_estimator_cache_hits_total{cache="predicate"} 7`,
			`prestroid_estimator_cache_misses_total{cache="predicate"} 3`,
			`prestroid_estimator_cache_evictions_total{cache="predicate"} 1`,
			`prestroid_estimator_cache_entries{cache="predicate"} 4`,
			`prestroid_estimator_cache_bytes{cache="predicate"} 2048`,
			`prestroid_estimator_cache_bytes{cache="plan"} 0`,
			"prestroid_estimator_batch_queue_depth 2",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
	t.Run("a shared history store's health is exported, a local one's is not", func(t *testing.T) {
		shared := &estimate.HistoryStats{Entries: 5, Store: &estimate.HistoryStoreStats{Errors: 3, Dropped: 10, Down: true}}
		body, _ := scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}},
			EstimatorStats: func() estimate.Stats { return estimate.Stats{History: shared} }})
		for _, want := range []string{"prestroid_history_entries 5", "prestroid_history_store_errors_total 3",
			"prestroid_history_store_dropped_total 10", "prestroid_history_store_down 1"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		body, _ = scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}},
			EstimatorStats: func() estimate.Stats { return estimate.Stats{History: &estimate.HistoryStats{Entries: 5}} }})
		if strings.Contains(body, "prestroid_history_store_") {
			t.Error("store health exported for a store that cannot be unreachable")
		}
	})
	t.Run("the unseen-table share appears once a table was scanned", func(t *testing.T) {
		body, s := scrape(t, Options{Clusters: []ClusterConfig{{Name: "a", URL: "http://127.0.0.1:1"}}})
		if strings.Contains(body, "prestroid_unseen_table_share_ratio ") {
			t.Error("share reported before any table was scanned")
		}
		s.metrics.Tables(4, 1)
		g, err := s.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range g {
			if mf.GetName() == "prestroid_unseen_table_share_ratio" {
				if v := mf.GetMetric()[0].GetGauge().GetValue(); v != 0.25 {
					t.Errorf("share %g, want 0.25", v)
				}
				return
			}
		}
		t.Error("no prestroid_unseen_table_share_ratio after a scan")
	})
}

// plannedEstimator answers as the cascade's model stage, from the estimate
// cache when cached is set: the planner stays on a cached estimate.
type plannedEstimator struct {
	planner string
	cached  bool
}

func (e plannedEstimator) Estimate(context.Context, Query) (estimate.Estimate, error) {
	return estimate.Estimate{Estimated: true, CPUSeconds: 1, Source: estimate.SourceModel, Planner: e.planner, Cached: e.cached}, nil
}

// prestroid_explains_total counts EXPLAINs: not the estimates served from
// the estimate cache, which keep the planner of the EXPLAIN they came from.
func TestExplainsTotalLeavesOutCacheHits(t *testing.T) {
	for _, cached := range []bool{false, true} {
		stub, _ := statefulStub(t)
		base, s := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "live", URL: stub.URL}}, Estimator: plannedEstimator{stub.URL, cached}})
		if _, resp := call(t, "POST", base+"/v1/statement", "SELECT 1", "alice"); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		want := 1.0
		if cached {
			want = 0
		}
		if v := testutil.ToFloat64(s.metrics.Explains.WithLabelValues("live")); v != want {
			t.Errorf("cached %v: prestroid_explains_total = %v, want %v", cached, v, want)
		}
	}
}
