package config

import (
	"os"
	"path/filepath"
	"time"
)

// The defaults: what a field left at its zero value means. FillDefaults
// applies them to a Config, and is the only reader of these constants:
// code configured from a Config receives it filled and validated and
// trusts its values (its own zero values, where it has options of its
// own, mean "off" or "none", never one of these). Tests that need a
// default build a Config and call FillDefaults rather than read them.
const (
	// DefaultListen is Config.Listen's default.
	DefaultListen = "127.0.0.1:8080"
	// DefaultMaxRequestBodyBytes is Config.MaxRequestBodyBytes' default
	// (16 MiB).
	DefaultMaxRequestBodyBytes = 16 << 20
	// DefaultMaxHeaderBytes is Config.MaxHeaderBytes' default (64 KiB).
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultUpstreamTimeout is Config.UpstreamTimeout's default.
	DefaultUpstreamTimeout = 60 * time.Second
	// DefaultUpstreamMaxConns is Config.UpstreamMaxConns' default.
	DefaultUpstreamMaxConns = 1024
	// DefaultPageBufferBytes is Config.PageBufferBytes' default (4 MiB:
	// Trino's pages are ~1 MB at its default target result size).
	DefaultPageBufferBytes = 4 << 20
	// DefaultGzipLevel is Config.GzipLevel's default: level 2 cost no more
	// CPU than level 1 on a real page and sent 3% less (BENCHMARKS.md,
	// "gzip to clients").
	DefaultGzipLevel = 2
	// DefaultPageReadAheadBytes is Config.PageReadAheadBytes' default
	// (256 MiB: 256 queries streaming 1 MB pages at once).
	DefaultPageReadAheadBytes = 256 << 20
	// DefaultQueryMapSize is Config.QueryMapSize's default.
	DefaultQueryMapSize = 100000
	// DefaultIdentity, DefaultIdentityClaim and DefaultCredentialTTL are
	// Config.Identity's, Config.IdentityClaim's and Config.CredentialTTL's
	// defaults.
	DefaultIdentity      = "header"
	DefaultIdentityClaim = "sub"
	DefaultCredentialTTL = time.Minute
	// DefaultJWKSRefresh is JWKS.RefreshInterval's default.
	DefaultJWKSRefresh = time.Hour
	// DefaultLogLevel is Config.LogLevel's default.
	DefaultLogLevel = "info"

	// DefaultFallback is Routing.Fallback's default: the next larger class.
	DefaultFallback = "larger"
	// DefaultEstimateTimeout is Routing.EstimateTimeout's default.
	DefaultEstimateTimeout = 2 * time.Second
	// DefaultMonitorInterval is Routing.MonitorInterval's default.
	DefaultMonitorInterval = 3 * time.Second
	// DefaultMonitorUser is Routing.MonitorUser's default.
	DefaultMonitorUser = "prestroid"
	// DefaultMonitorType is Routing.MonitorType's default: Trino's
	// OpenMetrics query-manager gauges.
	DefaultMonitorType = "metrics"
	// DefaultMonitorMaxBytes is Routing.MonitorMaxBytes' default (1 MiB).
	DefaultMonitorMaxBytes = 1 << 20
	// DefaultClassQuantile is Routing.ClassQuantile's default: an
	// estimate's 90% quantile picks its class, so an uncertain estimate is
	// not sent to a small cluster on a guess.
	DefaultClassQuantile = 0.9
	// DefaultExplain is Estimator.Explain's default (chosen by `prestroid
	// bench replay`, BENCHMARKS.md "EXPLAIN only when it can change the
	// decision").
	DefaultExplain = "when-uncertain"

	// DefaultQueueSize and DefaultMaxWait are Admission.QueueSize's and
	// Admission.MaxWait's defaults.
	DefaultQueueSize = 1000
	DefaultMaxWait   = 10 * time.Minute
	// DefaultMaxQueuedQueryBytes and DefaultMaxQueueBytes are
	// Admission.MaxQueuedQueryBytes' (4 MiB) and Admission.MaxQueueBytes'
	// (256 MiB) defaults.
	DefaultMaxQueuedQueryBytes = 4 << 20
	DefaultMaxQueueBytes       = 256 << 20
	// DefaultIdleRelease is Admission.IdleRelease's default: how long an
	// admitted query may go unseen on any page before its budget is freed
	// (a client that went away; Trino abandons a query after 5 minutes
	// without polls).
	DefaultIdleRelease = 6 * time.Minute
	// DefaultLease, DefaultRedisPrefix, DefaultRedisDown and
	// DefaultReplicas are Admission.Lease's, RedisPrefix's, RedisDown's and
	// Replicas' defaults.
	DefaultLease       = 30 * time.Second
	DefaultRedisPrefix = "prestroid:"
	DefaultRedisDown   = "local"
	DefaultReplicas    = 1

	// DefaultFeedbackRotateRecords and DefaultFeedbackRotateEvery are
	// Feedback.RotateRecords' and Feedback.RotateEvery's defaults.
	DefaultFeedbackRotateRecords = 10000
	DefaultFeedbackRotateEvery   = time.Hour

	// DefaultConsoleDecisions is Console.Decisions' default.
	DefaultConsoleDecisions = 2000
	// DefaultGuardrailQuantile is Guardrail.Quantile's default: the point
	// estimate.
	DefaultGuardrailQuantile = 0.5

	// DefaultUsageBucket, DefaultUsageRetention and DefaultUsageTop are
	// Usage.Bucket's, Usage.Retention's and Usage.Top's defaults.
	DefaultUsageBucket    = time.Minute
	DefaultUsageRetention = 24 * time.Hour
	DefaultUsageTop       = 20

	// DefaultMaxBatch is Estimator.MaxBatch's default.
	DefaultMaxBatch = 32
	// DefaultExplainTimeout is Estimator.ExplainTimeout's default.
	DefaultExplainTimeout = 30 * time.Second
	// DefaultTableStatsRefresh, DefaultTableStatsExpire,
	// DefaultTableStatsRetry and DefaultTableStatsMaxEntries are
	// Estimator.TableStats' defaults.
	DefaultTableStatsRefresh    = time.Hour
	DefaultTableStatsExpire     = 24 * time.Hour
	DefaultTableStatsRetry      = 5 * time.Minute
	DefaultTableStatsMaxEntries = 100_000
	// DefaultCacheTTL is Estimator.CacheTTL's default.
	DefaultCacheTTL = 60 * time.Second
	// DefaultCacheEntries is Estimator.CacheEntries' default.
	DefaultCacheEntries = 100000
	// DefaultPlanCacheBytes and DefaultVectorCacheBytes are
	// Estimator.PlanCacheBytes' and Estimator.VectorCacheBytes' defaults
	// (64 MiB each).
	DefaultPlanCacheBytes   = 64 << 20
	DefaultVectorCacheBytes = 64 << 20
	// DefaultReloadInterval is Estimator.ReloadInterval's default.
	DefaultReloadInterval = 5 * time.Second

	// The cascade's defaults (Estimator.History, Estimator.CheapCPUSeconds,
	// Estimator.ExplainConcurrency; estimator.CascadeOptions).
	DefaultCheapCPUSeconds    = 0.01
	DefaultTextMaxSeconds     = 1.0
	DefaultExplainConcurrency = 16
	DefaultLearnMinRuns       = 5
	DefaultLearnMaxSpread     = 0.5 // ln CPU, as history.max_spread
	DefaultDriftSample        = 0.05
	DefaultHistoryMaxEntries  = 100000
	DefaultHistoryMinCount    = 2
	DefaultHistoryMaxSpread   = 0.5 // ln CPU: runs within ~1.6x of each other
	DefaultHistoryAlpha       = 0.2
	DefaultHistoryShrink      = 1.0
	DefaultHistoryModelSigma  = 1.0  // ln CPU: the model within ~2.7x, before this deployment's own spread is known
	DefaultHistoryRepeatSigma = 0.25 // ln CPU: reruns within ~1.4x (80%), before this deployment's own repeats are known
	DefaultHistoryMinCalib    = 10
	// DefaultHistoryRedisTimeout bounds one history read from Redis
	// (Estimator.History.RedisTimeout).
	DefaultHistoryRedisTimeout = 50 * time.Millisecond

	// ORTVersion is the ONNX Runtime release the binary is built against
	// (docs/design.md §8); Estimator.ORTLib's default path names it.
	ORTVersion = "1.30.0"
)

// defaultORTLib is Estimator.ORTLib's default: where `make ort`
// (scripts/install-ort.sh) installs the library,
// ${PRESTROID_CACHE:-~/.cache/prestroid}/ort/ORTVersion/libonnxruntime.so.1.
// It depends on the machine (the environment and home directory of the
// process that calls FillDefaults, which is the one that loads the
// library).
func defaultORTLib() string {
	c := os.Getenv("PRESTROID_CACHE")
	if c == "" {
		home, _ := os.UserHomeDir()
		c = filepath.Join(home, ".cache", "prestroid")
	}
	return filepath.Join(c, "ort", ORTVersion, "libonnxruntime.so.1")
}

// FillDefaults sets every zero-valued field that has a default (the
// constants above, and Estimator.ORTLib's path), after moving the values
// of deprecated keys to their new homes (deprecated.go). Negative values
// that mean "off" are kept; fields whose zero value is itself the
// behaviour (Estimator.Workers: GOMAXPROCS, Estimator.MaxWait: no wait,
// Estimator.IntraOpThreads: 1 thread) stay zero. It is idempotent.
func (c *Config) FillDefaults() {
	c.fillDeprecated()

	setInt(&c.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes)
	setInt(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setInt(&c.QueryMapSize, DefaultQueryMapSize)
	setInt(&c.UpstreamMaxConns, DefaultUpstreamMaxConns)
	setInt(&c.PageBufferBytes, DefaultPageBufferBytes)
	setInt(&c.GzipLevel, DefaultGzipLevel)
	setInt(&c.PageReadAheadBytes, DefaultPageReadAheadBytes)
	setDuration(&c.UpstreamTimeout, DefaultUpstreamTimeout)
	setString(&c.Listen, DefaultListen)
	setString(&c.LogLevel, DefaultLogLevel)
	setString(&c.Identity, DefaultIdentity)
	setString(&c.IdentityClaim, DefaultIdentityClaim)
	setDuration(&c.CredentialTTL, DefaultCredentialTTL)
	setDuration(&c.JWKS.RefreshInterval, DefaultJWKSRefresh)

	r := &c.Routing
	setString(&r.Fallback, DefaultFallback)
	setDuration(&r.EstimateTimeout, DefaultEstimateTimeout)
	setDuration(&r.MonitorInterval, DefaultMonitorInterval)
	setString(&r.MonitorUser, DefaultMonitorUser)
	setString(&r.MonitorType, DefaultMonitorType)
	setInt(&r.MonitorMaxBytes, DefaultMonitorMaxBytes)
	setFloat(&r.ClassQuantile, DefaultClassQuantile)

	setInt(&c.Admission.QueueSize, DefaultQueueSize)
	setDuration(&c.Admission.MaxWait, DefaultMaxWait)
	setInt(&c.Admission.MaxQueuedQueryBytes, DefaultMaxQueuedQueryBytes)
	if c.Admission.MaxQueueBytes == 0 {
		c.Admission.MaxQueueBytes = DefaultMaxQueueBytes
	}
	setDuration(&c.Admission.IdleRelease, DefaultIdleRelease)
	setDuration(&c.Admission.Lease, DefaultLease)
	setString(&c.Admission.RedisPrefix, DefaultRedisPrefix)
	setString(&c.Admission.RedisDown, DefaultRedisDown)
	setInt(&c.Admission.Replicas, DefaultReplicas)

	setInt(&c.Feedback.RotateRecords, DefaultFeedbackRotateRecords)
	setDuration(&c.Feedback.RotateEvery, DefaultFeedbackRotateEvery)
	setInt(&c.Console.Decisions, DefaultConsoleDecisions)
	c.fillGuardrailDefaults()
	c.Usage.fillDefaults(&c.Admission) // after admission's Redis prefix

	e := &c.Estimator
	setString(&e.Explain, DefaultExplain)
	if e.ORTLib == "" {
		e.ORTLib = defaultORTLib()
	}
	setInt(&e.MaxBatch, DefaultMaxBatch)
	setInt(&e.CacheEntries, DefaultCacheEntries)
	setDuration(&e.ExplainTimeout, DefaultExplainTimeout)
	setDuration(&e.CacheTTL, DefaultCacheTTL)
	setDuration(&e.ReloadInterval, DefaultReloadInterval)
	setDuration(&e.TableStats.Refresh, DefaultTableStatsRefresh)
	setDuration(&e.TableStats.Expire, DefaultTableStatsExpire)
	setDuration(&e.TableStats.Retry, DefaultTableStatsRetry)
	setInt(&e.TableStats.MaxEntries, DefaultTableStatsMaxEntries)
	if e.PlanCacheBytes == 0 {
		e.PlanCacheBytes = DefaultPlanCacheBytes
	}
	if e.VectorCacheBytes == 0 {
		e.VectorCacheBytes = DefaultVectorCacheBytes
	}
	setFloat(&e.CheapCPUSeconds, DefaultCheapCPUSeconds)
	setFloat(&e.TextMaxSeconds, DefaultTextMaxSeconds)
	setInt(&e.ExplainConcurrency, DefaultExplainConcurrency)
	setInt(&e.LearnMinRuns, DefaultLearnMinRuns)
	setFloat(&e.LearnMaxSpread, DefaultLearnMaxSpread)
	setFloat(&e.DriftSample, DefaultDriftSample)
	h := &e.History
	setInt(&h.MaxEntries, DefaultHistoryMaxEntries)
	setInt(&h.MinCount, DefaultHistoryMinCount)
	setFloat(&h.MaxSpread, DefaultHistoryMaxSpread)
	setFloat(&h.Alpha, DefaultHistoryAlpha)
	setFloat(&h.Shrink, DefaultHistoryShrink)
	setFloat(&h.ModelSigma, DefaultHistoryModelSigma)
	setFloat(&h.RepeatSigma, DefaultHistoryRepeatSigma)
	setInt(&h.MinCalibration, DefaultHistoryMinCalib)
	// Replicas that share admission share the history, unless it is
	// explicitly a file per replica.
	if h.Redis == "" && h.Path == "" {
		h.Redis = c.Admission.Redis
	}
	setString(&h.RedisPrefix, c.Admission.RedisPrefix) // after its own default
	setDuration(&h.RedisTimeout, DefaultHistoryRedisTimeout)
}

func setFloat(p *float64, v float64) {
	if *p == 0 {
		*p = v
	}
}

func setInt(p *int, v int) {
	if *p == 0 {
		*p = v
	}
}

func setString(p *string, v string) {
	if *p == "" {
		*p = v
	}
}

func setDuration(p *Duration, v time.Duration) {
	if *p == 0 {
		*p = Duration(v)
	}
}
