package proxy

import (
	"math"
	"time"

	"github.com/valyala/fasthttp"
)

// FeedbackSink receives every query whose last page passed through the
// proxy, with what the proxy decided and Trino's final statistics: live
// traffic as training data (DESIGN §5, "Feedback"). Record must not block
// for long; cmd/prestroid wires it to the collector's record writer.
type FeedbackSink interface {
	Record(c Completed)
}

// Completed is one finished query as the proxy saw it. Fields the proxy did
// not see (the POST went through another replica) are zero.
type Completed struct {
	QueryID   string
	Cluster   string
	User      string
	Source    string
	Catalog   string
	Schema    string
	Session   []string // X-Trino-Session values
	SQL       string
	Decision  string
	Class     string
	Estimated bool
	Estimate  Estimate
	State     string
	ErrorName string
	ErrorType string
	Stats     PageStats
	Submitted time.Time
	Finished  time.Time
}

// tracked is what the proxy remembers of a query in flight.
type tracked struct {
	c Completed
}

// newTracked captures the request's identity before the handler returns
// (fasthttp reuses the request afterwards).
func newTracked(ctx *fasthttp.RequestCtx, d *decision, c *cluster) *tracked {
	h := &ctx.Request.Header
	t := &tracked{c: Completed{
		Cluster: c.name, User: string(h.Peek("X-Trino-User")), Source: string(h.Peek("X-Trino-Source")),
		Catalog: string(h.Peek("X-Trino-Catalog")), Schema: string(h.Peek("X-Trino-Schema")),
		SQL: string(ctx.Request.Body()), Decision: d.why, Class: d.class,
		Estimated: d.estimate, Estimate: d.est, Submitted: time.Now(),
	}}
	for _, v := range h.PeekAll("X-Trino-Session") {
		t.c.Session = append(t.c.Session, string(v))
	}
	return t
}

// complete handles a query's last page: metrics and the feedback log.
func (s *Server) complete(info *PageInfo, clusterName string) {
	t, ok := s.tracked.Take(info.ID)
	var c Completed
	if ok {
		c = t.c
	} else {
		c = Completed{Cluster: clusterName}
	}
	c.QueryID, c.State, c.ErrorName, c.ErrorType, c.Stats, c.Finished = info.ID, info.State, info.ErrorName, info.ErrorType, info.Stats, time.Now()
	s.metrics.add("prestroid_completed_queries_total", 1, "state", c.State, "cluster", c.Cluster)
	if c.Estimated && c.State == "FINISHED" && c.Stats.CPUTimeMillis > 0 && c.Estimate.CPUSeconds > 0 {
		actual := float64(c.Stats.CPUTimeMillis) / 1000
		s.metrics.observe("prestroid_qerror", math.Max(c.Estimate.CPUSeconds/actual, actual/c.Estimate.CPUSeconds))
	}
	if s.opts.Feedback != nil {
		s.opts.Feedback.Record(c)
	}
}

// ServeMetrics answers GET /metrics in the Prometheus text format.
func (s *Server) serveMetrics(ctx *fasthttp.RequestCtx) {
	g := map[string]map[string]float64{
		"prestroid_cluster_healthy": {},
		"prestroid_cluster_queries": {},
	}
	for _, c := range s.clusters {
		l := labels("cluster", c.name)
		h := 0.0
		if c.healthy() {
			h = 1
		}
		g["prestroid_cluster_healthy"][l] = h
		g["prestroid_cluster_queries"][l] = float64(c.load())
	}
	if s.admit != nil {
		q, in := s.admit.lengths()
		g["prestroid_queue_length"] = map[string]float64{"": float64(q)}
		g["prestroid_inflight_queries"] = map[string]float64{"": float64(in)}
	}
	s.metrics.mu.Lock()
	tables := s.metrics.counters["prestroid_scanned_tables_total"]
	var known, unknown float64
	if tables != nil {
		known, unknown = tables[labels("known", "true")], tables[labels("known", "false")]
	}
	s.metrics.mu.Unlock()
	if known+unknown > 0 {
		g["prestroid_unseen_table_share_ratio"] = map[string]float64{"": unknown / (known + unknown)}
	}
	ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
	s.metrics.write(ctx, g)
}

// recordDecision counts a placement and the estimate behind it.
func (s *Server) recordDecision(d *decision) {
	kind := d.why
	for i := 0; i < len(kind); i++ {
		if kind[i] == ':' {
			kind = kind[:i]
			break
		}
	}
	s.metrics.add("prestroid_decisions_total", 1, "class", d.class, "cluster", d.cluster.name, "kind", kind)
	if d.estimate {
		e := d.est
		s.metrics.observeDuration("prestroid_estimate_seconds", e.Explain+e.Featurize+e.Infer)
		if !e.Cached {
			s.metrics.observeDuration("prestroid_explain_seconds", e.Explain)
		}
		s.metrics.add("prestroid_estimate_cache_total", 1, "result", map[bool]string{true: "hit", false: "miss"}[e.Cached])
		if e.Tables > 0 {
			s.metrics.add("prestroid_scanned_tables_total", float64(e.Tables-e.UnknownTables), "known", "true")
			s.metrics.add("prestroid_scanned_tables_total", float64(e.UnknownTables), "known", "false")
		}
	}
}
