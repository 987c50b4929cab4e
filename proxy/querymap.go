package proxy

import "sync"

// queryMap remembers which cluster runs a query, for paths that clients
// build themselves (/v1/query/{id}). It is bounded: past its size the oldest
// entries are forgotten (FIFO), and the proxy asks each cluster instead. It
// is only a shortcut, never needed for correctness.
type queryMap struct {
	mu   sync.Mutex
	m    map[string]string
	ring []string
	next int
}

func newQueryMap(size int) *queryMap {
	return &queryMap{m: make(map[string]string, min(size, 1024)), ring: make([]string, size)}
}

func (q *queryMap) Put(id, cluster string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.m[id]; ok {
		q.m[id] = cluster
		return
	}
	if old := q.ring[q.next]; old != "" {
		delete(q.m, old)
	}
	q.ring[q.next] = id
	q.next = (q.next + 1) % len(q.ring)
	q.m[id] = cluster
}

func (q *queryMap) Get(id string) (string, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c, ok := q.m[id]
	return c, ok
}

func (q *queryMap) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.m)
}
