package estimator

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
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

func (h *slowHandoff) Refresh(id string, b []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.kept[id]; ok {
		h.kept[id] = b
	}
	return nil
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

// A query placed on the text stage's answer while its background EXPLAIN +
// model runs: what is left for other replicas is written again with the
// model's numbers once they come, and the result stays for the placing
// replica's own Observe.
func TestLeaveRefreshesTheRecordWithTheBackgroundModel(t *testing.T) {
	st := &slowHandoff{Memory: history.NewMemory(100), kept: map[string][]byte{}}
	s := NewService(nil, ServiceOptions{Workers: 1, History: st})
	defer s.Close()
	tok, pe := s.pending.add()
	b := &Basis{Exact: "e", Shape: "s", LnModel: math.NaN(), LnCost: math.NaN(), LnText: math.Log(3), LnRows: math.NaN(), Source: estimate.SourceText, Pending: tok}
	if !s.Leave("q1", MarshalBasis(b)) {
		t.Fatal("Leave did not start")
	}
	time.Sleep(100 * time.Millisecond) // the first write
	st.mu.Lock()
	first := UnmarshalBasis(st.kept["q1"])
	st.mu.Unlock()
	if first == nil || !math.IsNaN(first.LnModel) {
		t.Fatalf("the first record %+v: want one without the model's number", first)
	}
	r := Background{lnModel: math.Log(2), lnCost: math.NaN()}
	s.pending.finish(pe, r)
	deadline := time.Now().Add(3 * time.Second)
	for s.HandoffStats().Refreshed == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	got, ok := st.Take("q1")
	b2 := UnmarshalBasis(got)
	if !ok || b2 == nil || math.Abs(b2.LnModel-math.Log(2)) > 1e-9 || b2.Pending != "" || math.Abs(b2.LnText-math.Log(3)) > 1e-9 {
		t.Fatalf("the record another replica takes: %+v (ok %v); want the model's ln 2, the text's ln 3, nothing pending", b2, ok)
	}
	if !s.pending.has(tok) {
		t.Error("the background result was taken by the handoff; the placing replica's own Observe needs it")
	}
}
