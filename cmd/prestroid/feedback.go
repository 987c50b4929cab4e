package main

import (
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/routing"
)

// feedbackLog is the proxy's feedback sink: the collector's rotating
// record log (collector.FeedbackLog) over proxy.Completed values, converted
// by toRecord on the log's writer goroutine. The conversion lives here, in
// the wiring, because collector (training data) and proxy (serving) do not
// import each other.
type feedbackLog = collector.FeedbackLog[proxy.Completed]

var _ proxy.FeedbackSink = (*feedbackLog)(nil)

// newFeedbackLog starts the log with cfg's rotation bounds, as
// config.FillDefaults left them (a zero bound would mean none).
func newFeedbackLog(cfg config.Feedback, log *slog.Logger) *feedbackLog {
	return collector.NewFeedbackLog(collector.FeedbackOptions{Dir: cfg.Dir, RotateRecords: cfg.RotateRecords,
		RotateEvery: time.Duration(cfg.RotateEvery), Logger: log}, toRecord)
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
		r.SessionProperties = sessionProperties(c.Session)
	}
	if c.Estimated {
		lo, hi := c.Estimate.Interval()
		r.Estimate = &collector.Estimate{ModelID: c.Estimate.Model, CPUMillis: c.Estimate.CPUSeconds * 1000,
			Millis: float64(c.Estimate.Explain+c.Estimate.Featurize+c.Estimate.Infer) / float64(time.Millisecond),
			Source: c.Estimate.Source.String(), LoCPUMillis: lo * 1000, HiCPUMillis: hi * 1000,
			ModelCPUMillis: c.Estimate.ModelCPUSeconds * 1000}
		if q := c.Estimate.PeakMemory; q.Known() {
			r.Estimate.PeakMemoryBytes = q.Median
			r.Estimate.LoPeakMemoryBytes, r.Estimate.HiPeakMemoryBytes = q.Interval()
		}
		if q := c.Estimate.Elapsed; q.Known() {
			r.Estimate.ElapsedMillis = q.Median * 1000
			lo, hi := q.Interval()
			r.Estimate.LoElapsedMillis, r.Estimate.HiElapsedMillis = lo*1000, hi*1000
		}
		if len(c.Estimate.Plan) > 0 && json.Valid(c.Estimate.Plan) {
			r.Plan = &collector.Plan{JSON: json.RawMessage(c.Estimate.Plan), ElapsedMillis: c.Estimate.Explain.Milliseconds()}
		}
	} else if c.Kind == routing.KindFailOpen {
		r.Estimate = &collector.Estimate{FailOpen: c.Decision}
	}
	return r
}

// sessionProperties parses X-Trino-Session values (comma-separated
// NAME=VALUE pairs, values URL-encoded).
func sessionProperties(values []string) map[string]string {
	out := map[string]string{}
	for _, v := range values {
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(strings.TrimSpace(kv), "=")
			if k != "" {
				if dv, err := url.QueryUnescape(val); err == nil {
					val = dv
				}
				out[k] = val
			}
		}
	}
	return out
}
