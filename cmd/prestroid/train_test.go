package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/training"
)

// TestTrainReadsFeedbackLogs: records of live traffic (the proxy's feedback
// log: no workload template) are training data. Each gets its SQL
// fingerprint as template, so statements that differ only in literals share
// a template and a side of the split.
func TestTrainReadsFeedbackLogs(t *testing.T) {
	plan, err := os.ReadFile(filepath.Join("..", "..", "estimator", "testdata", "explain", "tpch-q20-sf1.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := newFeedbackLog(config.Feedback{Dir: dir}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	sqls := []string{
		"SELECT s_name FROM supplier WHERE s_nationkey = 3",
		"select s_name\nfrom supplier where s_nationkey = 17 -- another literal",
		"SELECT s_name, s_address FROM supplier",
	}
	for i, sql := range sqls {
		f.Record(proxy.Completed{
			QueryID: "q" + string(rune('1'+i)), Cluster: "small", User: "alice", SQL: sql, Decision: "estimated",
			Estimated: true, Estimate: estimate.Estimate{CPUSeconds: 1.5, Model: "m1", Plan: plan},
			State: "FINISHED", Stats: protocol.PageStats{CPUTimeMillis: int64(700 * (i + 1))},
			Submitted: time.Now(), Finished: time.Now(),
		})
	}
	f.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "feedback-*.jsonl.gz"))
	qs, st, err := training.LoadQueries(files, filepath.Join("..", "..", "data", "split.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 || st.Usable != 3 {
		t.Fatalf("%d usable of %d feedback records (dropped %v), want 3", st.Usable, st.Records, st.Dropped)
	}
	for _, q := range qs {
		if q.Family != "live" || !strings.HasPrefix(q.Template, "live/") || q.OTPNodes == 0 || q.CPUMs <= 0 {
			t.Fatalf("live query %+v", q)
		}
		if q.Split != "train" && q.Split != "val" && q.Split != "test" {
			t.Fatalf("split %q", q.Split)
		}
	}
	if qs[0].Template != qs[1].Template || qs[0].Split != qs[1].Split {
		t.Errorf("statements that differ in literals: templates %s/%s, splits %s/%s", qs[0].Template, qs[1].Template, qs[0].Split, qs[1].Split)
	}
	if qs[0].Template == qs[2].Template {
		t.Errorf("different statements share template %s", qs[0].Template)
	}
}
