package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/proxy"
)

// feedbackLog writes the proxy's completed queries as collector records to
// rotating files. Record never blocks the proxy: records go through a
// buffered channel to one writer goroutine, and are dropped (and counted)
// when it falls behind.
type feedbackLog struct {
	cfg     config.Feedback
	log     *slog.Logger
	ch      chan proxy.Completed
	dropped atomic.Int64
	done    chan struct{}
}

var _ proxy.FeedbackSink = (*feedbackLog)(nil)

func newFeedbackLog(cfg config.Feedback, log *slog.Logger) *feedbackLog {
	if cfg.RotateRecords == 0 {
		cfg.RotateRecords = 10000
	}
	if cfg.RotateEvery == 0 {
		cfg.RotateEvery = config.Duration(time.Hour)
	}
	f := &feedbackLog{cfg: cfg, log: log, ch: make(chan proxy.Completed, 4096), done: make(chan struct{})}
	go f.run()
	return f
}

func (f *feedbackLog) Record(c proxy.Completed) {
	select {
	case f.ch <- c:
	default:
		if f.dropped.Add(1)%1000 == 1 {
			f.log.Warn("feedback log falling behind; records dropped", "dropped", f.dropped.Load())
		}
	}
}

// Close flushes what is queued and closes the file.
func (f *feedbackLog) Close() {
	close(f.ch)
	<-f.done
}

func (f *feedbackLog) run() {
	defer close(f.done)
	var w *collector.Writer
	var opened time.Time
	n := 0
	for c := range f.ch {
		if w == nil || n >= f.cfg.RotateRecords || time.Since(opened) >= time.Duration(f.cfg.RotateEvery) {
			if w != nil {
				w.Close()
			}
			opened = time.Now().UTC()
			path := filepath.Join(f.cfg.Dir, "feedback-"+opened.Format("20060102T150405.000000000")+".jsonl.gz")
			var err error
			if w, err = collector.OpenWriter(path); err != nil {
				f.log.Error("feedback log", "error", err)
				w = nil
				continue
			}
			n = 0
		}
		if err := w.Write(toRecord(c)); err != nil {
			f.log.Error("feedback log", "error", err)
			continue
		}
		n++
	}
	if w != nil {
		w.Close()
	}
}

// toRecord maps a completed query onto the collector's record format.
func toRecord(c proxy.Completed) *collector.Record {
	r := &collector.Record{
		Source: collector.SourceProxy, Key: "proxy/" + c.QueryID, QueryID: c.QueryID,
		Server: c.Cluster, User: c.User, ClientSource: c.Source, Catalog: c.Catalog, Schema: c.Schema,
		SQL: c.SQL, SubmittedAt: c.Submitted, FinishedAt: c.Finished,
		Stats: &collector.Stats{
			State: c.State, CPUMillis: c.Stats.CPUTimeMillis, WallMillis: c.Stats.WallTimeMillis,
			ElapsedMillis: c.Stats.ElapsedTimeMillis, QueuedMillis: c.Stats.QueuedTimeMillis,
			AnalysisMillis: c.Stats.AnalysisTimeMillis, PlanningMillis: c.Stats.PlanningTimeMillis, PlanningCPUMillis: -1,
			PeakMemoryBytes: c.Stats.PeakMemoryBytes, ProcessedRows: c.Stats.ProcessedRows,
			ProcessedBytes: c.Stats.ProcessedBytes, PhysicalInputBytes: c.Stats.PhysicalInputBytes, SpilledBytes: c.Stats.SpilledBytes,
		},
		Route: &collector.Route{Cluster: c.Cluster, Decision: c.Decision},
	}
	switch c.State {
	case "FINISHED":
		r.Status = collector.StatusFinished
	default:
		r.Status = collector.StatusFailed
		r.Error = &collector.Error{Name: c.ErrorName, Type: c.ErrorType, Message: c.ErrorName}
	}
	if len(c.Session) > 0 {
		r.SessionProperties = map[string]string{}
		for _, v := range c.Session {
			for _, kv := range strings.Split(v, ",") {
				k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
				if k != "" {
					if dv, err := url.QueryUnescape(val); err == nil {
						val = dv
					}
					r.SessionProperties[k] = val
				}
			}
		}
	}
	if c.Estimated {
		r.Estimate = &collector.Estimate{ModelID: c.Estimate.Model, CPUMillis: c.Estimate.CPUSeconds * 1000,
			Millis: float64(c.Estimate.Explain+c.Estimate.Featurize+c.Estimate.Infer) / float64(time.Millisecond)}
		if len(c.Estimate.Plan) > 0 && json.Valid(c.Estimate.Plan) {
			r.Plan = &collector.Plan{JSON: json.RawMessage(c.Estimate.Plan), ElapsedMillis: c.Estimate.Explain.Milliseconds()}
		}
	} else if strings.HasPrefix(c.Decision, "fail-open") {
		r.Estimate = &collector.Estimate{FailOpen: c.Decision}
	}
	return r
}

func (f *feedbackLog) String() string { return fmt.Sprintf("feedback log in %s", f.cfg.Dir) }
