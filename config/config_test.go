package config

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func valid() *Config {
	c := &Config{Clusters: []Cluster{{Name: "default", URL: "http://127.0.0.1:8081"}}}
	c.FillDefaults()
	return c
}

func TestValidateNamesTheBadKeyAndValue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		wants []string
	}{
		{"a listen address without a port", func(c *Config) { c.Listen = "localhost" }, []string{"listen", `"localhost"`}},
		{"no clusters", func(c *Config) { c.Clusters = nil }, []string{"clusters"}},
		{"a cluster URL with a path", func(c *Config) { c.Clusters[0].URL = "http://h:1/x" }, []string{"clusters[0].url", `"http://h:1/x"`}},
		{"a cluster URL without scheme", func(c *Config) { c.Clusters[0].URL = "h:8080" }, []string{"clusters[0].url"}},
		{"a duplicate cluster name", func(c *Config) {
			c.Clusters = append(c.Clusters, Cluster{Name: "default", URL: "http://b:1"})
		}, []string{"clusters[1].name", "duplicate"}},
		{"a cluster name with a slash", func(c *Config) { c.Clusters[0].Name = "a/b" }, []string{"clusters[0].name", `"a/b"`}},
		{"a cluster of an unknown engine", func(c *Config) { c.Clusters[0].Engine = "hive" }, []string{"clusters[0].engine", `"hive"`, "trino or presto"}},
		{"a short route secret, without echoing it", func(c *Config) { c.RouteSecret = "hunter2" }, []string{"route_secret", "7 bytes"}},
		{"a public URL with a path", func(c *Config) { c.PublicURL = "http://p/x" }, []string{"public_url"}},
		{"an unknown log level", func(c *Config) { c.LogLevel = "loud" }, []string{"log_level", `"loud"`}},
		{"a TLS certificate without its key", func(c *Config) { c.TLS.CertFile = "/etc/hosts" }, []string{"tls.cert_file", "key_file"}},
		{"a TLS certificate file that is missing", func(c *Config) { c.TLS.CertFile, c.TLS.KeyFile = "/nonexistent.pem", "/etc/hosts" }, []string{"tls.cert_file", `"/nonexistent.pem"`}},
		{"an http public URL in front of a TLS listener", func(c *Config) {
			c.TLS.CertFile, c.TLS.KeyFile, c.PublicURL = "/etc/hosts", "/etc/hosts", "http://gw:8443"
		}, []string{"public_url", "https"}},
		{"a redirect listener without TLS", func(c *Config) { c.TLS.RedirectListen = "127.0.0.1:8079" }, []string{"tls.redirect_listen"}},
		{"a JWKS without identity: verified", func(c *Config) { c.JWKS.URL = "https://idp/jwks" }, []string{"jwks.url", "verified"}},
		{"an unknown identity mode", func(c *Config) { c.Identity = "trust-me" }, []string{"identity", `"trust-me"`}},
		{"an allowed host with a path", func(c *Config) { c.AllowedHosts = []string{"gw/x"} }, []string{"allowed_hosts[0]", `"gw/x"`}},
		{"a negative body limit", func(c *Config) { c.MaxRequestBodyBytes = -1 }, []string{"max_request_body_bytes", "-1"}},
		{"cost classes out of order", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "a", MaxCPUSeconds: 10}, {Name: "b", MaxCPUSeconds: 5}}
		}, []string{"routing.classes[1].max_cpu_seconds", "5", "increasing"}},
		{"an unbounded class before the last", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "a"}, {Name: "b", MaxCPUSeconds: 5}}
		}, []string{"routing.classes[0].max_cpu_seconds"}},
		{"memory bounds out of order", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "a", MaxCPUSeconds: 10, MaxPeakMemory: 8 << 30}, {Name: "b", MaxPeakMemory: 4 << 30}}
		}, []string{"routing.classes[1].max_peak_memory", "4GB", "increasing"}},
		{"elapsed bounds out of order", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "a", MaxCPUSeconds: 10, MaxElapsed: Duration(time.Hour)}, {Name: "b", MaxElapsed: Duration(time.Minute)}}
		}, []string{"routing.classes[1].max_elapsed", "1m0s", "increasing"}},
		{"a class memory budget of a class that does not exist", func(c *Config) {
			c.Admission.ClassMaxPeakMemory = map[string]DataSize{"huge": 1 << 30}
		}, []string{"admission.class_max_peak_memory.huge", `"huge"`, "routing.classes"}},
		{"a negative class memory budget", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "a"}}
			c.Admission.ClassMaxPeakMemory = map[string]DataSize{"a": -1}
		}, []string{"admission.class_max_peak_memory.a", "negative"}},
		{"a negative admission memory budget", func(c *Config) { c.Admission.GroupMaxPeakMemory = -1 }, []string{"admission.group_max_peak_memory"}},
		{"a cluster naming an unknown class", func(c *Config) { c.Clusters[0].Class = "huge" }, []string{"clusters[0].class", `"huge"`}},
		{"an unknown fallback policy", func(c *Config) { c.Routing.Fallback = "random" }, []string{"routing.fallback", `"random"`}},
		{"a negative admission budget", func(c *Config) { c.Admission.UserMaxQueries = -2 }, []string{"admission.user_max_queries", "-2"}},
		{"an unknown monitor type", func(c *Config) { c.Routing.MonitorType = "jmx" }, []string{"routing.monitor_type", `"jmx"`}},
		{"a negative monitor read bound", func(c *Config) { c.Routing.MonitorMaxBytes = -1 }, []string{"routing.monitor_max_bytes"}},
		{"a gzip level over 9", func(c *Config) { c.GzipLevel = 10 }, []string{"gzip_level", "10"}},
		{"a negative page buffer", func(c *Config) { c.PageBufferBytes = -1 }, []string{"page_buffer_bytes"}},
		{"a read-ahead budget under one page", func(c *Config) { c.PageReadAheadBytes = 1 << 20 }, []string{"page_read_ahead_bytes", "1048576"}},
		{"a negative connection limit", func(c *Config) { c.UpstreamMaxConns = -1 }, []string{"upstream_max_conns"}},
		{"an admin listener without a port", func(c *Config) { c.AdminListen = "localhost" }, []string{"admin_listen", `"localhost"`}},
		{"the admin listener on the client listener", func(c *Config) { c.AdminListen = c.Listen }, []string{"admin_listen", "differ"}},
		{"a short admin token, without echoing it", func(c *Config) { c.AdminToken = "hunter2" }, []string{"admin_token", "7 bytes"}},
		{"a console ring over its bound", func(c *Config) { c.Console.Decisions = 1 << 20 }, []string{"console.decisions", "1048576"}},
		{"a Redis URL of another scheme, without echoing its password", func(c *Config) { c.Admission.Redis = "http://:hunter2@r:6379" }, []string{"admission.redis"}},
		{"an unknown redis_down", func(c *Config) { c.Admission.RedisDown = "panic" }, []string{"admission.redis_down", `"panic"`}},
		{"a lease under a second", func(c *Config) { c.Admission.Lease = Duration(100 * time.Millisecond) }, []string{"admission.lease"}},
		{"a negative rate", func(c *Config) { c.Admission.UserRate = -1 }, []string{"admission.user_rate", "-1"}},
		{"a planner that is not a cluster", func(c *Config) { c.Routing.Planners = []string{"nope"} }, []string{"routing.planners[0]", `"nope"`}},
		{"a class quantile of 1", func(c *Config) { c.Routing.ClassQuantile = 1 }, []string{"routing.class_quantile", "(0, 1)"}},
		{"an unknown explain setting", func(c *Config) { c.Estimator.Explain = "sometimes" }, []string{"estimator.explain", `"sometimes"`, "when-uncertain"}},
		{"an unknown explain setting under the old key", func(c *Config) {
			c.Routing.DeprecatedExplain, c.Estimator.Explain = "sometimes", ""
			c.FillDefaults()
		}, []string{"routing.explain", `"sometimes"`}},
		{"the old and the new explain key disagreeing", func(c *Config) {
			c.Routing.DeprecatedExplain, c.Estimator.Explain = "always", "never"
		}, []string{"routing.explain", `"always"`, "estimator.explain", `"never"`}},
		{"a Redis URL with a database that is no number, without echoing its password", func(c *Config) {
			c.Admission.Redis = "redis://:hunter2@r:6379/zero"
		}, []string{"admission.redis", "database"}},
		{"a Redis URL with an option the client does not know", func(c *Config) {
			c.Estimator.History.Redis = "redis://:hunter2@r:6379/0?colour=blue"
		}, []string{"estimator.history.redis", "colour"}},
		{"a rule pattern that compiles only inside the router's anchors ^(?:…)$", func(c *Config) {
			c.Routing.Classes = []CostClass{{Name: "small"}}
			c.Routing.Rules = []RoutingRule{{User: "a)(?:b", Class: "small"}}
		}, []string{"routing.rules[0].user"}},
		{"a NaN class quantile", func(c *Config) { c.Routing.ClassQuantile = math.NaN() }, []string{"routing.class_quantile", "NaN"}},
		{"a negative class quantile", func(c *Config) { c.Routing.ClassQuantile = -0.5 }, []string{"routing.class_quantile", "-0.5"}},
		{"a negative history bound", func(c *Config) { c.Estimator.History.MaxEntries = -5 }, []string{"estimator.history.max_entries", "-5"}},
		{"a history weight above 1", func(c *Config) { c.Estimator.History.Alpha = 1.5 }, []string{"estimator.history.alpha", "1.5"}},
		{"a history in Redis and in a file", func(c *Config) {
			c.Estimator.History.Redis, c.Estimator.History.Path = "redis://r:6379", "/var/lib/h.db"
		}, []string{"estimator.history.path", "not both"}},
		{"a history Redis URL of another scheme, without echoing its password", func(c *Config) { c.Estimator.History.Redis = "http://:hunter2@r:6379" }, []string{"estimator.history.redis"}},
		{"a negative history Redis timeout", func(c *Config) { c.Estimator.History.RedisTimeout = -1 }, []string{"estimator.history.redis_timeout"}},
		{"a negative cheap estimate", func(c *Config) { c.Estimator.CheapCPUSeconds = -1 }, []string{"estimator.cheap_cpu_seconds"}},
		{"a negative EXPLAIN ceiling", func(c *Config) { c.Estimator.ExplainRate = -1 }, []string{"estimator.explain_rate"}},
		{"a negative EXPLAIN burst", func(c *Config) { c.Estimator.ExplainBurst = -1 }, []string{"estimator.explain_burst"}},
		{"a drift sample above 1", func(c *Config) { c.Estimator.DriftSample = 1.5 }, []string{"estimator.drift_sample"}},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			c := valid()
			tc.edit(c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalid", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error leaks the secret: %v", err)
			}
		})
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
}

func TestLoadFileThenEnv(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "prestroid.yaml")
	os.WriteFile(p, []byte("listen: 127.0.0.1:9000\nclusters:\n  - name: small\n    url: http://a:1\nupstream_timeout: 5s\n"), 0o600)
	t.Setenv("PRESTROID_LISTEN", "127.0.0.1:9001")
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:9001" || c.Clusters[0].Name != "small" || c.UpstreamTimeout.String() == "" {
		t.Errorf("config = %+v", c)
	}
	t.Run("a cluster's engine is read in any case", func(t *testing.T) {
		os.WriteFile(p, []byte("clusters:\n  - {name: p, url: \"http://p:1\", engine: PrestO}\n  - {name: t, url: \"http://t:1\"}\n"), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Clusters[0].Engine != "PrestO" || c.Clusters[1].Engine != "" {
			t.Errorf("clusters = %+v", c.Clusters)
		}
	})
	t.Run("unknown keys are refused", func(t *testing.T) {
		os.WriteFile(p, []byte("lisen: x\n"), 0o600)
		if _, err := Load(p); err == nil || !strings.Contains(err.Error(), "lisen") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("PRESTROID_ADMISSION_REDIS sets admission.redis", func(t *testing.T) {
		t.Setenv("PRESTROID_ADMISSION_REDIS", "redis://:pw@r:6379/2")
		os.WriteFile(p, []byte("clusters:\n  - {name: a, url: \"http://a:1\"}\nadmission: {max_queries: 2, redis: \"redis://file:6379\"}\n"), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Admission.Redis != "redis://:pw@r:6379/2" || c.Admission.MaxQueries != 2 {
			t.Errorf("admission = %+v", c.Admission)
		}
	})
	t.Run("PRESTROID_UPSTREAM replaces the clusters", func(t *testing.T) {
		t.Setenv("PRESTROID_UPSTREAM", "http://x:1,http://y:2")
		os.WriteFile(p, []byte("listen: 127.0.0.1:9000\n"), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Clusters) != 2 || c.Clusters[0].Name != "default" || c.Clusters[1].Name != "cluster2" {
			t.Errorf("clusters = %+v", c.Clusters)
		}
	})
}

func TestAllowedHostsFromEnv(t *testing.T) {
	c := &Config{AllowedHosts: []string{"from-file"}}
	env := map[string]string{"PRESTROID_ALLOWED_HOSTS": " gw.example:8080, localhost:8080 ,"}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.AllowedHosts, "|") != "gw.example:8080|localhost:8080" {
		t.Errorf("AllowedHosts = %q", c.AllowedHosts)
	}
}

func TestExplainMovedToTheEstimator(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "prestroid.yaml")
	load := func(t *testing.T, yaml string) *Config {
		t.Helper()
		os.WriteFile(p, []byte("clusters:\n  - {name: a, url: \"http://a:1\"}\n"+yaml), 0o600)
		c, err := Load(p)
		if err != nil {
			t.Fatal(err)
		}
		c.FillDefaults()
		return c
	}
	t.Run("estimator.explain is read and reports nothing deprecated", func(t *testing.T) {
		c := load(t, "estimator: {explain: never}\n")
		if err := c.Validate(); err != nil || c.Estimator.Explain != "never" || c.Deprecations() != nil {
			t.Fatalf("explain %q, deprecations %v, err %v", c.Estimator.Explain, c.Deprecations(), err)
		}
	})
	t.Run("unset, it is the default", func(t *testing.T) {
		c := load(t, "")
		if err := c.Validate(); err != nil || c.Estimator.Explain != DefaultExplain || c.Deprecations() != nil {
			t.Fatalf("explain %q, deprecations %v, err %v", c.Estimator.Explain, c.Deprecations(), err)
		}
	})
	t.Run("the old routing.explain still works, with a deprecation", func(t *testing.T) {
		c := load(t, "routing: {explain: always}\n")
		if err := c.Validate(); err != nil || c.Estimator.Explain != "always" {
			t.Fatalf("explain %q, err %v", c.Estimator.Explain, err)
		}
		ds := c.Deprecations()
		if len(ds) != 1 || ds[0].Key != "routing.explain" || !strings.Contains(ds[0].String(), "estimator.explain") {
			t.Fatalf("deprecations %v", ds)
		}
	})
	t.Run("both keys with one value: valid, with a deprecation", func(t *testing.T) {
		c := load(t, "routing: {explain: never}\nestimator: {explain: never}\n")
		if err := c.Validate(); err != nil || c.Estimator.Explain != "never" || len(c.Deprecations()) != 1 {
			t.Fatalf("explain %q, deprecations %v, err %v", c.Estimator.Explain, c.Deprecations(), err)
		}
	})
	t.Run("both keys with different values are refused, naming both", func(t *testing.T) {
		err := load(t, "routing: {explain: never}\nestimator: {explain: always}\n").Validate()
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "routing.explain") || !strings.Contains(err.Error(), "estimator.explain") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("PRESTROID_EXPLAIN sets estimator.explain", func(t *testing.T) {
		t.Setenv("PRESTROID_EXPLAIN", "always")
		c := load(t, "estimator: {explain: never}\n")
		if err := c.Validate(); err != nil || c.Estimator.Explain != "always" {
			t.Fatalf("explain %q, err %v", c.Estimator.Explain, err)
		}
	})
}
