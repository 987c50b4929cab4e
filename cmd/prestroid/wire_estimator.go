package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/onnx"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/estimator/tablestats"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/models"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/gateway"
	"github.com/prestroid/prestroid/proxy/guardrail"
	"github.com/prestroid/prestroid/proxy/protocol"
)

// embeddedModel is the default model bundle compiled into the binary (the
// root of the FS holds manifest.json ...); nil would mean none.
var embeddedModel fs.FS = models.Default()

// estimatorAdapter serves proxy.Estimator with an *estimator.Service.
type estimatorAdapter struct {
	svc *estimator.Service
}

var _ proxy.Estimator = estimatorAdapter{}

func (a estimatorAdapter) Estimate(ctx context.Context, q proxy.Query) (estimate.Estimate, error) {
	// Statements that must not be explained (CREATE TABLE AS: see
	// plan.StatementKind.SafeToExplain) come back not estimated, with the reason.
	planners := q.Planners
	if len(planners) == 0 {
		planners = []string{q.Server}
	}
	e, err := a.svc.EstimateFor(ctx, q.Engine, planners, q.SQL, q.Header)
	var he *plan.HTTPError
	if errors.As(err, &he) && (he.StatusCode == http.StatusUnauthorized || he.StatusCode == http.StatusForbidden) {
		// Trino refused the caller's credentials: the proxy relays this
		// answer and gives the query no estimate, queue slot or route.
		return estimate.Estimate{}, &frontdoor.AuthError{StatusCode: he.StatusCode, Header: he.Header, Body: []byte(he.Body)}
	}
	if errors.Is(err, estimator.ErrExplainBusy) {
		return estimate.Estimate{}, fmt.Errorf("%w: %w", proxy.ErrEstimatorBusy, err)
	}
	var ue *estimator.UnplacedError
	if errors.As(err, &ue) {
		return estimate.Estimate{Learn: estimator.MarshalBasis(ue.Basis)}, err // fails open; the outcome still teaches the calibration
	}
	if err != nil {
		return estimate.Estimate{}, err
	}
	return *e, nil
}

// Record learns from a completed query (proxy.FeedbackSink): the
// estimate's basis and the query's actual CPU time, peak memory and
// elapsed time (actual) go to the estimator's history.
func (a estimatorAdapter) Record(c proxy.Completed) { a.recordThen(c, nil) }

// recordThen is Record, then hands c to next. When the text stage routed
// the query and its background EXPLAIN + model is pending, both wait for it
// on a goroutine the estimator's Close waits for (at most the EXPLAIN
// timeout + 5 s), so that the history learns the model's number and next
// (the feedback log) gets the plan and the model's number for the training
// record. The estimator must therefore close before the sinks after it.
func (a estimatorAdapter) recordThen(c proxy.Completed, next []proxy.FeedbackSink) {
	// Learn is set on estimates and on failed-open queries whose plan can
	// still teach the optimizer calibration (estimator.UnplacedError).
	b := estimator.UnmarshalBasis(c.Estimate.Learn)
	if b == nil && c.Untracked && c.State == "FINISHED" && c.Stats.RolledUp() {
		// Placed by another replica: learned from what it left (Leave).
		a.svc.ObserveElsewhere(c.QueryID, actual(c.Stats))
	}
	finish := func() {
		// A final page without its tasks' figures (PageStats.RolledUp)
		// teaches nothing: 0 ms would be learned as a free query.
		if b != nil && c.State == "FINISHED" && c.Stats.RolledUp() {
			a.svc.Observe(b, actual(c.Stats))
		}
		for _, f := range next {
			f.Record(c)
		}
	}
	if !a.svc.SettleThen(b, func(bg estimator.Background, ok bool) {
		if ok && bg.Err == nil {
			c.Estimate.Plan, c.Estimate.ModelCPUSeconds = bg.Plan, bg.ModelCPUSeconds
		}
		finish()
	}) {
		finish()
	}
}

var _ proxy.FeedbackSink = estimatorAdapter{}

// Leave and Forget make the adapter the proxy's Handoff (a history shared
// in Redis: estimator.Service.HasHandoff).
func (a estimatorAdapter) Leave(id string, learn []byte) bool { return a.svc.Leave(id, learn) }
func (a estimatorAdapter) Forget(id string)                   { a.svc.Forget(id) }

var _ proxy.Handoff = estimatorAdapter{}

// actual is what a final page says the query cost, per target: its CPU
// time, and its peak memory and elapsed time when positive (a figure of 0
// is not known: estimate.Actual).
func actual(st protocol.PageStats) estimate.Actual {
	return estimate.Actual{CPUSeconds: float64(st.CPUTimeMillis) / 1000,
		PeakMemoryBytes: float64(max(st.PeakMemoryBytes, 0)), ElapsedSeconds: float64(max(st.ElapsedTimeMillis, 0)) / 1000}
}

// feedbackSinks hands each completed query to every sink in order; the
// estimator's sink hands it on to those after it (recordThen).
type feedbackSinks []proxy.FeedbackSink

func (fs feedbackSinks) Record(c proxy.Completed) {
	for i, f := range fs {
		if a, ok := f.(estimatorAdapter); ok {
			a.recordThen(c, fs[i+1:])
			return
		}
		f.Record(c)
	}
}

// errHistory marks a failure to open the configured history store.
var errHistory = errors.New("estimator.history")

// newHistory opens the estimate history as configured: nil when disabled,
// Redis at h.Redis (shared by the replicas; after FillDefaults, the
// admission's Redis unless a Path is set), the bbolt file at Path, else
// memory.
func newHistory(h config.History, logger *slog.Logger) (history.Store, error) {
	switch {
	case h.Disabled:
		return nil, nil
	case h.Redis != "":
		return history.OpenRedis(history.RedisOptions{URL: h.Redis, Prefix: h.RedisPrefix, MaxEntries: h.MaxEntries,
			Timeout: time.Duration(h.RedisTimeout), Logger: logger})
	case h.Path != "":
		return history.OpenBolt(h.Path, h.MaxEntries)
	default:
		return history.NewMemory(h.MaxEntries), nil
	}
}

// historyStore names the configured store for the startup log line (never
// the Redis URL: it may hold a password).
func historyStore(h config.History) string {
	switch {
	case h.Redis != "":
		return "redis"
	case h.Path != "":
		return "bbolt"
	}
	return "memory"
}

// cascadeOptions maps the configuration onto the cascade's options: the
// estimator's (among them when to EXPLAIN on the hot path and the decision
// bounds per target), from routing the classes' bounds and quantile the
// text stage's interval is checked against, and the guardrails' limits
// (a statement a guardrail could refuse gets its plan).
func cascadeOptions(e config.Estimator, r config.Routing, g []config.Guardrail) estimator.CascadeOptions {
	h := e.History
	mode, _ := estimator.ParseExplainMode(e.Explain) // config.Validate refused anything else
	// One bound per class, 0 for an unbounded last one (routing.ClassFor).
	// The classes' memory and elapsed bounds decide a class too (every one
	// of them: over the last one the query is flagged).
	var bounds []float64
	classes := estimator.Bounds{}
	for _, c := range r.Classes {
		bounds = append(bounds, c.MaxCPUSeconds)
		classes[estimate.TargetMemory] = append(classes[estimate.TargetMemory], float64(c.MaxPeakMemory))
		classes[estimate.TargetElapsed] = append(classes[estimate.TargetElapsed], time.Duration(c.MaxElapsed).Seconds())
	}
	return estimator.CascadeOptions{
		CheapCPUSeconds: e.CheapCPUSeconds, ExplainLimit: max(e.ExplainConcurrency, 0),
		MinCount: h.MinCount, MaxSpread: h.MaxSpread, Alpha: h.Alpha, Shrink: h.Shrink,
		ModelSigma: h.ModelSigma, RepeatSigma: h.RepeatSigma, MinCalibration: h.MinCalibration,
		Explain: mode, ClassBounds: bounds, ClassQuantile: r.ClassQuantile, Bounds: estimator.MergeBounds(decisionBounds(e.DecisionBounds), classes, guardrailBounds(g)),
		TextMaxSeconds: max(e.TextMaxSeconds, 0), // negative (no bound): 0 in the cascade
		ExplainRate:    e.ExplainRate, ExplainBurst: e.ExplainBurst,
		// Negative (off): 0 in the cascade.
		LearnMinRuns: max(e.LearnMinRuns, 0), LearnMaxSpread: max(e.LearnMaxSpread, 0), DriftSample: max(e.DriftSample, 0),
	}
}

// guardrailBounds are the guardrails' limits as decision bounds: a
// statement whose pre-plan interval straddles a limit is explained, so a
// refusal (or a pass) rests on the plan.
func guardrailBounds(g []config.Guardrail) estimator.Bounds {
	b := estimator.Bounds{}
	for _, l := range guardrail.Bounds(guardrail.FromConfig(g)) {
		b[l.Target] = append(b[l.Target], l.Value)
	}
	return b
}

// decisionBounds are estimator.decision_bounds as the cascade reads them:
// seconds and bytes per target (estimator.MergeBounds joins them with
// other lists of bounds: routing classes', guardrails' limits).
func decisionBounds(d config.DecisionBounds) estimator.Bounds {
	b := estimator.Bounds{}
	for _, v := range d.CPU {
		b[estimate.TargetCPU] = append(b[estimate.TargetCPU], time.Duration(v).Seconds())
	}
	for _, v := range d.PeakMemory {
		b[estimate.TargetMemory] = append(b[estimate.TargetMemory], float64(v))
	}
	for _, v := range d.Elapsed {
		b[estimate.TargetElapsed] = append(b[estimate.TargetElapsed], time.Duration(v).Seconds())
	}
	return estimator.MergeBounds(b)
}

// newRuntime opens ONNX Runtime as configured (e.ORTLib: FillDefaults
// resolved where `make ort` puts it when none was set).
func newRuntime(e config.Estimator) (*onnx.Runtime, error) {
	return onnx.New(onnx.Options{LibraryPath: e.ORTLib, IntraOpThreads: e.IntraOpThreads, CUDA: e.CUDA, CUDADevice: e.CUDADevice})
}

// errNoModel means no model is configured and none is embedded.
var errNoModel = errors.New("no model bundle: none configured (--model, estimator.model, PRESTROID_MODEL) and none embedded in this binary")

// loadModel loads the configured bundle directory, or the embedded one.
func loadModel(e config.Estimator, rt bundle.Runtime, mo bundle.ModelOptions) (*bundle.Model, error) {
	if e.Model != "" {
		return bundle.LoadDir(rt, mo)(e.Model)
	}
	if embeddedModel == nil {
		return nil, errNoModel
	}
	b, err := bundle.ReadFS(embeddedModel, "embedded:models/default")
	if err != nil {
		return nil, err
	}
	return bundle.LoadModel(b, rt, mo)
}

// statsCache is a cache that reports its counters for /metrics.
type statsCache struct {
	name  string
	stats func() cache.Stats
}

// serviceStats is what newEstimatorService built that reports for
// /metrics: its caches, and the history store when it can fail (Redis).
type serviceStats struct {
	caches  []statsCache
	history history.Reporter // nil: memory, bbolt or none
}

// estimatorStats reads the service's batcher, the named caches and the
// history store at each scrape (proxy.Options.EstimatorStats).
func estimatorStats(svc *estimator.Service, ss serviceStats) func() estimate.Stats {
	return func() estimate.Stats {
		st := estimate.Stats{BatchQueueDepth: svc.QueueDepth()}
		if m := svc.Model(); m != nil {
			st.Model = &estimate.ModelStats{ID: m.ID(), Source: m.Source(), Created: m.Manifest().Created, Loaded: m.Loaded(),
				Untrained: m.Manifest().Untrained()}
		}
		if svc.HasHistory() {
			// Trino's factors always; PrestoDB's once it has outcomes.
			for _, iv := range svc.CoverScales() {
				if iv.Engine == string(dialect.Trino) || iv.Outcomes > 0 {
					st.Intervals = append(st.Intervals, iv)
				}
			}
			hs := svc.HistoryStats()
			st.History = &estimate.HistoryStats{Entries: hs.Entries, Observed: hs.Observed, Dropped: hs.Dropped}
			if ss.history != nil {
				h := ss.history.Health()
				ho := svc.HandoffStats()
				st.History.Store = &estimate.HistoryStoreStats{Errors: h.Errors, Dropped: h.Dropped, Down: h.Down,
					HandoffsLeft: ho.Left, HandoffsRefreshed: ho.Refreshed, HandoffsTaken: ho.Taken, HandoffsMissed: ho.Missed}
			}
		}
		bs := svc.BackgroundStats()
		st.Background = &estimate.BackgroundStats{Done: bs.Done, Failed: bs.Failed, Skipped: bs.Skipped}
		xs := svc.ExplainCounts()
		st.Explains = &estimate.ExplainStats{Hot: xs.Hot, Learn: xs.Learn, Drift: xs.Drift, SkippedCeiling: xs.SkippedCeiling, SkippedKnown: xs.SkippedKnown}
		for _, c := range ss.caches {
			cs := c.stats()
			st.Caches = append(st.Caches, estimate.CacheStats{Name: c.name, Hits: cs.Hits, Misses: cs.Misses, Evictions: cs.Evicted,
				Entries: cs.Entries, Bytes: cs.Bytes})
		}
		return st
	}
}

// estimateSize is about what one cached estimate takes: the struct, the
// bytes of its strings and slices, and ristretto's entry around it (the
// key's hashes, the expiry, the policy's and the expiry bucket's map
// slots: about 100 bytes). Strings shared between estimates (the model's
// ID, the planner) are counted in each.
func estimateSize(e estimate.Estimate) int64 {
	return int64(unsafe.Sizeof(e)) + int64(len(e.Reason)+len(e.Statement)+len(e.Model)+len(e.Planner)+len(e.ExplainQueryID)+
		cap(e.Plan)+cap(e.Learn)) + 100
}

// newEstimatorService builds the estimator service from the configuration
// (caches, batching), which must be filled (config.FillDefaults) and
// valid: every value is used as it is. The caller closes it. reload loads a bundle directory
// the same way (runtime, caches), for the bundle watcher; ss holds the
// caches it built and the history store, for /metrics.
//
// upstreamTLS is the EXPLAIN client's TLS to https clusters; nil means Go's
// defaults.
func newEstimatorService(e config.Estimator, r config.Routing, g []config.Guardrail, upstreamTLS *tls.Config, logger *slog.Logger) (svc *estimator.Service, reload func(dir string) (*bundle.Model, error), ss serviceStats, err error) {
	var caches []statsCache
	var mo bundle.ModelOptions
	if e.VectorCacheBytes >= 0 {
		vc, err := cache.NewVectors(e.VectorCacheBytes)
		if err != nil {
			return nil, nil, serviceStats{}, err
		}
		mo.PredicateCache = vc
		caches = append(caches, statsCache{"predicate", vc.Stats})
	}
	var m *bundle.Model
	rt, err := newRuntime(e)
	if err == nil {
		m, err = loadModel(e, rt, mo)
	}
	if err != nil {
		// A model the configuration names must load. Without the embedded
		// default (no ONNX Runtime, no bundle) the cascade still serves
		// cheap statements and history, and the optimizer's cost once its
		// calibration has learned from the failed-open queries.
		if e.Model != "" || e.History.Disabled {
			return nil, nil, serviceStats{}, err
		}
		logger.Warn("estimator: no model; serving cheap statements, history and, once calibrated, the optimizer's cost", "reason", err)
	}
	so := estimator.ServiceOptions{
		ExplainTimeout: time.Duration(e.ExplainTimeout), MaxBatch: e.MaxBatch,
		MaxWait: time.Duration(e.MaxWait), Workers: e.Workers, Logger: logger,
		Explain: &plan.ExplainClient{HTTP: plan.NewHTTPClient(upstreamTLS)},
		Cascade: cascadeOptions(e, r, g), CacheShapeOnly: e.CacheShapeOnly,
	}
	if so.History, err = newHistory(e.History, logger); err != nil {
		if m != nil {
			m.Close()
		}
		return nil, nil, serviceStats{}, fmt.Errorf("%w: %w", errHistory, err)
	}
	if e.CacheTTL >= 0 {
		ttl := time.Duration(e.CacheTTL) // positive: FillDefaults filled a zero one
		ec, err := cache.NewSizedTTL(int64(e.CacheEntries), ttl, estimateSize)
		if err != nil {
			return nil, nil, serviceStats{}, err
		}
		so.Cache = ec
		caches = append(caches, statsCache{"estimate", ec.Stats})
		if e.PlanCacheBytes >= 0 {
			pc, err := cache.NewPlans(e.PlanCacheBytes, ttl)
			if err != nil {
				return nil, nil, serviceStats{}, err
			}
			so.PlanCache = pc
			caches = append(caches, statsCache{"plan", pc.Stats})
		}
	}
	if m != nil && m.Manifest().Untrained() {
		logger.Warn("estimator: serving an UNTRAINED model (random weights): its estimates mean nothing", "model", m.ID(), "source", m.Source())
	}
	if ts := e.TableStats; !ts.Disabled {
		tc := tablestats.New(tablestats.Options{Refresh: time.Duration(ts.Refresh), Expire: time.Duration(ts.Expire),
			Retry: time.Duration(ts.Retry), MaxEntries: ts.MaxEntries, Timeout: time.Duration(e.ExplainTimeout),
			Fetch: (&tablestats.Client{HTTP: plan.NewHTTPClient(upstreamTLS)}).Fetch, Logger: logger})
		so.TableStats = tc
		caches = append(caches, statsCache{"table_stats", func() cache.Stats {
			st := tc.Stats()
			return cache.Stats{Hits: st.Hits, Misses: st.Misses, Entries: int64(st.Entries), Bytes: st.Bytes}
		}})
	}
	ss.caches = caches
	ss.history, _ = so.History.(history.Reporter)
	return estimator.NewService(m, so), bundle.LoadDir(rt, mo), ss, nil
}

// wireEstimator sets o.Estimator and o.RoutingGroups from the
// configuration and starts the bundle watcher (SIGHUP and file changes)
// for a bundle directory. With no model configured and none embedded, or
// when the ONNX Runtime library is missing for the embedded default, the
// estimator runs without a model (cheap statements, history, the optimizer
// once calibrated; everything else fails open) and says why, or, with the
// history disabled, not at all; a model the configuration names explicitly
// must load. With the estimate history on,
// o.Feedback is set to feedbackSinks holding the estimator (append other
// sinks to it). closeFn stops the estimator and flushes its history
// (call it at shutdown); it is never nil.
func wireEstimator(cfg *config.Config, o *proxy.Options, logger *slog.Logger) (closeFn func(), err error) {
	closeFn = func() {}
	for _, c := range cfg.Routing.Classes {
		g := c.RoutingGroup
		if g == "" {
			g = c.Name
		}
		o.RoutingGroups = append(o.RoutingGroups, gateway.RoutingGroup{Name: g, MaxCPUSeconds: c.MaxCPUSeconds,
			MaxPeakMemory: c.MaxPeakMemory.Bytes(), MaxElapsed: time.Duration(c.MaxElapsed).Seconds(), Class: c.Name})
	}
	e := cfg.Estimator
	if e.Disabled {
		logger.Info("estimator disabled by configuration")
		return closeFn, nil
	}
	svc, reload, ss, err := newEstimatorService(e, cfg.Routing, cfg.Guardrails, o.UpstreamTLS, logger)
	if err != nil {
		// A missing runtime or model with the embedded default runs
		// without estimates; a history file that cannot be opened (held
		// by another process) is a configuration error.
		if e.Model == "" && !errors.Is(err, errHistory) {
			logger.Warn("estimator off: queries are forwarded without estimates", "reason", err)
			return closeFn, nil
		}
		return closeFn, err
	}
	if m := svc.Model(); m != nil {
		logger.Info("estimator ready", "model", m.ID(), "source", m.Source(), "ort", onnx.Version(), "untrained", m.Manifest().Untrained(),
			"text_stage", m.HasText(), "explain", e.Explain)
	}
	svc.DropPlans(cfg.Feedback.Dir == "") // only the feedback log writes plans
	est := estimatorAdapter{svc}
	o.Estimator = est
	o.EstimatorStats = estimatorStats(svc, ss)
	if svc.HasHandoff() {
		o.Handoff = est
	}
	if svc.HasHistory() {
		o.Feedback = feedbackSinks{est}
		logger.Info("estimate history on", "store", historyStore(e.History), "path", e.History.Path,
			"redis_prefix", e.History.RedisPrefix, "max_entries", e.History.MaxEntries)
	}
	if e.Model != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		go svc.WatchBundle(context.Background(), e.Model, reload, time.Duration(e.ReloadInterval), hup)
	}
	return svc.Close, nil
}
