package metrics

import (
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeState is a server with two clusters, one down, and a queue.
type fakeState struct{ queue bool }

func (f fakeState) Clusters() []Cluster {
	return []Cluster{{Name: "small", Class: "s", Healthy: true, Load: 3}, {Name: "large", Class: "l"}}
}

func (f fakeState) Queue() (int, int, bool) { return 2, 5, f.queue }

func TestRegister(t *testing.T) {
	t.Run("the state's gauges are read at scrape time", func(t *testing.T) {
		m, reg := New(), prometheus.NewRegistry()
		if err := m.Register(reg, fakeState{queue: true}, nil); err != nil {
			t.Fatal(err)
		}
		m.Tables(4, 1)
		want := `
# HELP prestroid_cluster_healthy 1 when the cluster's /v1/info says it is up.
# TYPE prestroid_cluster_healthy gauge
prestroid_cluster_healthy{cluster="large"} 0
prestroid_cluster_healthy{cluster="small"} 1
# HELP prestroid_queue_length Queries waiting in the admission queue.
# TYPE prestroid_queue_length gauge
prestroid_queue_length 2
# HELP prestroid_unseen_table_share_ratio Share of scanned tables the model has never seen, over all estimated queries.
# TYPE prestroid_unseen_table_share_ratio gauge
prestroid_unseen_table_share_ratio 0.25
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "prestroid_cluster_healthy", "prestroid_queue_length", "prestroid_unseen_table_share_ratio"); err != nil {
			t.Error(err)
		}
	})
	t.Run("every cluster's routed series and the fail-open reasons start at zero", func(t *testing.T) {
		m, reg := New(), prometheus.NewRegistry()
		if err := m.Register(reg, fakeState{}, func() estimate.Stats { return estimate.Stats{BatchQueueDepth: 7} }); err != nil {
			t.Fatal(err)
		}
		if got := testutil.CollectAndCount(m.Decisions); got != 3 { // routed on each cluster, fail-open on the default
			t.Errorf("%d decision series, want 3", got)
		}
		if got := testutil.CollectAndCount(m.FailOpen); got != 3 {
			t.Errorf("%d fail-open series, want 3", got)
		}
		if n, err := testutil.GatherAndCount(reg, "prestroid_queue_length"); err != nil || n != 0 {
			t.Errorf("a queue gauge without admission: %d %v", n, err)
		}
		if n, err := testutil.GatherAndCount(reg, "prestroid_estimator_batch_queue_depth"); err != nil || n != 1 {
			t.Errorf("the estimator's figures: %d %v", n, err)
		}
	})
	t.Run("a second Set on the same registry collides", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		if err := New().Register(reg, fakeState{}, nil); err != nil {
			t.Fatal(err)
		}
		if err := New().Register(reg, fakeState{}, nil); err == nil {
			t.Error("two Sets registered on one registry")
		}
	})
}

func TestExplainsByReason(t *testing.T) {
	m, reg := New(), prometheus.NewRegistry()
	x := estimate.ExplainStats{Hot: 5, Learn: 4, Drift: 1, SkippedCeiling: 2, SkippedKnown: 30}
	if err := m.Register(reg, fakeState{}, func() estimate.Stats { return estimate.Stats{Explains: &x} }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP prestroid_explains_by_reason_total ` + "EXPLAIN round trips the estimator sent to the clusters, by reason: hot (on the hot path: the plan could change the decision), learn (in the background: a shape with few explained runs or wide residuals), drift (the sampled fraction of well-known shapes); and those not sent: skipped_ceiling (over estimator.explain_rate), skipped_known (a well-known shape, or a statement another user's EXPLAIN is planning). A cached estimate runs none." + `
# TYPE prestroid_explains_by_reason_total counter
prestroid_explains_by_reason_total{reason="drift"} 1
prestroid_explains_by_reason_total{reason="hot"} 5
prestroid_explains_by_reason_total{reason="learn"} 4
prestroid_explains_by_reason_total{reason="skipped_ceiling"} 2
prestroid_explains_by_reason_total{reason="skipped_known"} 30
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "prestroid_explains_by_reason_total"); err != nil {
		t.Error(err)
	}
}

func TestIntervalFactors(t *testing.T) {
	m, reg := New(), prometheus.NewRegistry()
	iv := []estimate.IntervalStats{{Engine: "trino", Target: "cpu", Source: "text", Factor: 0.82, Outcomes: 140}, {Engine: "trino", Target: "cpu", Source: "model", Factor: 1, Outcomes: 0},
		{Engine: "trino", Target: "peak_memory", Source: "history", Factor: 1.3, Outcomes: 60}}
	if err := m.Register(reg, fakeState{}, func() estimate.Stats { return estimate.Stats{Intervals: iv} }); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP prestroid_estimator_interval_factor ` + "The factor each stage's 80% interval is served with, by engine, target (cpu, peak_memory, elapsed) and source (the stage that answered): learned from whether the intervals it served held what the statements took, so that four in five do (1: as the stage computes it; below 1: narrower)." + `
# TYPE prestroid_estimator_interval_factor gauge
prestroid_estimator_interval_factor{engine="trino",source="history",target="peak_memory"} 1.3
prestroid_estimator_interval_factor{engine="trino",source="model",target="cpu"} 1
prestroid_estimator_interval_factor{engine="trino",source="text",target="cpu"} 0.82
# HELP prestroid_estimator_interval_outcomes ` + "Completed statements each stage's interval factor (prestroid_estimator_interval_factor) learned from, by engine, target and source." + `
# TYPE prestroid_estimator_interval_outcomes gauge
prestroid_estimator_interval_outcomes{engine="trino",source="history",target="peak_memory"} 60
prestroid_estimator_interval_outcomes{engine="trino",source="model",target="cpu"} 0
prestroid_estimator_interval_outcomes{engine="trino",source="text",target="cpu"} 140
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "prestroid_estimator_interval_factor", "prestroid_estimator_interval_outcomes"); err != nil {
		t.Error(err)
	}
}
