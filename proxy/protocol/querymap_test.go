package protocol

import (
	"fmt"
	"testing"
)

// TestBoundedMap: past its capacity the oldest entries go; TakeWhere
// returns and forgets the entries it selects, and the ring keeps working.
func TestBoundedMap(t *testing.T) {
	m := NewBoundedMap[int](4)
	for i := range 6 {
		m.Put(fmt.Sprint(i), i)
	}
	for i := range 6 {
		if _, ok := m.Get(fmt.Sprint(i)); ok != (i >= 2) {
			t.Errorf("entry %d held %v, want %v (capacity 4)", i, ok, i >= 2)
		}
	}
	got := m.TakeWhere(func(v int) bool { return v%2 == 0 })
	if len(got) != 2 || got["2"] != 2 || got["4"] != 4 {
		t.Errorf("TakeWhere(even) = %v, want 2 and 4", got)
	}
	for _, id := range []string{"2", "4"} {
		if _, ok := m.Get(id); ok {
			t.Errorf("entry %s still held after TakeWhere", id)
		}
	}
	if v, ok := m.Take("3"); !ok || v != 3 {
		t.Errorf("Take(3) = %v, %v", v, ok)
	}
	m.Put("6", 6)
	if v, ok := m.Get("5"); !ok || v != 5 {
		t.Errorf("entry 5 lost after a Put into a freed slot: %v %v", v, ok)
	}
}
