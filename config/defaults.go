package config

import (
	"os"
	"path/filepath"
	"time"
)

// The defaults: what a field left at its zero value means. FillDefaults
// applies them to a Config; the packages that take these settings as
// options (proxy.Options, collector.FeedbackOptions, the ONNX Runtime
// wiring in cmd) use the same constants for their own zero values, so each
// default is written once, here.
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
	// DefaultQueryMapSize is Config.QueryMapSize's default.
	DefaultQueryMapSize = 100000
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

	// DefaultQueueSize and DefaultMaxWait are Admission.QueueSize's and
	// Admission.MaxWait's defaults.
	DefaultQueueSize = 1000
	DefaultMaxWait   = 10 * time.Minute

	// DefaultFeedbackRotateRecords and DefaultFeedbackRotateEvery are
	// Feedback.RotateRecords' and Feedback.RotateEvery's defaults.
	DefaultFeedbackRotateRecords = 10000
	DefaultFeedbackRotateEvery   = time.Hour

	// DefaultMaxBatch is Estimator.MaxBatch's default.
	DefaultMaxBatch = 32
	// DefaultExplainTimeout is Estimator.ExplainTimeout's default.
	DefaultExplainTimeout = 30 * time.Second
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

	// ORTVersion is the ONNX Runtime release the binary is built against
	// (DESIGN §8); DefaultORTLib's path names it.
	ORTVersion = "1.30.0"
)

// DefaultORTLib is Estimator.ORTLib's default: where `make ort`
// (scripts/install-ort.sh) installs the library,
// ${PRESTROID_CACHE:-~/.cache/prestroid}/ort/ORTVersion/libonnxruntime.so.1.
// FillDefaults leaves ORTLib empty (the path depends on the machine the
// server runs on); the ONNX Runtime wiring calls this for an empty one.
func DefaultORTLib() string {
	c := os.Getenv("PRESTROID_CACHE")
	if c == "" {
		home, _ := os.UserHomeDir()
		c = filepath.Join(home, ".cache", "prestroid")
	}
	return filepath.Join(c, "ort", ORTVersion, "libonnxruntime.so.1")
}

// FillDefaults sets every zero-valued field that has a fixed default (the
// constants above). Negative values that mean "off" are kept; fields whose
// zero value is itself the behaviour (Estimator.Workers: GOMAXPROCS,
// Estimator.MaxWait: no wait, Estimator.IntraOpThreads, Estimator.ORTLib)
// stay zero.
func (c *Config) FillDefaults() {
	setInt(&c.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes)
	setInt(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	setInt(&c.QueryMapSize, DefaultQueryMapSize)
	setInt(&c.UpstreamMaxConns, DefaultUpstreamMaxConns)
	setInt(&c.PageBufferBytes, DefaultPageBufferBytes)
	setInt(&c.GzipLevel, DefaultGzipLevel)
	setDuration(&c.UpstreamTimeout, DefaultUpstreamTimeout)
	setString(&c.Listen, DefaultListen)
	setString(&c.LogLevel, DefaultLogLevel)

	r := &c.Routing
	setString(&r.Fallback, DefaultFallback)
	setDuration(&r.EstimateTimeout, DefaultEstimateTimeout)
	setDuration(&r.MonitorInterval, DefaultMonitorInterval)
	setString(&r.MonitorUser, DefaultMonitorUser)
	setString(&r.MonitorType, DefaultMonitorType)
	setInt(&r.MonitorMaxBytes, DefaultMonitorMaxBytes)

	setInt(&c.Admission.QueueSize, DefaultQueueSize)
	setDuration(&c.Admission.MaxWait, DefaultMaxWait)

	setInt(&c.Feedback.RotateRecords, DefaultFeedbackRotateRecords)
	setDuration(&c.Feedback.RotateEvery, DefaultFeedbackRotateEvery)

	e := &c.Estimator
	setInt(&e.MaxBatch, DefaultMaxBatch)
	setInt(&e.CacheEntries, DefaultCacheEntries)
	setDuration(&e.ExplainTimeout, DefaultExplainTimeout)
	setDuration(&e.CacheTTL, DefaultCacheTTL)
	setDuration(&e.ReloadInterval, DefaultReloadInterval)
	if e.PlanCacheBytes == 0 {
		e.PlanCacheBytes = DefaultPlanCacheBytes
	}
	if e.VectorCacheBytes == 0 {
		e.VectorCacheBytes = DefaultVectorCacheBytes
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
