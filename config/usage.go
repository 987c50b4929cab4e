package config

import (
	"fmt"
	"time"
)

// Usage configures cost accounting (proxy/usage, docs/usage.md): what
// each user, group and source spent, from the final statistics of the
// queries whose last page passes through the proxy, served at
// /prestroid/api/usage (on the admin surface, behind admin_token), in
// the prestroid_usage_* metrics and in the console's usage view.
type Usage struct {
	// Disabled turns accounting off: no metrics, the API answers 404.
	// False (the default) accounts every query.
	Disabled bool `yaml:"disabled"`
	// Bucket is the width of the time buckets usage is summed in: the
	// finest window the API answers. Zero means 1m; at least 1s.
	Bucket Duration `yaml:"bucket"`
	// Retention is how long buckets are kept: the longest window. Zero
	// means 24h; at least one bucket, at most 100000 buckets.
	Retention Duration `yaml:"retention"`
	// Top caps the names (users, groups, sources) each replica exports
	// series of its own for in the prestroid_usage_* metrics: the first
	// Top names it sees keep theirs, later ones count under
	// name="(other)", so the label sets stay bounded. Zero means 20;
	// negative exports only "(other)". At most 1000.
	Top int `yaml:"top"`
	// Redis, when set, is a Redis every replica adds its usage to, so
	// that the API answers the sum of all (redis://…, as admission.redis;
	// PRESTROID_USAGE_REDIS sets it from the environment). Empty means
	// admission.redis; when that is empty too, each replica keeps its own
	// usage in memory (lost on restart).
	Redis string `yaml:"redis"`
	// RedisPrefix starts the keys usage writes. Empty means
	// admission.redis_prefix ("prestroid:").
	RedisPrefix string `yaml:"redis_prefix"`
}

// maxUsageBuckets bounds Retention/Bucket: one read of the longest
// window touches that many buckets.
const maxUsageBuckets = 100000

func (u *Usage) fillDefaults(a *Admission) {
	setDuration(&u.Bucket, DefaultUsageBucket)
	setDuration(&u.Retention, DefaultUsageRetention)
	setInt(&u.Top, DefaultUsageTop)
	setString(&u.Redis, a.Redis)
	setString(&u.RedisPrefix, a.RedisPrefix)
}

func (u *Usage) applyEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup("PRESTROID_USAGE_REDIS"); ok && v != "" {
		u.Redis = v
	}
}

func (c *Config) validateUsage() error {
	u := &c.Usage
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: usage.%s=%v: %s", ErrInvalid, key, val, why)
	}
	if u.Disabled {
		return nil
	}
	if time.Duration(u.Bucket) < time.Second {
		return bad("bucket", u.Bucket, "want at least 1s")
	}
	if u.Retention < u.Bucket {
		return bad("retention", u.Retention, "want at least one bucket (usage.bucket)")
	}
	if n := time.Duration(u.Retention) / time.Duration(u.Bucket); n > maxUsageBuckets {
		return bad("retention", u.Retention, fmt.Sprintf("%d buckets of %s: want at most %d", n, u.Bucket, maxUsageBuckets))
	}
	if u.Top > 1000 {
		return bad("top", u.Top, "want at most 1000 (bounded label sets)")
	}
	if u.Redis != "" {
		if why := badRedisURL(u.Redis); why != "" {
			return bad("redis", "(not shown)", why) // may hold a password
		}
	}
	return nil
}
