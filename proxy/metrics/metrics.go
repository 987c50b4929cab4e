package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttpadaptor"
)

// Set is the proxy's Prometheus metrics. Each metric is a typed field (no
// metric names at call sites); each server has its own Set and registry,
// so many servers can live in one process.
type Set struct {
	Decisions       *prometheus.CounterVec // class, cluster, kind
	OverClass       *prometheus.CounterVec // target: peak_memory | elapsed
	FailOpen        *prometheus.CounterVec // reason: error | timeout
	Failover        *prometheus.CounterVec // cluster (the unreachable one)
	EstimateCache   *prometheus.CounterVec // result: hit | miss
	Queued          prometheus.Counter
	Identity        *prometheus.CounterVec // result: explain | cache | probe | jwks | refused | unavailable
	Completed       *prometheus.CounterVec // state, cluster
	ScannedTables   *prometheus.CounterVec // known: true | false
	QueueWait       prometheus.Histogram
	EstimateSeconds prometheus.Histogram
	ExplainSeconds  prometheus.Histogram
	Qerror          prometheus.Histogram
	// The shared admission store (Redis) and the rate limits.
	StoreErrors    prometheus.Counter
	StoreFallback  prometheus.Gauge
	RateLimited    *prometheus.CounterVec   // scope: user | group
	Estimates      *prometheus.CounterVec   // source
	SourceQerror   *prometheus.HistogramVec // source
	Explains       *prometheus.CounterVec   // cluster (the planner)
	ExplainSkipped prometheus.Counter
	ReadAhead      *prometheus.CounterVec // outcome: fetched | served | retry | failed | expired | full

	// Known and Unknown mirror ScannedTables for the unseen-table share.
	Known, Unknown atomic.Uint64
}

var qerrorBuckets = []float64{1.1, 1.25, 1.5, 2, 3, 5, 10, 30, 100}

// New makes the metrics, registered nowhere yet (Register).
func New() *Set {
	lat := []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	}
	return &Set{
		Decisions: counter("prestroid_decisions_total",
			"Placement decisions of new queries, by class, cluster and kind.", "class", "cluster", "kind"),
		OverClass: counter("prestroid_decisions_over_class_total",
			"Placements of queries predicted over every cost class's bound on a target (routing.classes[].max_peak_memory, max_elapsed): the largest class took them.", "target"),
		FailOpen: counter("prestroid_fail_open_total",
			"Queries forwarded unestimated because the estimate failed (reason=error) or was slow (timeout).", "reason"),
		Failover: counter("prestroid_failover_total",
			"New queries sent to another cluster because theirs refused the connection, by the unreachable cluster.", "cluster"),
		EstimateCache: counter("prestroid_estimate_cache_total",
			"Estimates served from the estimate cache (result=hit) or computed (miss).", "result"),
		Identity: counter("prestroid_identity_checks_total",
			"How new queries' identities were established (identity: verified): by their EXPLAIN, a remembered credential (cache), a probe, a locally verified JWT (jwks); or refused (the cluster answered 401/403) or unavailable (the cluster did not answer).", "result"),
		Queued: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_queued_total",
			Help: "Queries that waited in the admission queue."}),
		Completed: counter("prestroid_completed_queries_total",
			"Queries whose last page passed through the proxy, by final state; LOST: sent to a cluster that restarted before its last page.", "state", "cluster"),
		ScannedTables: counter("prestroid_scanned_tables_total",
			"Tables scanned by estimated queries, by whether the model knows them (the drift signal).", "known"),
		QueueWait: hist("prestroid_queue_wait_seconds", "Time queries waited in the admission queue.",
			[]float64{.1, .5, 1, 5, 10, 30, 60, 300, 600}),
		EstimateSeconds: hist("prestroid_estimate_seconds", "Time to estimate a query (EXPLAIN, featurize, infer).", lat),
		ExplainSeconds:  hist("prestroid_explain_seconds", "EXPLAIN latency.", lat),
		Qerror: hist("prestroid_qerror",
			"q-error of completed queries: max(pred/actual, actual/pred) of CPU time.",
			qerrorBuckets),
		StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_admission_store_errors_total",
			Help: "Calls to the shared admission store (Redis) that failed."}),
		StoreFallback: prometheus.NewGauge(prometheus.GaugeOpts{Name: "prestroid_admission_store_fallback",
			Help: "1 while the shared admission store is unreachable and this replica admits on its own (admission.redis_down)."}),
		RateLimited: counter("prestroid_rate_limited_total",
			"New queries refused by a rate limit (HTTP 503 with Retry-After), by the limit's scope.", "scope"),
		Estimates: counter("prestroid_estimates_total",
			"Estimates behind placements, by the cascade stage that made them (cheap, history, text, model+residual, model, optimizer).", "source"),
		SourceQerror: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "prestroid_estimate_qerror",
			Help:    "q-error of completed estimated queries by the estimate's source.",
			Buckets: qerrorBuckets}, []string{"source"}),
		Explains: counter("prestroid_explains_total",
			"EXPLAINs run on the hot path to estimate queries, by the cluster that planned them; an estimate served from the estimate cache is not counted (prestroid_background_explains_total: off the hot path; prestroid_explains_by_reason_total: every EXPLAIN by reason).", "cluster"),
		ExplainSkipped: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_explain_skipped_total",
			Help: "Estimates that needed an EXPLAIN but found every planner at its bound (from history, or failed open)."}),
		ReadAhead: counter("prestroid_read_ahead_pages_total",
			"Result pages read ahead of the client (page_read_ahead_bytes), by outcome: fetched, served to the client's poll, retry (a page served again from the proxy's copy), failed (the client's poll went to Trino), expired (never asked for), full (not read ahead: the budget was spent).", "outcome"),
	}
}

// Register adds the metrics, the gauges read from state at scrape time,
// the estimator's figures (stats; nil: none), and the Go runtime and
// process collectors to reg; clusters' series start at zero (Zero).
func (m *Set) Register(reg *prometheus.Registry, state State, stats func() estimate.Stats) error {
	cs := []prometheus.Collector{
		m.Decisions, m.OverClass, m.FailOpen, m.Failover, m.EstimateCache, m.Queued, m.Identity, m.Completed, m.ScannedTables,
		m.QueueWait, m.EstimateSeconds, m.ExplainSeconds, m.Qerror,
		m.StoreErrors, m.StoreFallback, m.RateLimited,
		m.Estimates, m.SourceQerror, m.Explains, m.ExplainSkipped, m.ReadAhead,
		&stateCollector{m: m, state: state},
	}
	if stats != nil {
		cs = append(cs, &estimatorCollector{stats: stats})
	}
	m.zero(state.Clusters())
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	// A registry handed in by the caller may already hold the runtime
	// collectors; one copy is enough.
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		var dup prometheus.AlreadyRegisteredError
		if err := reg.Register(c); err != nil && !errors.As(err, &dup) {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}

// zero exports the series every deployment has at 0 from the start:
// rate() and increase() see a counter's first increment only when the
// series existed before it (a series born at 1 between two scrapes reads as
// no change), so a dashboard's fail-open share or cache hit rate would show
// nothing for the first queries. The label values are those the proxy
// writes: the routed kind per cluster and its class, the fail-open kind on
// the first cluster (the default before the monitor's first round), every
// fail-open reason and both estimate-cache results.
func (m *Set) zero(clusters []Cluster) {
	for _, c := range clusters {
		m.Decisions.WithLabelValues(c.Class, c.Name, routing.KindRouted.String())
	}
	if len(clusters) > 0 {
		m.Decisions.WithLabelValues("", clusters[0].Name, routing.KindFailOpen.String())
	}
	for _, r := range []string{"timeout", "busy", "error"} {
		m.FailOpen.WithLabelValues(r)
	}
	for _, t := range []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		m.OverClass.WithLabelValues(t.String())
	}
	for _, r := range []string{"hit", "miss"} {
		m.EstimateCache.WithLabelValues(r)
	}
	for _, o := range []string{"fetched", "served", "retry", "failed", "expired", "full"} {
		m.ReadAhead.WithLabelValues(o)
	}
}

// Tables counts the tables an estimated query scans.
func (m *Set) Tables(total, unknown int) {
	if total <= 0 {
		return
	}
	m.ScannedTables.WithLabelValues("true").Add(float64(total - unknown))
	m.ScannedTables.WithLabelValues("false").Add(float64(unknown))
	m.Known.Add(uint64(total - unknown))
	m.Unknown.Add(uint64(unknown))
}

// State is what the gauges read from the server at scrape time.
type State interface {
	// Clusters are the configured clusters, the default first, with their
	// health and load now.
	Clusters() []Cluster
	// Queue is the admission queue's length and the admitted queries in
	// flight; ok is false without admission control or when the store
	// did not answer.
	Queue() (queued, inflight int, ok bool)
}

// Cluster is one cluster as the metrics label and gauge it.
type Cluster struct {
	Name, Class string
	// Engine is "trino", "presto" or "unknown" (not yet detected).
	Engine  string
	Healthy bool
	Load    int64 // running plus queued queries at the last check
}

// stateCollector reports, at scrape time, the gauges that describe the
// server's state: cluster health and load, the admission queue, and the
// share of scanned tables the model never saw (absent until a query
// scanned one).
type stateCollector struct {
	m     *Set
	state State
}

var (
	descClusterHealthy = prometheus.NewDesc("prestroid_cluster_healthy",
		"1 when the cluster's /v1/info says it is up.", []string{"cluster"}, nil)
	descClusterEngine = prometheus.NewDesc("prestroid_cluster_engine",
		"1 for the cluster's engine: trino, presto, or unknown until the monitor detects it.", []string{"cluster", "engine"}, nil)
	descClusterQueries = prometheus.NewDesc("prestroid_cluster_queries",
		"Running plus queued queries on the cluster at the last check.", []string{"cluster"}, nil)
	descQueueLength = prometheus.NewDesc("prestroid_queue_length",
		"Queries waiting in the admission queue.", nil, nil)
	descInflight = prometheus.NewDesc("prestroid_inflight_queries",
		"Admitted queries in flight (admission control).", nil, nil)
	descUnseenShare = prometheus.NewDesc("prestroid_unseen_table_share_ratio",
		"Share of scanned tables the model has never seen, over all estimated queries.", nil, nil)
)

var _ prometheus.Collector = (*stateCollector)(nil)

// Describe implements prometheus.Collector.
func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descClusterHealthy
	ch <- descClusterEngine
	ch <- descClusterQueries
	ch <- descQueueLength
	ch <- descInflight
	ch <- descUnseenShare
}

// Collect implements prometheus.Collector.
func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	for _, cl := range c.state.Clusters() {
		h := 0.0
		if cl.Healthy {
			h = 1
		}
		ch <- prometheus.MustNewConstMetric(descClusterHealthy, prometheus.GaugeValue, h, cl.Name)
		if cl.Engine != "" {
			ch <- prometheus.MustNewConstMetric(descClusterEngine, prometheus.GaugeValue, 1, cl.Name, cl.Engine)
		}
		ch <- prometheus.MustNewConstMetric(descClusterQueries, prometheus.GaugeValue, float64(cl.Load), cl.Name)
	}
	if q, in, ok := c.state.Queue(); ok {
		ch <- prometheus.MustNewConstMetric(descQueueLength, prometheus.GaugeValue, float64(q))
		ch <- prometheus.MustNewConstMetric(descInflight, prometheus.GaugeValue, float64(in))
	}
	known, unknown := c.m.Known.Load(), c.m.Unknown.Load()
	if known+unknown > 0 {
		ch <- prometheus.MustNewConstMetric(descUnseenShare, prometheus.GaugeValue, float64(unknown)/float64(known+unknown))
	}
}

var (
	descCacheHits = prometheus.NewDesc("prestroid_estimator_cache_hits_total",
		"Estimator cache lookups that hit, by cache.", []string{"cache"}, nil)
	descCacheMisses = prometheus.NewDesc("prestroid_estimator_cache_misses_total",
		"Estimator cache lookups that missed, by cache.", []string{"cache"}, nil)
	descCacheEvictions = prometheus.NewDesc("prestroid_estimator_cache_evictions_total",
		"Entries evicted from an estimator cache, by cache.", []string{"cache"}, nil)
	descCacheEntries = prometheus.NewDesc("prestroid_estimator_cache_entries",
		"Entries an estimator cache holds now, by cache (expired ones until the cache drops them, within about 10 s).", []string{"cache"}, nil)
	descCacheBytes = prometheus.NewDesc("prestroid_estimator_cache_bytes",
		"About the memory an estimator cache's entries take now, by cache: for the byte-bounded plan and predicate caches (estimator.plan_cache_bytes, estimator.vector_cache_bytes) their cost against the bound; for the estimate and table_stats caches, their entries' sizes.", []string{"cache"}, nil)
	descBatchQueue = prometheus.NewDesc("prestroid_estimator_batch_queue_depth",
		"Inferences waiting for the estimator's micro-batcher.", nil, nil)
	descHistoryEntries = prometheus.NewDesc("prestroid_history_entries",
		"Keys held by the estimate history (statements, shapes, residuals).", nil, nil)
	descHistoryObserved = prometheus.NewDesc("prestroid_history_observed_total",
		"Completed queries the estimate history learned from.", nil, nil)
	descBackgroundExplains = prometheus.NewDesc("prestroid_background_explains_total",
		"EXPLAINs (and the model) run off the hot path after the text stage routed the query, by result: done, failed, skipped (no EXPLAIN slot free). prestroid_explains_total counts those on the hot path.", []string{"result"}, nil)
	descExplainsByReason = prometheus.NewDesc("prestroid_explains_by_reason_total",
		"EXPLAIN round trips the estimator sent to the clusters, by reason: hot (on the hot path: the plan could change the decision), learn (in the background: a shape with few explained runs or wide residuals), drift (the sampled fraction of well-known shapes); and those not sent: skipped_ceiling (over estimator.explain_rate), skipped_known (a well-known shape, or a statement another user's EXPLAIN is planning). A cached estimate runs none.", []string{"reason"}, nil)
	descIntervalFactor = prometheus.NewDesc("prestroid_estimator_interval_factor",
		"The factor each stage's 80% interval is served with, by engine, target (cpu, peak_memory, elapsed) and source (the stage that answered): learned from whether the intervals it served held what the statements took, so that four in five do (1: as the stage computes it; below 1: narrower).", []string{"engine", "target", "source"}, nil)
	descIntervalOutcomes = prometheus.NewDesc("prestroid_estimator_interval_outcomes",
		"Completed statements each stage's interval factor (prestroid_estimator_interval_factor) learned from, by engine, target and source.", []string{"engine", "target", "source"}, nil)
	descHistoryDropped = prometheus.NewDesc("prestroid_history_dropped_total",
		"Completed queries the estimate history could not learn from (its write queue was full).", nil, nil)
	descHistoryStoreErrors = prometheus.NewDesc("prestroid_history_store_errors_total",
		"Calls to the shared estimate history store (Redis) that failed.", nil, nil)
	descHistoryStoreDropped = prometheus.NewDesc("prestroid_history_store_dropped_total",
		"History updates (one key of one completed query each) lost because the shared store (Redis) failed.", nil, nil)
	descHistoryHandoffs = prometheus.NewDesc("prestroid_history_handoffs_total",
		"Queries passed between replicas sharing the history in Redis so that the one that sees a query's last page learns from it, by result: left (this replica placed the query and left what its estimate was based on), refreshed (wrote it again with its background model's numbers), taken (this replica saw the last page of a query another placed and learned from what it left), missed (nothing was left, or it had expired).", []string{"result"}, nil)
	descHistoryStoreDown = prometheus.NewDesc("prestroid_history_store_down",
		"1 while the shared estimate history store (Redis) is unreachable: reads miss, writes are dropped.", nil, nil)
)

// estimatorCollector exports the estimator's figures at scrape time.
type estimatorCollector struct{ stats func() estimate.Stats }

var _ prometheus.Collector = (*estimatorCollector)(nil)

// Describe implements prometheus.Collector.
func (c *estimatorCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descCacheHits
	ch <- descCacheMisses
	ch <- descCacheEvictions
	ch <- descCacheEntries
	ch <- descCacheBytes
	ch <- descBatchQueue
	ch <- descHistoryEntries
	ch <- descHistoryObserved
	ch <- descHistoryDropped
	ch <- descHistoryStoreErrors
	ch <- descHistoryStoreDropped
	ch <- descHistoryStoreDown
	ch <- descHistoryHandoffs
	ch <- descBackgroundExplains
	ch <- descExplainsByReason
	ch <- descIntervalFactor
	ch <- descIntervalOutcomes
}

// Collect implements prometheus.Collector.
func (c *estimatorCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, cs := range st.Caches {
		ch <- prometheus.MustNewConstMetric(descCacheHits, prometheus.CounterValue, float64(cs.Hits), cs.Name)
		ch <- prometheus.MustNewConstMetric(descCacheMisses, prometheus.CounterValue, float64(cs.Misses), cs.Name)
		ch <- prometheus.MustNewConstMetric(descCacheEvictions, prometheus.CounterValue, float64(cs.Evictions), cs.Name)
		ch <- prometheus.MustNewConstMetric(descCacheEntries, prometheus.GaugeValue, float64(cs.Entries), cs.Name)
		ch <- prometheus.MustNewConstMetric(descCacheBytes, prometheus.GaugeValue, float64(cs.Bytes), cs.Name)
	}
	ch <- prometheus.MustNewConstMetric(descBatchQueue, prometheus.GaugeValue, float64(st.BatchQueueDepth))
	if h := st.History; h != nil {
		ch <- prometheus.MustNewConstMetric(descHistoryEntries, prometheus.GaugeValue, float64(h.Entries))
		ch <- prometheus.MustNewConstMetric(descHistoryObserved, prometheus.CounterValue, float64(h.Observed))
		ch <- prometheus.MustNewConstMetric(descHistoryDropped, prometheus.CounterValue, float64(h.Dropped))
		if s := h.Store; s != nil {
			down := 0.0
			if s.Down {
				down = 1
			}
			ch <- prometheus.MustNewConstMetric(descHistoryStoreErrors, prometheus.CounterValue, float64(s.Errors))
			ch <- prometheus.MustNewConstMetric(descHistoryStoreDropped, prometheus.CounterValue, float64(s.Dropped))
			ch <- prometheus.MustNewConstMetric(descHistoryHandoffs, prometheus.CounterValue, float64(s.HandoffsLeft), "left")
			ch <- prometheus.MustNewConstMetric(descHistoryHandoffs, prometheus.CounterValue, float64(s.HandoffsRefreshed), "refreshed")
			ch <- prometheus.MustNewConstMetric(descHistoryHandoffs, prometheus.CounterValue, float64(s.HandoffsTaken), "taken")
			ch <- prometheus.MustNewConstMetric(descHistoryHandoffs, prometheus.CounterValue, float64(s.HandoffsMissed), "missed")
			ch <- prometheus.MustNewConstMetric(descHistoryStoreDown, prometheus.GaugeValue, down)
		}
	}
	for _, iv := range st.Intervals {
		ch <- prometheus.MustNewConstMetric(descIntervalFactor, prometheus.GaugeValue, iv.Factor, iv.Engine, iv.Target, iv.Source)
		ch <- prometheus.MustNewConstMetric(descIntervalOutcomes, prometheus.GaugeValue, float64(iv.Outcomes), iv.Engine, iv.Target, iv.Source)
	}
	if b := st.Background; b != nil {
		ch <- prometheus.MustNewConstMetric(descBackgroundExplains, prometheus.CounterValue, float64(b.Done), "done")
		ch <- prometheus.MustNewConstMetric(descBackgroundExplains, prometheus.CounterValue, float64(b.Failed), "failed")
		ch <- prometheus.MustNewConstMetric(descBackgroundExplains, prometheus.CounterValue, float64(b.Skipped), "skipped")
	}
	if x := st.Explains; x != nil {
		for _, r := range []struct {
			n      uint64
			reason string
		}{{x.Hot, "hot"}, {x.Learn, "learn"}, {x.Drift, "drift"}, {x.SkippedCeiling, "skipped_ceiling"}, {x.SkippedKnown, "skipped_known"}} {
			ch <- prometheus.MustNewConstMetric(descExplainsByReason, prometheus.CounterValue, float64(r.n), r.reason)
		}
	}
}

// Handler serves reg in the Prometheus exposition format (content
// negotiated by promhttp) through fasthttp's net/http adaptor.
func Handler(reg *prometheus.Registry, log *slog.Logger) fasthttp.RequestHandler {
	return fasthttpadaptor.NewFastHTTPHandler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog:      promLogger{log},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg, // promhttp_metric_handler_errors_total
	}))
}

// promLogger hands promhttp's errors (a collector that failed) to slog.
type promLogger struct{ l *slog.Logger }

func (p promLogger) Println(v ...any) { p.l.Error("metrics: " + fmt.Sprint(v...)) }

// Store is what the admission store reports to.
func (m *Set) Store() admission.Metrics {
	return admission.Metrics{StoreErrors: m.StoreErrors, StoreFallback: m.StoreFallback}
}
