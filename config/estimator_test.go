package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
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
		{"a zero CPU decision bound", func(e *Estimator) { e.DecisionBounds.CPU = []Duration{Duration(time.Second), 0} }, "estimator.decision_bounds.cpu=0s"},
		{"a negative elapsed decision bound", func(e *Estimator) { e.DecisionBounds.Elapsed = []Duration{Duration(-time.Second)} }, "estimator.decision_bounds.elapsed=-1s"},
		{"a zero memory decision bound", func(e *Estimator) { e.DecisionBounds.PeakMemory = []DataSize{0} }, "estimator.decision_bounds.peak_memory"},
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

// estimator.decision_bounds reads times as durations and memory in
// Trino's data size syntax (1024-based: "4GB" is 4 GiB, as Trino reads a
// resource group selector's range).
func TestDecisionBoundsFromYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	const doc = `
clusters: [{name: default, url: "http://127.0.0.1:8081"}]
estimator:
  decision_bounds:
    cpu: [30s, 5m]
    peak_memory: [512MB, 4GB]
    elapsed: [1m]
`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	c.FillDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	d := c.Estimator.DecisionBounds
	if !slices.Equal(d.CPU, []Duration{Duration(30 * time.Second), Duration(5 * time.Minute)}) ||
		!slices.Equal(d.PeakMemory, []DataSize{512 << 20, 4 << 30}) || !slices.Equal(d.Elapsed, []Duration{Duration(time.Minute)}) {
		t.Fatalf("decision bounds %+v", d)
	}
	if err := os.WriteFile(path, []byte("estimator: {decision_bounds: {peak_memory: [4 gallons]}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "4 gallons") {
		t.Fatalf("a bad size: %v; want an error naming it", err)
	}
}
