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
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
)

// Stats are cumulative counters of one cache, and what it holds now.
type Stats struct {
	Hits, Misses        uint64
	KeysAdded, Evicted  uint64
	SetsDropped, Reject uint64
	// Entries is the number of entries held now (expired ones count until
	// ristretto's cleanup drops them, within about 10 s).
	Entries int64
	// Bytes is about what the held entries take: for the byte-bounded
	// caches (NewVectors, NewPlans), their summed cost against the bound
	// (ristretto's per-item overhead included); for NewTTL with a size
	// function, the values' summed sizes; 0 without one.
	Bytes int64
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
		SetsDropped: m.SetsDropped(), Reject: m.SetsRejected(), Entries: max(0, int64(m.KeysAdded())-int64(m.KeysEvicted()))}
}

// usedCost is the cost the cache holds now: its bound less what remains
// (ristretto's policy adds and removes every entry's cost, expiries
// included).
func usedCost[V any](c *ristretto.Cache[string, V]) int64 {
	return max(0, c.MaxCost()-c.RemainingCost())
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
	v.c.Set(key, vec, int64(4*cap(vec)+len(key)+64)) // cap: what the slice keeps alive
}

// Wait blocks until pending Sets are applied (for tests and benchmarks).
func (v *Vectors) Wait() {
	if v != nil {
		v.c.Wait()
	}
}

// Stats returns the cache's counters and size.
func (v *Vectors) Stats() Stats {
	if v == nil {
		return Stats{}
	}
	s := statsOf(v.c.Metrics)
	s.Bytes = usedCost(v.c)
	return s
}

// Clear drops every entry.
func (v *Vectors) Clear() {
	if v != nil {
		v.c.Clear()
	}
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
	// size, when set (NewSizedTTL), sizes each value of an entry-bounded
	// cache for Stats.Bytes; bytes is the sum over the values held,
	// added at Set and removed when ristretto lets a value go (evicted,
	// expired, rejected, replaced, cleared).
	size  func(V) int64
	bytes atomic.Int64
}

// NewTTL returns a cache of at most maxEntries entries, each kept for ttl.
// maxEntries ≤ 0 means 100000; ttl must be positive.
func NewTTL[V any](maxEntries int64, ttl time.Duration) (*TTL[V], error) {
	return NewSizedTTL[V](maxEntries, ttl, nil)
}

// NewSizedTTL is NewTTL whose Stats.Bytes is the sum of size over the
// values held (size must not retain or modify its argument). Nil size
// reports 0 bytes.
func NewSizedTTL[V any](maxEntries int64, ttl time.Duration, size func(V) int64) (*TTL[V], error) {
	if ttl <= 0 {
		return nil, errors.New("cache: TTL must be positive")
	}
	if maxEntries <= 0 {
		maxEntries = 100000
	}
	t := &TTL[V]{ttl: ttl, size: size}
	cfg := &ristretto.Config[string, V]{
		NumCounters:        10 * maxEntries,
		MaxCost:            maxEntries,
		BufferItems:        64,
		Metrics:            true,
		IgnoreInternalCost: true, // cost = 1 per entry
	}
	if size != nil {
		cfg.OnExit = func(v V) { t.bytes.Add(-size(v)) }
	}
	c, err := ristretto.NewCache(cfg)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	t.c = c
	return t, nil
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
	case t.cost == nil && t.size != nil:
		// Counted before the Set: ristretto may reject (and so let go
		// of) the value before SetWithTTL returns. A dropped Set is
		// never seen again.
		n := t.size(v)
		t.bytes.Add(n)
		if !t.c.SetWithTTL(key, v, 1, t.ttl) {
			t.bytes.Add(-n)
		}
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

// Stats returns the cache's counters and size.
func (t *TTL[V]) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	s := statsOf(t.c.Metrics)
	if t.cost != nil {
		s.Bytes = usedCost(t.c)
	} else {
		s.Bytes = max(0, t.bytes.Load())
	}
	return s
}

// Clear drops every entry.
func (t *TTL[V]) Clear() {
	if t != nil {
		t.c.Clear()
	}
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
	// cap, not len: a plan decoded from a page keeps its whole buffer
	// (plan.ExplainClient sizes it by the rest of the page).
	cost := func(v []byte) int64 { return int64(cap(v)) + 64 }
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
