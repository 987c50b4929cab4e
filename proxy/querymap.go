package proxy

import "sync"

// boundedMap is a mutex-guarded map with a fixed capacity: past it the
// oldest entries are forgotten (FIFO). The proxy uses it for shortcuts that
// are never needed for correctness: which cluster runs a query (for
// client-built /v1/query/{id} paths) and what it knows of queries in flight
// (for metrics and the feedback log).
type boundedMap[V any] struct {
	mu   sync.Mutex
	m    map[string]V
	ring []string
	next int
}

func newBoundedMap[V any](size int) *boundedMap[V] {
	return &boundedMap[V]{m: make(map[string]V, min(size, 1024)), ring: make([]string, size)}
}

func (q *boundedMap[V]) Put(id string, v V) {
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

func (q *boundedMap[V]) Get(id string) (V, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[id]
	return v, ok
}

// Take returns and forgets id's value (its ring slot is reused later).
func (q *boundedMap[V]) Take(id string) (V, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	v, ok := q.m[id]
	delete(q.m, id)
	return v, ok
}
