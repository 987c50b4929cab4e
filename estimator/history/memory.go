package history

import (
	"container/list"
	"sync"
)

// Memory is a Store in process memory, bounded to MaxEntries keys (the
// least recently updated go first). Its zero value is not usable: use
// NewMemory.
type Memory struct {
	mu    sync.Mutex
	max   int
	items map[string]*list.Element // of *memEntry
	order *list.List               // front: most recently updated
}

type memEntry struct {
	key string
	s   Stats
}

var _ Store = (*Memory)(nil)

// NewMemory returns an empty store of at most maxEntries keys (≤ 0 means
// unbounded).
func NewMemory(maxEntries int) *Memory {
	return &Memory{max: maxEntries, items: map[string]*list.Element{}, order: list.New()}
}

// Get implements Store.
func (m *Memory) Get(key string) (Stats, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[key]; ok {
		return e.Value.(*memEntry).s, true
	}
	return Stats{}, false
}

// Update implements Store.
func (m *Memory) Update(ups ...Update) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, u := range ups {
		if e, ok := m.items[u.Key]; ok {
			me := e.Value.(*memEntry)
			me.s = u.Apply(me.s, true)
			m.order.MoveToFront(e)
			continue
		}
		m.items[u.Key] = m.order.PushFront(&memEntry{key: u.Key, s: u.Apply(Stats{}, false)})
		for m.max > 0 && len(m.items) > m.max {
			last := m.order.Back()
			m.order.Remove(last)
			delete(m.items, last.Value.(*memEntry).key)
		}
	}
	return nil
}

// Len implements Store.
func (m *Memory) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items)
}

// Close implements Store; it keeps nothing.
func (m *Memory) Close() error { return nil }
