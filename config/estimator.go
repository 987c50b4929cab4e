package config

import (
	"fmt"
	"strconv"
	"time"
)

// Estimator configures the cost model: which bundle, how ONNX Runtime runs
// it, batching and caches.
type Estimator struct {
	// Disabled turns estimation off: queries go to the default cluster
	// unannotated and the estimate endpoints answer with an error.
	Disabled bool `yaml:"disabled"`

	// Model is a model bundle directory (estimator/BUNDLE.md). It is
	// reloaded on SIGHUP and when its files change. Empty means the
	// default bundle embedded in the binary; a binary built without one
	// then serves no estimates (and says so at startup).
	Model string `yaml:"model"`

	// ORTLib is the ONNX Runtime shared library (libonnxruntime.so.1,
	// 1.30.x); PRESTROID_ORT_LIB sets it. Empty means
	// ${PRESTROID_CACHE:-~/.cache/prestroid}/ort/1.30.0/libonnxruntime.so.1,
	// where `make ort` (scripts/install-ort.sh) puts it: FillDefaults
	// resolves that path in the process that loads the library.
	ORTLib string `yaml:"ort_lib"`

	// IntraOpThreads is each inference's thread count. Zero means 1 (many
	// small concurrent batches scale better single-threaded); -1 means
	// ONNX Runtime's default (one per core).
	IntraOpThreads int `yaml:"intra_op_threads"`

	// CUDA runs the model with the CUDA execution provider on device
	// CUDADevice. It needs the GPU build of ONNX Runtime (from the Maven
	// artifact com.microsoft.onnxruntime:onnxruntime_gpu; see
	// estimator/onnx). False (the default) runs on CPU.
	CUDA       bool `yaml:"cuda"`
	CUDADevice int  `yaml:"cuda_device"`

	// MaxBatch is the largest inference batch across concurrent requests.
	// Zero means 32; 1 turns micro-batching off.
	MaxBatch int `yaml:"max_batch"`
	// MaxWait holds a batch open this long for more requests. Zero means
	// no wait: a batch is what queued while inference was busy.
	MaxWait Duration `yaml:"max_wait"`
	// Workers is the number of concurrent inference runs. Zero means
	// GOMAXPROCS.
	Workers int `yaml:"workers"`

	// ExplainTimeout bounds one EXPLAIN. Zero means 30s. (Queries through
	// the proxy are also bounded by the proxy's estimate budget.)
	ExplainTimeout Duration `yaml:"explain_timeout"`

	// CacheTTL is how long an estimate (and its plan) is reused for the
	// same query fingerprint, catalog, schema, session and model, whoever
	// runs it (another user's repeat runs no EXPLAIN). Zero means
	// 60s; negative turns the estimate cache off.
	CacheTTL Duration `yaml:"cache_ttl"`
	// CacheShapeOnly keys the estimate cache on the statement's shape
	// alone, as before: a statement whose range literals (the operands
	// of <, <=, >, >=, BETWEEN) moved is then served the estimate made
	// for the first range of its shape until cache_ttl. False (the
	// default) keys on the range literals too: on a table partitioned or
	// sorted by the column, a moved range reads other data.
	CacheShapeOnly bool `yaml:"cache_shape_only"`
	// CacheEntries bounds the estimate cache. Zero means 100000.
	CacheEntries int `yaml:"cache_entries"`
	// PlanCacheBytes bounds the cache of the EXPLAIN plans behind cached
	// estimates (same key and TTL), so that a query served from the
	// estimate cache still has its plan in the feedback log. Zero means
	// 64 MiB; negative turns it off (such feedback records then have no
	// plan).
	PlanCacheBytes int64 `yaml:"plan_cache_bytes"`
	// VectorCacheBytes bounds the predicate-vector cache. Zero means
	// 64 MiB; negative turns it off.
	VectorCacheBytes int64 `yaml:"vector_cache_bytes"`

	// TableStats is the cache of the statistics (SHOW STATS: rows and
	// data size) of the tables statements name, which a text model that
	// reads them (a bundle's text featurizer hashed-tokens-tablestats-v2)
	// scores with. Fetched in the background as the caller, per table and
	// caller; never on the hot path.
	TableStats TableStats `yaml:"table_stats"`

	// ReloadInterval is how often the bundle's files are checked for
	// changes. Zero means 5s; negative means only SIGHUP reloads.
	ReloadInterval Duration `yaml:"reload_interval"`

	// CheapCPUSeconds is the constant estimate of statements cheap by
	// nature (SHOW, DESCRIBE, queries reading only system.*,
	// information_schema or VALUES), made without EXPLAIN. Zero means
	// 0.01 s.
	CheapCPUSeconds float64 `yaml:"cheap_cpu_seconds"`
	// TextMaxSeconds: under explain: when-uncertain the text model decides
	// a statement only when the high end of its 80% interval is at most
	// this many CPU seconds; a statement that may cost more is explained
	// (its EXPLAIN, tens of milliseconds of planning, is small beside it,
	// and the plan-based number is what its resource estimate and cost
	// accounting carry). Zero means 1 s; negative means no bound (the
	// classes alone decide).
	TextMaxSeconds float64 `yaml:"text_max_seconds"`
	// DecisionBounds are the values, per target, at which a decision the
	// engine makes from a query's resource estimate changes: the ranges
	// the deployment's Trino resource-group selectors select on
	// (resourceEstimate executionTime, cpuTime and peakMemory, which the
	// proxy's X-Trino-Resource-Estimate carries). Under explain:
	// when-uncertain they count as the routing classes' bounds do: a
	// statement whose estimate before the plan lies on either side of one
	// of them, or that does not predict a target with bounds, is explained.
	// Empty (the default) means the routing classes' bounds alone.
	DecisionBounds DecisionBounds `yaml:"decision_bounds"`
	// ExplainConcurrency bounds the EXPLAINs running at once on each
	// cluster; over it on every healthy cluster, a query is estimated
	// from history or fails open at once (never queued). Zero means 16;
	// negative means unbounded.
	ExplainConcurrency int `yaml:"explain_concurrency"`
	// ExplainRate is a ceiling on the EXPLAINs per second sent to each
	// cluster (hot path and background together; a token bucket of
	// ExplainBurst): over it a statement is decided by the other stages
	// (history, text, else fail open) and a background EXPLAIN is dropped,
	// each counted in prestroid_explains_by_reason_total{reason=
	// "skipped_ceiling"}. Zero (the default) means no ceiling.
	ExplainRate float64 `yaml:"explain_rate"`
	// ExplainBurst is the EXPLAINs a cluster may take at once under
	// ExplainRate. Zero means ExplainRate rounded up, at least 1. Near
	// the ceiling the statements the text stage is likeliest to place in
	// the wrong class take the tokens first, background EXPLAINs last
	// (docs/cascade.md).
	ExplainBurst int `yaml:"explain_burst"`
	// LearnMinRuns: a background EXPLAIN (after the history or the text
	// model answered before the plan) runs only for a statement whose
	// shape has fewer explained runs than this (runs whose model number
	// the history learned), or whose residual spread (std dev of ln actual
	// − ln model) is above LearnMaxSpread; the shapes the model knows
	// well are explained only as DriftSample of their statements. Zero
	// means 5; negative means every background EXPLAIN runs.
	LearnMinRuns int `yaml:"learn_min_runs"`
	// LearnMaxSpread is that residual spread, in ln CPU. Zero means 0.5;
	// negative means no spread rule.
	LearnMaxSpread float64 `yaml:"learn_max_spread"`
	// DriftSample is the fraction of the statements of well-known shapes
	// still explained in the background, so that the residuals follow a
	// drifting cluster. Zero means 0.05; negative means none; at most 1.
	DriftSample float64 `yaml:"drift_sample"`
	// Explain says when a new statement pays for an EXPLAIN on the hot
	// path (the estimate cascade's text stage): "always" (every statement
	// the history cannot answer is explained before it is sent),
	// "when-uncertain" (the text stage's interval, from the SQL text and
	// session alone, routes at once when it lies inside one class or when
	// the plan's estimate could not move the query to another class under
	// routing.class_quantile; the EXPLAIN and the model then run in the
	// background for the feedback record and the history) or "never" (the
	// text stage answers whenever the bundle has one). Empty means
	// "when-uncertain" (DefaultExplain), or the deprecated routing.explain
	// when that is set. PRESTROID_EXPLAIN sets it.
	Explain string `yaml:"explain"`
	// History is what the estimate cascade learns from completed queries.
	History History `yaml:"history"`
}

// DecisionBounds are estimator.decision_bounds: per target, the bounds
// (in any order) at which a decision made from the estimate changes.
type DecisionBounds struct {
	// CPU are CPU times ("30s", "5m").
	CPU []Duration `yaml:"cpu"`
	// PeakMemory are peak memory sizes in Trino's data size syntax ("4GB":
	// 4 GiB, as Trino reads it).
	PeakMemory []DataSize `yaml:"peak_memory"`
	// Elapsed are elapsed (wall-clock) times ("30s", "10m").
	Elapsed []Duration `yaml:"elapsed"`
}

// History configures the estimate cascade's history store (docs/design.md §5.1):
// per statement and per shape, the recency-weighted log CPU time of
// completed queries, and the residuals and calibrations learned from them.
type History struct {
	// Disabled turns the history stages off: every estimate is the model's.
	Disabled bool `yaml:"disabled"`
	// Path is the history file (an embedded go.etcd.io/bbolt database; it
	// survives restarts; one process at a time). Empty means in memory:
	// learned again after each restart, unless the history is in Redis.
	Path string `yaml:"path"`
	// Redis is the URL of a Redis holding the history for every replica
	// configured with it (the same form as admission.redis; never logged;
	// PRESTROID_HISTORY_REDIS sets it). Empty means admission.redis when
	// that is set and Path is not (FillDefaults copies it): replicas that
	// share admission share what they learn. Setting both Redis and Path
	// is refused.
	Redis string `yaml:"redis"`
	// RedisPrefix starts the history's keys (Prefix+"h:"…). Empty means
	// admission.redis_prefix: deployments sharing one Redis keep apart by
	// prefix.
	RedisPrefix string `yaml:"redis_prefix"`
	// RedisTimeout bounds one history read from Redis on the proxy's hot
	// path; past it (or with Redis down) the read misses and the cascade
	// goes on to EXPLAIN. Zero means 50ms.
	RedisTimeout Duration `yaml:"redis_timeout"`
	// MaxEntries bounds the keys held (statements, shapes, residuals);
	// the least recently updated are evicted. Zero means 100000.
	MaxEntries int `yaml:"max_entries"`
	// MinCount is how many runs of a statement make its history usable
	// without EXPLAIN. Zero means 2.
	MinCount int `yaml:"min_count"`
	// MaxSpread is the largest standard deviation of a statement's ln CPU
	// for which its history is trusted without EXPLAIN. Zero means 0.5.
	MaxSpread float64 `yaml:"max_spread"`
	// Alpha is the recency weight of each new run (the first runs weigh
	// 1/n: a plain mean). Zero means 0.2.
	Alpha float64 `yaml:"alpha"`
	// Shrink is the prior weight, in runs, pulling a shape's residual
	// toward the global offset and the global offset toward 0. Zero means 1.
	Shrink float64 `yaml:"shrink"`
	// ModelSigma is the prior uncertainty of a model estimate (standard
	// deviation of ln CPU) until this deployment's own is learned. Zero
	// means 1.
	ModelSigma float64 `yaml:"model_sigma"`
	// RepeatSigma is the prior of the run-to-run noise (standard deviation
	// of ln CPU between runs of one statement: load, JIT warmth), which
	// floors the history's intervals, until this deployment's own repeats
	// teach it (each weighs as much as the prior after Shrink of them).
	// The peak memory and the elapsed time learn their own noise from the
	// same prior. Zero means 0.25.
	RepeatSigma float64 `yaml:"repeat_sigma"`
	// MinCalibration is how many explained runs the optimizer calibration
	// (Trino's cpuCost → seconds) needs before it stands in for a failing
	// model. Zero means 10.
	MinCalibration int `yaml:"min_calibration"`
}

func (e *Estimator) applyEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup("PRESTROID_MODEL"); ok && v != "" {
		e.Model = v
	}
	if v, ok := lookup("PRESTROID_ORT_LIB"); ok && v != "" {
		e.ORTLib = v
	}
	if v, ok := lookup("PRESTROID_HISTORY_REDIS"); ok && v != "" {
		e.History.Redis = v
	}
	if v, ok := lookup("PRESTROID_EXPLAIN"); ok && v != "" {
		e.Explain = v
	}
}

func (c *Config) validateEstimator() error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
	}
	e := &c.Estimator
	for _, f := range []struct {
		key string
		v   int64
	}{{"estimator.max_batch", int64(e.MaxBatch)}, {"estimator.workers", int64(e.Workers)},
		{"estimator.cache_entries", int64(e.CacheEntries)}, {"estimator.cuda_device", int64(e.CUDADevice)},
		{"estimator.max_wait", int64(e.MaxWait)}, {"estimator.explain_timeout", int64(e.ExplainTimeout)},
		{"estimator.table_stats.refresh", int64(e.TableStats.Refresh)}, {"estimator.table_stats.expire", int64(e.TableStats.Expire)},
		{"estimator.table_stats.retry", int64(e.TableStats.Retry)}, {"estimator.table_stats.max_entries", int64(e.TableStats.MaxEntries)}} {
		if f.v < 0 {
			return bad(f.key, f.v, "must not be negative")
		}
	}
	for _, d := range []struct {
		key string
		vs  []Duration
	}{{"estimator.decision_bounds.cpu", e.DecisionBounds.CPU}, {"estimator.decision_bounds.elapsed", e.DecisionBounds.Elapsed}} {
		for _, v := range d.vs {
			if v <= 0 {
				return bad(d.key, v, "a bound must be positive")
			}
		}
	}
	for _, v := range e.DecisionBounds.PeakMemory {
		if !(float64(v) > 0) {
			return bad("estimator.decision_bounds.peak_memory", v, "a bound must be positive")
		}
	}
	if ts := e.TableStats; ts.Expire > 0 && ts.Refresh > ts.Expire {
		return bad("estimator.table_stats.expire", ts.Expire, "must be at least estimator.table_stats.refresh ("+time.Duration(ts.Refresh).String()+")")
	}
	if e.IntraOpThreads < -1 {
		return bad("estimator.intra_op_threads", e.IntraOpThreads, "want -1 (ONNX Runtime default), 0 (1 thread) or a thread count")
	}
	h := &e.History
	for _, f := range []struct {
		key string
		v   float64
	}{{"estimator.cheap_cpu_seconds", e.CheapCPUSeconds}, {"estimator.history.max_entries", float64(h.MaxEntries)},
		{"estimator.history.min_count", float64(h.MinCount)}, {"estimator.history.max_spread", h.MaxSpread},
		{"estimator.history.shrink", h.Shrink}, {"estimator.history.model_sigma", h.ModelSigma},
		{"estimator.history.repeat_sigma", h.RepeatSigma},
		{"estimator.history.min_calibration", float64(h.MinCalibration)}} {
		if f.v < 0 || f.v != f.v {
			return bad(f.key, f.v, "must not be negative")
		}
	}
	if h.Redis != "" {
		if h.Path != "" {
			return bad("estimator.history.path", strconv.Quote(h.Path), "set either path (a file per replica) or redis (shared), not both")
		}
		if why := badRedisURL(h.Redis); why != "" {
			// The value may hold a password: name the key, not the value.
			return bad("estimator.history.redis", "(not shown)", why)
		}
	}
	if h.RedisTimeout < 0 {
		return bad("estimator.history.redis_timeout", h.RedisTimeout, "must not be negative")
	}
	if !(h.Alpha >= 0 && h.Alpha <= 1) {
		return bad("estimator.history.alpha", h.Alpha, "want a weight in (0, 1]")
	}
	if !(e.ExplainRate >= 0) {
		return bad("estimator.explain_rate", e.ExplainRate, "want EXPLAINs per second per cluster, 0 for no ceiling")
	}
	if e.ExplainBurst < 0 {
		return bad("estimator.explain_burst", e.ExplainBurst, "must not be negative")
	}
	if e.LearnMaxSpread != e.LearnMaxSpread {
		return bad("estimator.learn_max_spread", e.LearnMaxSpread, "not a number")
	}
	if !(e.DriftSample <= 1) {
		return bad("estimator.drift_sample", e.DriftSample, "want a fraction of at most 1 (negative: none)")
	}
	if e.MaxBatch > 4096 {
		return bad("estimator.max_batch", e.MaxBatch, "want at most 4096")
	}
	return nil
}

// TableStats configures the table-statistics cache (estimator.table_stats).
type TableStats struct {
	// Disabled turns it off: the text model sees every table's size as
	// unknown (and, reading sizes, defers every statement that names a
	// table to the plan under explain: when-uncertain).
	Disabled bool `yaml:"disabled"`
	// Refresh is the age after which a table's statistics are fetched
	// again (served meanwhile). Zero means 1h.
	Refresh Duration `yaml:"refresh"`
	// Expire is the age after which they are no longer served. Zero
	// means 24h; at least Refresh.
	Expire Duration `yaml:"expire"`
	// Retry is how long a failed fetch (no such table, access denied) is
	// remembered before the table is asked again. Zero means 5m.
	Retry Duration `yaml:"retry"`
	// MaxEntries bounds the cache (tables × callers). Zero means 100000.
	MaxEntries int `yaml:"max_entries"`
}
