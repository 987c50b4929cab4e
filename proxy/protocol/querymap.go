package protocol

import "sync"

// BoundedMap is a mutex-guarded map with a fixed capacity: past it the
// oldest entries are forgotten (FIFO). The proxy uses it for shortcuts that
// are never needed for correctness: which cluster runs a query (for
// client-built /v1/query/{id} paths) and what it knows of queries in flight
// (for metrics and the feedback log).
type BoundedMap[V any] struct {
	mu   sync.Mutex
	m    map[string]V
	ring []string
	next int
}

func NewBoundedMap[V any](size int) *BoundedMap[V] {
	return &BoundedMap[V]{m: make(map[string]V, min(size, 1024)), ring: make([]string, size)}
}

func (q *BoundedMap[V]) Put(id string, v V) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.m[id]; ok {
		q.m[id] = v
		return
	}
	if old := q.ring[q.next]; old != "" {
		delete(q.m, old)
	}
	q.ring[q.next] = id
	q.next = (q.next + 1) % len(q.ring)
	q.m[id] = v
}

func (q *BoundedMap[V]) Get(id string) (V, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[id]
	return v, ok
}

// Take returns and forgets id's value (its ring slot is reused later).
func (q *BoundedMap[V]) Take(id string) (V, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[id]
	delete(q.m, id)
	return v, ok
}

// TakeWhere returns and forgets every entry for which take is true (called
// under the map's lock: it must not call the map).
func (q *BoundedMap[V]) TakeWhere(take func(V) bool) map[string]V {
	q.mu.Lock()
	defer q.mu.Unlock()
	got := map[string]V{}
	for id, v := range q.m {
		if take(v) {
			got[id] = v
			delete(q.m, id)
		}
	}
	return got
}

// ValidQueryID reports whether id can be a Trino query id: 1 to 128
// letters, digits and underscores (what the proxy accepts in a path or a
// request before it looks the id up).
func ValidQueryID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}
