package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEstimatorValidation(t *testing.T) {
	base := func() *Config {
		c := &Config{Clusters: []Cluster{{Name: "default", URL: "http://127.0.0.1:8081"}}}
		c.FillDefaults()
		return c
	}
	if err := base().Validate(); err != nil {
		t.Fatalf("zero estimator section: %v", err)
	}
	cases := []struct {
		name string
		edit func(e *Estimator)
		key  string
	}{
		{"a negative batch size", func(e *Estimator) { e.MaxBatch = -1 }, "estimator.max_batch=-1"},
		{"a huge batch size", func(e *Estimator) { e.MaxBatch = 5000 }, "estimator.max_batch=5000"},
		{"a negative wait", func(e *Estimator) { e.MaxWait = Duration(-time.Millisecond) }, "estimator.max_wait"},
		{"negative workers", func(e *Estimator) { e.Workers = -2 }, "estimator.workers=-2"},
		{"a bad thread count", func(e *Estimator) { e.IntraOpThreads = -3 }, "estimator.intra_op_threads=-3"},
		{"a negative cache size", func(e *Estimator) { e.CacheEntries = -1 }, "estimator.cache_entries=-1"},
	}
	for _, c := range cases {
		t.Run("refuses "+c.name, func(t *testing.T) {
			cfg := base()
			c.edit(&cfg.Estimator)
			err := cfg.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.key) {
				t.Fatalf("err = %v, want one naming %s", err, c.key)
			}
		})
	}
}

func TestEstimatorEnv(t *testing.T) {
	c := &Config{Estimator: Estimator{Model: "/from/file", ORTLib: "/file/lib.so"}}
	env := map[string]string{"PRESTROID_MODEL": "/models/x", "PRESTROID_ORT_LIB": "/opt/ort/libonnxruntime.so.1"}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.Estimator.Model != "/models/x" || c.Estimator.ORTLib != "/opt/ort/libonnxruntime.so.1" {
		t.Errorf("%+v", c.Estimator)
	}
}
