package usage

import (
	"context"
	"sync"
	"time"
)

// MemoryStore keeps usage in this process's memory: one replica's own,
// lost on restart. Buckets older than the retention are dropped as new
// ones are added.
type MemoryStore struct {
	retention time.Duration
	mu        sync.Mutex
	buckets   map[int64]map[Dimension]map[string]*Totals // bucket start (unix seconds) -> ...
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore keeps buckets for retention.
func NewMemoryStore(retention time.Duration) *MemoryStore {
	return &MemoryStore{retention: retention, buckets: map[int64]map[Dimension]map[string]*Totals{}}
}

// Add implements Store.
func (m *MemoryStore) Add(_ context.Context, bucket time.Time, keys map[Dimension]string, t *Totals) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := bucket.Unix()
	dims := m.buckets[b]
	if dims == nil {
		dims = map[Dimension]map[string]*Totals{}
		m.buckets[b] = dims
		m.prune(bucket)
	}
	for d, k := range keys {
		byKey := dims[d]
		if byKey == nil {
			byKey = map[string]*Totals{}
			dims[d] = byKey
		}
		sum := byKey[k]
		if sum == nil {
			sum = &Totals{}
			byKey[k] = sum
		}
		sum.Add(t)
	}
	return nil
}

// prune drops the buckets that started more than the retention before
// newest (called as a bucket is made: once a bucket's time).
func (m *MemoryStore) prune(newest time.Time) {
	oldest := newest.Add(-m.retention).Unix()
	for b := range m.buckets {
		if b < oldest {
			delete(m.buckets, b)
		}
	}
}

// Sum implements Store.
func (m *MemoryStore) Sum(_ context.Context, d Dimension, from, to time.Time) (map[string]*Totals, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*Totals{}
	lo, hi := from.Unix(), to.Unix()
	for b, dims := range m.buckets {
		if b < lo || b >= hi {
			continue
		}
		for k, t := range dims[d] {
			sum := out[k]
			if sum == nil {
				sum = &Totals{}
				out[k] = sum
			}
			sum.Add(t)
		}
	}
	return out, nil
}

// Claim implements Store: one replica's ids are the Recorder's to
// remember.
func (m *MemoryStore) Claim(context.Context, string) (bool, error) { return true, nil }

// Shared implements Store: a MemoryStore holds one replica's usage.
func (m *MemoryStore) Shared() bool { return false }

// Close implements Store.
func (m *MemoryStore) Close() error { return nil }
