package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestUsageDefaultsFollowTheAdmissionRedis(t *testing.T) {
	c := &Config{Clusters: []Cluster{{Name: "default", URL: "http://127.0.0.1:8081"}}}
	c.Admission.Redis, c.Admission.RedisPrefix = "redis://127.0.0.1:6379/0", "p:"
	c.FillDefaults()
	u := c.Usage
	if time.Duration(u.Bucket) != time.Minute || time.Duration(u.Retention) != 24*time.Hour || u.Top != 20 ||
		u.Redis != "redis://127.0.0.1:6379/0" || u.RedisPrefix != "p:" || u.Disabled {
		t.Errorf("usage %+v", u)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}

	c = &Config{Clusters: []Cluster{{Name: "default", URL: "http://127.0.0.1:8081"}}}
	c.Usage.Redis = "redis://u:6379/1"
	if err := c.ApplyEnv(func(k string) (string, bool) {
		if k == "PRESTROID_USAGE_REDIS" {
			return "redis://env:6379/2", true
		}
		return "", false
	}); err != nil {
		t.Fatal(err)
	}
	c.FillDefaults()
	if c.Usage.Redis != "redis://env:6379/2" || c.Usage.RedisPrefix != DefaultRedisPrefix {
		t.Errorf("usage.redis %q prefix %q: want the environment's, and admission's default prefix", c.Usage.Redis, c.Usage.RedisPrefix)
	}
}

func TestUsageValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Usage)
		wants []string
	}{
		{"a bucket under a second", func(u *Usage) { u.Bucket = Duration(time.Millisecond) }, []string{"usage.bucket", "1s"}},
		{"a retention under a bucket", func(u *Usage) { u.Retention = Duration(30 * time.Second) }, []string{"usage.retention", "one bucket"}},
		{"too many buckets", func(u *Usage) { u.Bucket, u.Retention = Duration(time.Second), Duration(48*time.Hour) }, []string{"usage.retention", "172800 buckets"}},
		{"too many named series", func(u *Usage) { u.Top = 5000 }, []string{"usage.top", "5000"}},
		{"a bad Redis URL, without echoing it", func(u *Usage) { u.Redis = "http://secret@h" }, []string{"usage.redis", "not shown"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := valid()
			tc.edit(&c.Usage)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "secret") {
				t.Errorf("%q quotes the URL", err)
			}
		})
	}
	t.Run("disabled accounting is not checked", func(t *testing.T) {
		c := valid()
		c.Usage.Disabled, c.Usage.Top = true, 5000
		if err := c.Validate(); err != nil {
			t.Error(err)
		}
	})
}
