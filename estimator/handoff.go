package estimator

import (
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// handoffTTL bounds how long a query's record waits for its last page to
// be seen by another replica (history.Handoff): a query that runs longer,
// or whose client never reads its last page, teaches nothing there.
const handoffTTL = time.Hour

// handoff is the shared store's Handoff; nil when the history is not
// shared (memory, a file): one replica then tracks its own queries.
func (s *Service) handoff() history.Handoff {
	if s.learn == nil {
		return nil
	}
	h, _ := s.learn.store.(history.Handoff)
	return h
}

// HasHandoff reports whether queries placed here can be learned from by
// the replica that sees their last page (a history shared in Redis).
func (s *Service) HasHandoff() bool { return s.handoff() != nil }

// Leave keeps learn (a placed query's Estimate.Learn) under its query id
// for the replica that will see the query's last page, in the background;
// it reports whether it was started. When the text stage answered and its
// background EXPLAIN + model is still running here (Basis.Pending), the
// record is written at once and written again with the model's numbers
// once they come (while nobody has taken it), so that a query that ends
// through another replica still teaches the model's residual. The result
// stays here for the placing replica's own Observe.
func (s *Service) Leave(id string, learn []byte) bool {
	h := s.handoff()
	if h == nil || id == "" || len(learn) == 0 {
		return false
	}
	done := make(chan struct{})
	s.leaving.Store(id, done)
	ok := s.goBackground(func() {
		defer func() { close(done); s.leaving.Delete(id) }()
		if h.Leave(id, learn, handoffTTL) != nil {
			return
		}
		s.handoffs.left.Add(1)
		b := UnmarshalBasis(learn)
		if b == nil || b.Pending == "" {
			return
		}
		e, ok := s.pending.peek(b.Pending)
		if !ok {
			return
		}
		t := time.NewTimer(s.settleTimeout())
		defer t.Stop()
		select {
		case <-e.done:
		case <-t.C:
			return
		case <-s.bgCtx.Done():
			return
		}
		r := s.pending.result(e)
		r.fill(b)
		b.Pending = ""
		if h.Refresh(id, MarshalBasis(b)) == nil {
			s.handoffs.refreshed.Add(1)
		}
	})
	if !ok {
		s.leaving.Delete(id)
	}
	return ok
}

// Forget removes what Leave kept for id: the placing replica saw the
// query end itself. In the background, after Leave's own write: a query
// of two quick pages would otherwise see its DEL overtake its SET, and
// leave a record nobody takes until handoffTTL.
func (s *Service) Forget(id string) {
	if h := s.handoff(); h != nil && id != "" {
		s.goBackground(func() {
			if d, ok := s.leaving.Load(id); ok {
				<-d.(chan struct{})
			}
			_ = h.Forget(id)
		})
	}
}

// ObserveElsewhere learns a with the record another replica left for query
// id (Leave), when this replica saw the query's last page but did not
// place it; nothing is learned when no record is found. In the background.
func (s *Service) ObserveElsewhere(id string, a estimate.Actual) {
	h := s.handoff()
	if h == nil || id == "" {
		return
	}
	s.goBackground(func() {
		learn, ok := h.Take(id)
		if !ok {
			s.handoffs.missed.Add(1)
			return
		}
		b := UnmarshalBasis(learn)
		if b == nil {
			s.handoffs.missed.Add(1)
			return
		}
		s.handoffs.taken.Add(1)
		b.Pending = "" // the placing replica's background EXPLAIN is not ours to wait for
		s.Observe(b, a)
	})
}

// HandoffStats count the records this replica left for others, took from
// others (and learned from), and looked for in vain.
type HandoffStats struct{ Left, Refreshed, Taken, Missed uint64 }

// HandoffStats reports the handoff counters since the service started.
func (s *Service) HandoffStats() HandoffStats {
	return HandoffStats{Left: s.handoffs.left.Load(), Refreshed: s.handoffs.refreshed.Load(), Taken: s.handoffs.taken.Load(), Missed: s.handoffs.missed.Load()}
}
