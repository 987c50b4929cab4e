package admission

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memStore is the in-process admission store: budgets per replica, and a
// queued query lives only in this process (after a restart its next poll
// gets PRESTROID_QUEUE_LOST).
type memStore struct {
	o Options

	mu       sync.Mutex
	queued   map[string]*ticket   // by proxy id
	byUser   map[string][]*ticket // FIFO per user
	users    []string             // round-robin order of users with queued tickets
	nQueued  int
	held     int64              // request bytes of the queued tickets
	inflight map[string]*ticket // admitted, by proxy id
	// ended are queued tickets that will not run (cancelled, or failed by
	// Sweep), kept for abandonAfter so that their client's next poll reads
	// why (as Redis keeps them) rather than "lost"; at most maxEnded.
	ended    map[string]*ticket
	byUp     map[string]*ticket // admitted, by upstream query id
	global   Usage
	perUser  map[string]*Usage
	perGroup map[string]*Usage
	perClass map[string]*Usage
}

var _ Store = (*memStore)(nil)

// ticket is one query under admission control.
type ticket struct {
	Entry
	enqueued time.Time
	lastPoll time.Time
	endedAt  time.Time     // when it left the queue without running
	admitted chan struct{} // closed on admission or failure
	failed   string        // set with admitted closed: why it will not run
	canceled bool          // failed because Cancel removed it
	payload  []byte        // the saved query while it waits; nil once taken
	taken    bool

	// after admission
	upstreamID string
	lastSeen   time.Time
	released   bool
}

type Usage struct {
	Queries int     // admitted queries in flight
	CPU     float64 // their predicted CPU seconds
	Memory  float64 // their predicted peak memory in bytes
}

func newMemStore(o Options) *memStore {
	return &memStore{o: o, queued: map[string]*ticket{}, byUser: map[string][]*ticket{},
		inflight: map[string]*ticket{}, ended: map[string]*ticket{}, byUp: map[string]*ticket{}, perUser: map[string]*Usage{}, perGroup: map[string]*Usage{}, perClass: map[string]*Usage{}}
}

// fits reports whether t can start now. A scope with nothing in flight
// always admits one query, so a query larger than its budget still runs.
func (a *memStore) fits(t *ticket) bool {
	ok := func(u *Usage, maxN int, maxCPU, maxMem float64) bool {
		if u == nil || u.Queries == 0 {
			return true
		}
		return (maxN == 0 || u.Queries+1 <= maxN) && (maxCPU == 0 || u.CPU+t.CPU <= maxCPU) &&
			(maxMem == 0 || u.Memory+t.Memory <= maxMem)
	}
	return ok(&a.global, a.o.MaxQueries, a.o.MaxCPUSeconds, a.o.MaxPeakMemory) &&
		ok(a.perUser[t.User], a.o.UserMaxQueries, a.o.UserMaxCPUSeconds, a.o.UserMaxPeakMemory) &&
		ok(a.perGroup[t.Group], a.o.GroupMaxQueries, a.o.GroupMaxCPUSeconds, a.o.GroupMaxPeakMemory) &&
		(t.Class == "" || ok(a.perClass[t.Class], 0, 0, a.o.ClassMaxPeakMemory[t.Class]))
}

func (a *memStore) charge(t *ticket, sign int) {
	scopes := []*Usage{&a.global, a.use(a.perUser, t.User), a.use(a.perGroup, t.Group)}
	if t.Class != "" {
		scopes = append(scopes, a.use(a.perClass, t.Class))
	}
	for _, u := range scopes {
		u.Queries += sign
		u.CPU += float64(sign) * t.CPU
		u.Memory += float64(sign) * t.Memory
		if u.Queries <= 0 {
			u.Queries, u.CPU, u.Memory = 0, 0, 0
		}
	}
	if sign < 0 {
		// Forget idle users and groups: the maps stay as small as what is
		// in flight.
		if u := a.perUser[t.User]; u != nil && u.Queries == 0 {
			delete(a.perUser, t.User)
		}
		if u := a.perGroup[t.Group]; u != nil && u.Queries == 0 {
			delete(a.perGroup, t.Group)
		}
		if u := a.perClass[t.Class]; u != nil && u.Queries == 0 {
			delete(a.perClass, t.Class)
		}
	}
}

func (a *memStore) use(m map[string]*Usage, k string) *Usage {
	u := m[k]
	if u == nil {
		u = &Usage{}
		m[k] = u
	}
	return u
}

func (a *memStore) Enter(_ context.Context, e *Entry) (bool, error) {
	now := time.Now()
	t := &ticket{Entry: *e, enqueued: now, lastPoll: now, admitted: make(chan struct{})}
	t.Payload = nil
	// The payload (the sealed request, up to the body limit) is made
	// outside the lock, and only when the query must wait; meanwhile the
	// state may change, so the checks run again.
	for try := 0; ; try++ {
		a.mu.Lock()
		if a.nQueued == 0 && a.fits(t) {
			t.taken, t.payload = true, nil
			a.start(t)
			a.mu.Unlock()
			return true, nil
		}
		if a.nQueued >= a.o.QueueSize {
			a.mu.Unlock()
			return false, ErrQueueFull{a.o.QueueSize}
		}
		if err := tooBigToQueue(&a.o, e, a.held); err != nil {
			a.mu.Unlock()
			return false, err
		}
		if try > 0 {
			break // a.mu held
		}
		a.mu.Unlock()
		t.payload = e.Payload()
	}
	defer a.mu.Unlock()
	a.held += t.Bytes
	a.queued[t.ID] = t
	if len(a.byUser[t.User]) == 0 {
		a.users = append(a.users, t.User)
	}
	a.byUser[t.User] = append(a.byUser[t.User], t)
	a.nQueued++
	return false, nil
}

// start marks t admitted; a.mu held.
func (a *memStore) start(t *ticket) {
	a.charge(t, +1)
	t.lastSeen = time.Now()
	a.inflight[t.ID] = t
	close(t.admitted)
}

// pump admits queued tickets, taking users in round-robin order, as long as
// the head ticket of some user fits; a.mu held.
func (a *memStore) pump() {
	for progress := true; progress && a.nQueued > 0; {
		progress = false
		for i := 0; i < len(a.users); i++ {
			u := a.users[i]
			q := a.byUser[u]
			if len(q) == 0 || !a.fits(q[0]) {
				continue
			}
			t := q[0]
			a.dequeue(t)
			a.start(t)
			progress = true
			// Rotate: this user goes to the back of the order.
			if idx := indexOf(a.users, u); idx >= 0 && len(a.byUser[u]) > 0 {
				a.users = append(append(a.users[:idx:idx], a.users[idx+1:]...), u)
			}
			break
		}
	}
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// dequeue removes t from the queue; a.mu held.
func (a *memStore) dequeue(t *ticket) {
	if _, ok := a.queued[t.ID]; !ok {
		return
	}
	delete(a.queued, t.ID)
	q := a.byUser[t.User]
	for i, x := range q {
		if x == t {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(a.byUser, t.User)
		if i := indexOf(a.users, t.User); i >= 0 {
			a.users = append(a.users[:i:i], a.users[i+1:]...)
		}
	} else {
		a.byUser[t.User] = q
	}
	a.nQueued--
	a.held -= t.Bytes
}

func (a *memStore) status(t *ticket) Status {
	st := Status{Enqueued: t.enqueued, Why: t.failed}
	select {
	case <-t.admitted:
		switch {
		case t.canceled:
			st.State = StateCanceled
		case t.failed != "":
			st.State = StateFailed
		case t.taken:
			st.State = StateTaken
		default:
			st.State = StateAdmitted
		}
	default:
		st.State = StateQueued
	}
	return st
}

func (a *memStore) lookup(id string) (*ticket, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.queued[id]; ok {
		t.lastPoll = time.Now()
		return t, true
	}
	if t, ok := a.ended[id]; ok {
		return t, true
	}
	t, ok := a.inflight[id]
	return t, ok
}

func (a *memStore) Wait(ctx context.Context, id string, d time.Duration) (Status, error) {
	t, ok := a.lookup(id)
	if !ok {
		return Status{}, nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.admitted:
	case <-timer.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status(t), nil
}

func (a *memStore) Take(_ context.Context, id string) ([]byte, Status, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.inflight[id]
	if !ok {
		if t, ok := a.queued[id]; ok {
			return nil, a.status(t), nil
		}
		return nil, Status{}, nil
	}
	st := a.status(t)
	if st.State != StateAdmitted {
		return nil, st, nil
	}
	p := t.payload
	t.payload, t.taken = nil, true
	t.lastSeen = time.Now()
	return p, st, nil
}

func (a *memStore) Cancel(_ context.Context, id, why string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.queued[id]
	if !ok {
		return false, nil
	}
	a.dequeue(t)
	t.failed, t.canceled, t.payload = why, true, nil
	close(t.admitted)
	a.end(t, time.Now())
	return true, nil
}

// maxEnded bounds memStore.ended.
const maxEnded = 10000

// end keeps t, which left the queue without running, for its client's
// next poll; a.mu held.
func (a *memStore) end(t *ticket, now time.Time) {
	if len(a.ended) < maxEnded {
		t.endedAt = now
		a.ended[t.ID] = t
	}
}

func (a *memStore) Bind(_ context.Context, id, upstreamID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.inflight[id]
	if !ok || t.released {
		return nil
	}
	t.upstreamID = upstreamID
	a.byUp[upstreamID] = t
	return nil
}

func (a *memStore) Touch(upstreamID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.byUp[upstreamID]; ok {
		t.lastSeen = time.Now()
	}
}

func (a *memStore) Finish(_ context.Context, upstreamID string) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.byUp[upstreamID]
	if ok {
		a.releaseLocked(t)
	}
	return ok, nil
}

func (a *memStore) Release(_ context.Context, id string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.inflight[id]; ok {
		a.releaseLocked(t)
	}
	return nil
}

func (a *memStore) releaseLocked(t *ticket) {
	if t.released {
		return
	}
	t.released = true
	delete(a.inflight, t.ID)
	if t.upstreamID != "" {
		delete(a.byUp, t.upstreamID)
	}
	a.charge(t, -1)
	a.pump()
}

func (a *memStore) Upstream(_ context.Context, id string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.inflight[id]; ok && t.upstreamID != "" {
		return t.upstreamID, true
	}
	return "", false
}

// Sweep releases admitted queries nobody polls and fails queued ones that
// waited too long or whose client went away.
func (a *memStore) Sweep(_ context.Context, now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.inflight {
		if now.Sub(t.lastSeen) > a.o.IdleRelease {
			a.releaseLocked(t)
		}
	}
	for _, t := range a.queued {
		switch {
		case now.Sub(t.enqueued) > a.o.MaxWait:
			t.failed = fmt.Sprintf("waited more than %s in the proxy's admission queue", a.o.MaxWait)
		case now.Sub(t.lastPoll) > a.abandon():
			t.failed = fmt.Sprintf("abandoned: no poll for %s", a.abandon())
		default:
			continue
		}
		a.dequeue(t)
		t.payload = nil
		close(t.admitted)
		a.end(t, now)
	}
	for id, t := range a.ended {
		if now.Sub(t.endedAt) > abandonAfter {
			delete(a.ended, id)
		}
	}
	a.pump()
	return nil
}

// abandonAfter fails a queued query whose client stopped polling (Trino's
// query.client.timeout).
const abandonAfter = 5 * time.Minute

func (a *memStore) abandon() time.Duration {
	if a.o.abandon > 0 {
		return a.o.abandon
	}
	return abandonAfter
}

func (a *memStore) Lengths(context.Context) (int, int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nQueued, len(a.inflight), nil
}

// Queue lists the waiting queries in the order the pump visits them (users
// round robin, each user's FIFO), at most max.
func (a *memStore) Queue(_ context.Context, max int) ([]Queued, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Queued, 0, min(a.nQueued, max))
	get := func(m map[string]*Usage, k string) Usage {
		if u := m[k]; u != nil {
			return *u
		}
		return Usage{}
	}
	for _, u := range a.users {
		for pos, t := range a.byUser[u] {
			if len(out) >= max {
				return out, nil
			}
			out = append(out, Queued{ID: t.ID, User: t.User, Group: t.Group, CPU: t.CPU, Memory: t.Memory, Enqueued: t.enqueued,
				Position: pos, Use: [3]Usage{a.global, get(a.perUser, t.User), get(a.perGroup, t.Group)}})
		}
	}
	return out, nil
}

// has reports whether id is a query of this store (queued, admitted, or
// ended without running).
func (a *memStore) has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, q := a.queued[id]
	_, in := a.inflight[id]
	_, ended := a.ended[id]
	return q || in || ended
}

func (a *memStore) Close() error { return nil }

func (a *memStore) Kind() string { return "memory" }

func (a *memStore) Down() bool { return false }
