package estimator

import (
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/history"
)

// slowHandoff is a memory history with a Handoff whose Leave takes a while
// (a Redis round trip under load).
type slowHandoff struct {
	*history.Memory
	mu   sync.Mutex
	kept map[string][]byte
}

func (h *slowHandoff) Leave(id string, b []byte, _ time.Duration) error {
	time.Sleep(50 * time.Millisecond)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.kept[id] = b
	return nil
}

func (h *slowHandoff) Take(id string) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	b, ok := h.kept[id]
	delete(h.kept, id)
	return b, ok
}

func (h *slowHandoff) Forget(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.kept, id)
	return nil
}

// A query that ends on the placing replica right after its first page
// leaves nothing behind: Forget waits for Leave's write instead of
// overtaking it.
func TestForgetRunsAfterItsLeave(t *testing.T) {
	st := &slowHandoff{Memory: history.NewMemory(100), kept: map[string][]byte{}}
	s := NewService(nil, ServiceOptions{Workers: 1, History: st})
	defer s.Close()
	if !s.HasHandoff() {
		t.Fatal("a store with a Handoff: HasHandoff false")
	}
	if !s.Leave("q1", []byte(`{"src":"text"}`)) {
		t.Fatal("Leave did not start")
	}
	s.Forget("q1") // at once, while the Leave is still being written
	// Without the ordering the DEL lands first and the SET 50 ms later
	// stays: the record is never removed.
	deadline := time.Now().Add(3 * time.Second)
	for {
		st.mu.Lock()
		_, kept := st.kept["q1"]
		st.mu.Unlock()
		if !kept && s.HandoffStats().Left == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 s: record kept %v, left %d; want it written, then removed by the placing replica's Forget", kept, s.HandoffStats().Left)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
