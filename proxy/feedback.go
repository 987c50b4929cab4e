package proxy

import (
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/console"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// FeedbackSink receives every query whose last page passed through the
// proxy, with what the proxy decided and Trino's final statistics: live
// traffic as training data (docs/design.md §5, "Feedback"). Record must not block
// for long; cmd/prestroid wires it to the collector's record writer.
type FeedbackSink interface {
	Record(c Completed)
}

// Handoff passes a placed query's learning record to the replica that
// sees its last page (Options.Handoff). Neither call may block.
type Handoff interface {
	// Leave keeps learn for query id; false when it was not (no shared
	// store, shutting down).
	Leave(id string, learn []byte) bool
	// Forget drops what Leave kept for id: this replica saw the end.
	Forget(id string)
}

// Completed is one finished query as the proxy saw it. Fields the proxy did
// not see (the POST went through another replica) are zero.
type Completed struct {
	QueryID string
	// Untracked: another replica placed the query (this one saw its last
	// page but nothing of its first): Estimate is empty here, and what the
	// estimate was based on may be found through Options.Handoff's store.
	Untracked bool
	Cluster   string
	User      string // the query's identity (Identity.User: X-Trino-User, or the verified user)
	Group     string // User's group (admission.Options.GroupOf: the group header, user_groups, else User)
	Source    string
	Catalog   string
	Schema    string
	Session   []string // X-Trino-Session (a PrestoDB client's X-Presto-Session) values
	SQL       string
	// Decision is the X-Prestroid-Decision text and Kind its kind.
	Decision  string
	Kind      routing.DecisionKind
	Class     string
	Estimated bool
	Estimate  estimate.Estimate
	State     string
	ErrorName string
	ErrorType string
	Stats     protocol.PageStats
	Submitted time.Time
	Finished  time.Time
}

// tracked is what the proxy remembers of a query in flight.
type tracked struct {
	c    Completed
	seq  uint64 // its record in the console's ring (0: none)
	left bool   // its Estimate.Learn was left for other replicas (Options.Handoff)
}

// newTracked captures the request's identity before the handler returns
// (fasthttp reuses the request afterwards).
func newTracked(ctx *fasthttp.RequestCtx, d *decision, c *cluster) *tracked {
	h, e := &ctx.Request.Header, d.dialect
	t := &tracked{c: Completed{
		Cluster: c.name, User: d.identity.User, Source: string(protocol.Peek(h, e, "Source")),
		Catalog: string(protocol.Peek(h, e, "Catalog")), Schema: string(protocol.Peek(h, e, "Schema")),
		SQL: string(ctx.Request.Body()), Decision: d.String(), Kind: d.Kind, Class: d.Class,
		Estimated: d.estimate, Estimate: d.est, Submitted: time.Now(),
	}}
	for _, v := range protocol.PeekAll(h, e, "Session") {
		t.c.Session = append(t.c.Session, string(v))
	}
	return t
}

// complete handles a query's last page: metrics and the feedback log.
func (s *Server) complete(info *protocol.PageInfo, clusterName string) {
	t, ok := s.tracked.Take(info.ID)
	var c Completed
	if ok {
		c = t.c
		if t.left {
			s.opts.Handoff.Forget(info.ID)
		}
	} else {
		c = Completed{Cluster: clusterName, Untracked: true}
	}
	c.QueryID, c.State, c.ErrorName, c.ErrorType, c.Stats, c.Finished = info.ID, info.State, info.ErrorName, info.ErrorType, info.Stats, time.Now()
	s.metrics.Completed.WithLabelValues(c.State, c.Cluster).Inc()
	if c.Estimated && c.State == "FINISHED" && c.Stats.RolledUp() {
		if q, ok := estimate.QError(c.Estimate.CPUSeconds, float64(c.Stats.CPUTimeMillis)/1000); ok {
			s.metrics.Qerror.Observe(q)
			s.metrics.SourceQerror.WithLabelValues(c.Estimate.Source.String()).Observe(q)
		}
	}
	if ok && s.ring != nil {
		s.ring.Finish(t.seq, console.Final{Finished: c.Finished, State: c.State, ErrorName: c.ErrorName,
			CPUSeconds: float64(c.Stats.CPUTimeMillis) / 1000, PeakMemoryBytes: float64(c.Stats.PeakMemoryBytes),
			ElapsedSeconds: float64(c.Stats.ElapsedTimeMillis) / 1000})
	}
	s.recordUsage(&c)
	if s.opts.Feedback != nil {
		s.opts.Feedback.Record(c)
	}
}

// clusterRestarted frees the admission slots of the queries this replica
// sent to cluster before its coordinator restarted: they died with the
// old coordinator. A client still polling one gets the new coordinator's
// own answer (and its slot is freed then); one that went away would hold
// its slot until admission.idle_release and stay running in the console.
// Each query whose slot was still held is finished in the console and
// counted as completed in state LOST; the feedback log and the usage
// accounting get nothing (no figures came). What it tracks of the others
// (finished through another replica) is dropped.
func (s *Server) clusterRestarted(cluster string, before time.Time) {
	if s.admit == nil {
		return // nothing is held for them
	}
	gone := s.tracked.TakeWhere(func(t *tracked) bool { return t.c.Cluster == cluster && t.c.Submitted.Before(before) })
	now, lost := time.Now(), 0
	for id, t := range gone {
		if t.left {
			s.opts.Handoff.Forget(id)
		}
		if !s.finishQuery(id) {
			continue
		}
		lost++
		if s.ring != nil {
			s.ring.Finish(t.seq, console.Final{Finished: now, State: stateLost, ErrorName: "CLUSTER_RESTARTED"})
		}
		s.metrics.Completed.WithLabelValues(stateLost, cluster).Inc()
	}
	if lost > 0 {
		s.log.Warn("cluster restarted: queries this replica sent it before are lost; their admission slots are freed", "cluster", cluster, "queries", lost)
	}
}

// stateLost is the final state of a query whose cluster restarted under it.
const stateLost = "LOST"

// consoleRecord is the console's record of the query placed by d, known
// from its first page as id and tracked as c.
func consoleRecord(id string, c *Completed, d *decision, now time.Time) console.Record {
	return console.Record{Routed: now, QueryID: id, User: c.User, Source: c.Source, Cluster: c.Cluster, Class: c.Class,
		Decision: c.Decision, Kind: c.Kind.String(), Queued: d.Queued, Estimated: c.Estimated, Estimate: c.Estimate, Took: d.took}
}

// recordDecision counts a placement and the estimate behind it.
func (s *Server) recordDecision(d *decision) {
	s.metrics.Decisions.WithLabelValues(d.Class, d.cluster.name, d.Kind.String()).Inc()
	for _, t := range d.Over {
		s.metrics.OverClass.WithLabelValues(t.String()).Inc()
	}
	if d.estimate {
		e := d.est
		s.metrics.Estimates.WithLabelValues(e.Source.String()).Inc()
		s.metrics.EstimateSeconds.Observe((e.Explain + e.Featurize + e.Infer).Seconds())
		if e.Explained() {
			s.metrics.ExplainSeconds.Observe(e.Explain.Seconds())
		}
		if e.Planner != "" && !e.Cached { // a cached estimate keeps its planner but ran no EXPLAIN
			s.metrics.Explains.WithLabelValues(s.clusterByURL(e.Planner)).Inc()
		}
		if e.ExplainSkipped {
			s.metrics.ExplainSkipped.Inc()
		}
		if e.Explained() || e.Cached { // the model (or its cache) answered
			result := "miss"
			if e.Cached {
				result = "hit"
			}
			s.metrics.EstimateCache.WithLabelValues(result).Inc()
		}
		s.metrics.Tables(e.Tables, e.UnknownTables)
	}
}
