package main

import (
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/protocol"
)

func TestFeedbackLogWritesCollectorRecordsAndRotates(t *testing.T) {
	dir := t.TempDir()
	f := newFeedbackLog(config.Feedback{Dir: dir, RotateRecords: 2}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for i, id := range []string{"q1", "q2", "q3"} {
		f.Record(proxy.Completed{
			QueryID: id, Cluster: "large", User: "alice", SQL: "SELECT 1", Decision: "routed: class large", Class: "large",
			Estimated: true, Estimate: estimate.Estimate{CPUSeconds: 2.5, Model: "m1", Plan: []byte(`{"0":{}}`),
				Source: estimate.SourceModelResidual, Sigma: 0.5, ModelCPUSeconds: 2,
				PeakMemory: estimate.Quantity{Median: 64 << 20, Sigma: 0.5}, Elapsed: estimate.Quantity{Median: 1.5}},
			State: "FINISHED", Stats: protocol.PageStats{CPUTimeMillis: int64(1000 * (i + 1))},
			Session:   []string{"join_distribution_type=BROADCAST,query_max_run_time=1h"},
			Submitted: time.Now(), Finished: time.Now(),
		})
	}
	f.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "feedback-*.jsonl.gz"))
	if len(files) != 2 {
		t.Fatalf("%d files after 3 records with rotation at 2: %v", len(files), files)
	}
	recs, err := collector.ReadAll(files...)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("%d records", len(recs))
	}
	r := recs[0]
	if r.Source != collector.SourceProxy || r.Status != collector.StatusFinished || r.QueryID != "q1" ||
		r.Stats.CPUMillis != 1000 || r.Estimate.CPUMillis != 2500 || r.Estimate.ModelID != "m1" ||
		r.Route.Cluster != "large" || string(r.Plan.JSON) != `{"0":{}}` ||
		r.SessionProperties["join_distribution_type"] != "BROADCAST" || r.SessionProperties["query_max_run_time"] != "1h" {
		t.Errorf("record = %+v", r)
	}
	// The cascade's source and interval: 2.5 s · e^(∓1.2816·0.5).
	if e := r.Estimate; e.Source != "model+residual" || e.ModelCPUMillis != 2000 ||
		math.Abs(e.LoCPUMillis-1317.2) > 1 || math.Abs(e.HiCPUMillis-4744.9) > 1 {
		t.Errorf("estimate = %+v", e)
	}
	// The other targets, with their intervals (a point: lo = hi = median).
	if e := r.Estimate; e.PeakMemoryBytes != 64<<20 || math.Abs(e.LoPeakMemoryBytes-35.36e6) > 0.01e6 ||
		e.ElapsedMillis != 1500 || e.LoElapsedMillis != 1500 || e.HiElapsedMillis != 1500 {
		t.Errorf("estimate targets = %+v", e)
	}
}
