// Package cache holds Prestroid's in-process caches, built on ristretto:
// predicate vectors by normalized predicate text, and estimates by query
// fingerprint with a TTL.
//
// Both are best-effort: ristretto may drop a Set (contention, admission
// policy) and evicts at will, so callers never rely on a hit for
// correctness. Values are shared between callers and must never be
// modified after Set or after Get returns them. The package imports no
// project package; estimator.PredicateCache is satisfied structurally.
package cache

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Stats are cumulative counters of one cache.
type Stats struct {
	Hits, Misses        uint64
	KeysAdded, Evicted  uint64
	SetsDropped, Reject uint64
}

// HitRatio is Hits / (Hits + Misses), 0 when there were no lookups.
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

func statsOf(m *ristretto.Metrics) Stats {
	if m == nil {
		return Stats{}
	}
	return Stats{Hits: m.Hits(), Misses: m.Misses(), KeysAdded: m.KeysAdded(), Evicted: m.KeysEvicted(),
		SetsDropped: m.SetsDropped(), Reject: m.SetsRejected()}
}

// Vectors caches predicate vectors ([]float32) by key, bounded by memory.
// A nil *Vectors is a cache that never hits.
type Vectors struct {
	c *ristretto.Cache[string, []float32]
}

// NewVectors returns a vector cache holding about maxBytes of vectors
// (keys and slice headers included). maxBytes ≤ 0 means 64 MiB.
func NewVectors(maxBytes int64) (*Vectors, error) {
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, []float32]{
		// ~10 counters per item; items are about 0.5 KiB (Pf=100).
		NumCounters: max(1000, maxBytes/50),
		MaxCost:     maxBytes,
		BufferItems: 64,
		Metrics:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: vectors: %w", err)
	}
	return &Vectors{c: c}, nil
}

// Get returns the vector stored under key. The slice is shared: read only.
func (v *Vectors) Get(key string) ([]float32, bool) {
	if v == nil {
		return nil, false
	}
	return v.c.Get(key)
}

// Set stores vec under key (best-effort). vec must not be modified
// afterwards.
func (v *Vectors) Set(key string, vec []float32) {
	if v == nil || vec == nil {
		return
	}
	v.c.Set(key, vec, int64(4*len(vec)+len(key)+64))
}

// Wait blocks until pending Sets are applied (for tests and benchmarks).
func (v *Vectors) Wait() {
	if v != nil {
		v.c.Wait()
	}
}

// Stats returns the cache's counters.
func (v *Vectors) Stats() Stats {
	if v == nil {
		return Stats{}
	}
	return statsOf(v.c.Metrics)
}

// Close stops the cache's goroutines.
func (v *Vectors) Close() {
	if v != nil {
		v.c.Close()
	}
}

// TTL caches values of type V by string key for a fixed time to live,
// bounded by entry count (NewTTL) or by size (NewPlans). A nil *TTL never
// hits.
type TTL[V any] struct {
	c   *ristretto.Cache[string, V]
	ttl time.Duration
	// cost, when set, sizes each value (NewPlans); values costing more
	// than maxCost are not kept. Nil: one unit per entry (NewTTL).
	cost    func(V) int64
	maxCost int64
}

// NewTTL returns a cache of at most maxEntries entries, each kept for ttl.
// maxEntries ≤ 0 means 100000; ttl must be positive.
func NewTTL[V any](maxEntries int64, ttl time.Duration) (*TTL[V], error) {
	if ttl <= 0 {
		return nil, errors.New("cache: TTL must be positive")
	}
	if maxEntries <= 0 {
		maxEntries = 100000
	}
	c, err := ristretto.NewCache(&ristretto.Config[string, V]{
		NumCounters:        10 * maxEntries,
		MaxCost:            maxEntries,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true, // cost = 1 per entry
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &TTL[V]{c: c, ttl: ttl}, nil
}

// Get returns the value under key if present and not expired.
func (t *TTL[V]) Get(key string) (V, bool) {
	if t == nil {
		var zero V
		return zero, false
	}
	return t.c.Get(key)
}

// Set stores v under key for the cache's TTL (best-effort).
func (t *TTL[V]) Set(key string, v V) {
	switch {
	case t == nil:
	case t.cost == nil:
		t.c.SetWithTTL(key, v, 1, t.ttl)
	case t.cost(v) <= t.maxCost:
		t.c.SetWithTTL(key, v, 0, t.ttl) // cost 0: computed by the Config's Cost
	}
}

// Wait blocks until pending Sets are applied (for tests and benchmarks).
func (t *TTL[V]) Wait() {
	if t != nil {
		t.c.Wait()
	}
}

// Stats returns the cache's counters.
func (t *TTL[V]) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	return statsOf(t.c.Metrics)
}

// Close stops the cache's goroutines.
func (t *TTL[V]) Close() {
	if t != nil {
		t.c.Close()
	}
}

// NewPlans returns a cache of EXPLAIN plans ([]byte) by key, each kept for
// ttl and bounded by their total size: about maxBytes (≤ 0 means 64 MiB). A
// plan larger than maxBytes/4 is not kept. ttl must be positive.
func NewPlans(maxBytes int64, ttl time.Duration) (*TTL[[]byte], error) {
	if ttl <= 0 {
		return nil, errors.New("cache: TTL must be positive")
	}
	if maxBytes <= 0 {
		maxBytes = 64 << 20
	}
	cost := func(v []byte) int64 { return int64(len(v)) + 64 }
	c, err := ristretto.NewCache(&ristretto.Config[string, []byte]{
		// ~10 counters per item; plans are a few KiB to a few hundred KiB.
		NumCounters: max(1000, maxBytes/1000),
		MaxCost:     maxBytes,
		BufferItems: 64,
		Metrics:     true,
		Cost:        cost,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	return &TTL[[]byte]{c: c, ttl: ttl, cost: cost, maxCost: maxBytes / 4}, nil
}
