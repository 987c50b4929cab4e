package config

import (
	"testing"
	"time"
)

func TestFillDefaultsSetsZeroFieldsOnly(t *testing.T) {
	c := &Config{}
	c.FillDefaults()
	for _, tc := range []struct {
		key      string
		got, set any
	}{
		{"listen", c.Listen, DefaultListen},
		{"max_request_body_bytes", c.MaxRequestBodyBytes, DefaultMaxRequestBodyBytes},
		{"max_header_bytes", c.MaxHeaderBytes, DefaultMaxHeaderBytes},
		{"upstream_timeout", time.Duration(c.UpstreamTimeout), DefaultUpstreamTimeout},
		{"query_map_size", c.QueryMapSize, DefaultQueryMapSize},
		{"log_level", c.LogLevel, DefaultLogLevel},
		{"routing.fallback", c.Routing.Fallback, DefaultFallback},
		{"routing.estimate_timeout", time.Duration(c.Routing.EstimateTimeout), DefaultEstimateTimeout},
		{"routing.monitor_interval", time.Duration(c.Routing.MonitorInterval), DefaultMonitorInterval},
		{"routing.monitor_user", c.Routing.MonitorUser, DefaultMonitorUser},
		{"admission.queue_size", c.Admission.QueueSize, DefaultQueueSize},
		{"admission.max_wait", time.Duration(c.Admission.MaxWait), DefaultMaxWait},
		{"admission.lease", time.Duration(c.Admission.Lease), DefaultLease},
		{"admission.redis_prefix", c.Admission.RedisPrefix, DefaultRedisPrefix},
		{"admission.redis_down", c.Admission.RedisDown, DefaultRedisDown},
		{"admission.replicas", c.Admission.Replicas, DefaultReplicas},
		{"admission.redis (empty: in memory)", c.Admission.Redis, ""},
		{"feedback.rotate_records", c.Feedback.RotateRecords, DefaultFeedbackRotateRecords},
		{"feedback.rotate_every", time.Duration(c.Feedback.RotateEvery), DefaultFeedbackRotateEvery},
		{"console.decisions", c.Console.Decisions, DefaultConsoleDecisions},
		{"estimator.max_batch", c.Estimator.MaxBatch, DefaultMaxBatch},
		{"estimator.explain_timeout", time.Duration(c.Estimator.ExplainTimeout), DefaultExplainTimeout},
		{"estimator.cache_ttl", time.Duration(c.Estimator.CacheTTL), DefaultCacheTTL},
		{"estimator.cache_entries", c.Estimator.CacheEntries, DefaultCacheEntries},
		{"estimator.plan_cache_bytes", c.Estimator.PlanCacheBytes, int64(DefaultPlanCacheBytes)},
		{"estimator.vector_cache_bytes", c.Estimator.VectorCacheBytes, int64(DefaultVectorCacheBytes)},
		{"estimator.reload_interval", time.Duration(c.Estimator.ReloadInterval), DefaultReloadInterval},
		{"estimator.ort_lib (where `make ort` puts it, on this machine)", c.Estimator.ORTLib, defaultORTLib()},
		{"estimator.workers (zero is GOMAXPROCS)", c.Estimator.Workers, 0},
		{"routing.class_quantile", c.Routing.ClassQuantile, DefaultClassQuantile},
		{"estimator.explain", c.Estimator.Explain, DefaultExplain},
		{"routing.explain (deprecated: left empty)", c.Routing.DeprecatedExplain, ""},
		{"estimator.cheap_cpu_seconds", c.Estimator.CheapCPUSeconds, DefaultCheapCPUSeconds},
		{"estimator.explain_concurrency", c.Estimator.ExplainConcurrency, DefaultExplainConcurrency},
		{"estimator.explain_rate (zero: no ceiling)", c.Estimator.ExplainRate, 0.0},
		{"estimator.learn_min_runs", c.Estimator.LearnMinRuns, DefaultLearnMinRuns},
		{"estimator.learn_max_spread", c.Estimator.LearnMaxSpread, DefaultLearnMaxSpread},
		{"estimator.drift_sample", c.Estimator.DriftSample, DefaultDriftSample},
		{"estimator.history.max_entries", c.Estimator.History.MaxEntries, DefaultHistoryMaxEntries},
		{"estimator.history.min_count", c.Estimator.History.MinCount, DefaultHistoryMinCount},
		{"estimator.history.max_spread", c.Estimator.History.MaxSpread, DefaultHistoryMaxSpread},
		{"estimator.history.alpha", c.Estimator.History.Alpha, DefaultHistoryAlpha},
		{"estimator.history.shrink", c.Estimator.History.Shrink, DefaultHistoryShrink},
		{"estimator.history.model_sigma", c.Estimator.History.ModelSigma, DefaultHistoryModelSigma},
		{"estimator.history.repeat_sigma", c.Estimator.History.RepeatSigma, DefaultHistoryRepeatSigma},
		{"estimator.history.min_calibration", c.Estimator.History.MinCalibration, DefaultHistoryMinCalib},
		{"estimator.history.path (empty: in memory)", c.Estimator.History.Path, ""},
		{"estimator.history.redis (empty: admission.redis, here none)", c.Estimator.History.Redis, ""},
		{"estimator.history.redis_prefix (admission.redis_prefix)", c.Estimator.History.RedisPrefix, DefaultRedisPrefix},
		{"estimator.history.redis_timeout", time.Duration(c.Estimator.History.RedisTimeout), DefaultHistoryRedisTimeout},
	} {
		if tc.got != tc.set {
			t.Errorf("%s = %v after FillDefaults, want %v", tc.key, tc.got, tc.set)
		}
	}
	// "Off" values and explicit settings survive.
	c = &Config{Listen: "0.0.0.0:1", Routing: Routing{MonitorInterval: -1},
		Estimator: Estimator{CacheTTL: -1, VectorCacheBytes: -1, PlanCacheBytes: -1, MaxBatch: 1}}
	c.FillDefaults()
	if c.Listen != "0.0.0.0:1" || c.Routing.MonitorInterval != -1 || c.Estimator.CacheTTL != -1 ||
		c.Estimator.VectorCacheBytes != -1 || c.Estimator.PlanCacheBytes != -1 || c.Estimator.MaxBatch != 1 {
		t.Errorf("FillDefaults changed set values: %+v", c)
	}
	c = &Config{Clusters: []Cluster{{Name: "a", URL: "http://h:1"}}}
	c.FillDefaults()
	if err := c.Validate(); err != nil {
		t.Errorf("a filled minimal config does not validate: %v", err)
	}
}

func TestHistoryFollowsTheAdmissionRedis(t *testing.T) {
	shared := func(h History) *Config {
		c := &Config{Clusters: []Cluster{{Name: "a", URL: "http://h:1"}},
			Admission: Admission{Redis: "redis://:pw@r:6379/2", RedisPrefix: "dep1:"}, Estimator: Estimator{History: h}}
		c.FillDefaults()
		if err := c.Validate(); err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		return c
	}
	for _, tc := range []struct {
		name              string
		h                 History
		redis, prefix, at string
	}{
		{"replicas sharing admission share the history", History{}, "redis://:pw@r:6379/2", "dep1:", ""},
		{"a history file keeps it per replica", History{Path: "/h.db"}, "", "dep1:", "/h.db"},
		{"a Redis of its own, under its own prefix", History{Redis: "redis://h:1", RedisPrefix: "hist:"}, "redis://h:1", "hist:", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := shared(tc.h).Estimator.History
			if h.Redis != tc.redis || h.RedisPrefix != tc.prefix || h.Path != tc.at {
				t.Fatalf("redis %q prefix %q path %q; want %q %q %q", h.Redis, h.RedisPrefix, h.Path, tc.redis, tc.prefix, tc.at)
			}
		})
	}
	t.Setenv("PRESTROID_HISTORY_REDIS", "redis://env:6379")
	c, err := Load("")
	if err != nil || c.Estimator.History.Redis != "redis://env:6379" {
		t.Fatalf("PRESTROID_HISTORY_REDIS: %q %v", c.Estimator.History.Redis, err)
	}
}

func TestORTLibDefaultFollowsPrestroidCache(t *testing.T) {
	t.Setenv("PRESTROID_CACHE", "/opt/cache")
	c := &Config{}
	c.FillDefaults()
	if got, want := c.Estimator.ORTLib, "/opt/cache/ort/"+ORTVersion+"/libonnxruntime.so.1"; got != want {
		t.Errorf("estimator.ort_lib = %q, want %q", got, want)
	}
	c = &Config{Estimator: Estimator{ORTLib: "/mine/libonnxruntime.so.1"}}
	c.FillDefaults()
	if c.Estimator.ORTLib != "/mine/libonnxruntime.so.1" {
		t.Errorf("FillDefaults replaced a set estimator.ort_lib: %q", c.Estimator.ORTLib)
	}
}
