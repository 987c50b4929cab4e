package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/valyala/fasthttp"
)

// Admission control: budgets of in-flight queries and of their predicted
// CPU seconds, global, per user and per group. A query over budget waits in
// a fair queue (round robin over users) inside the proxy while its client
// sees an ordinary QUEUED Trino query: the POST answers with a QUEUED page
// whose nextUri points at the proxy, and the proxy answers those polls
// itself (long-polling up to a second) until the query is admitted; the
// poll that sees the admission submits the query to Trino and returns
// Trino's first page, after which the client follows Trino's URIs as usual.
//
// Queued queries live only in this proxy's memory: nothing was sent to
// Trino for them, and after a restart their next poll gets a clear Trino
// error. Budgets are per replica.

// AdmissionOptions are the budgets; a zero limit means unlimited.
type AdmissionOptions struct {
	MaxQueries        int     // in-flight queries, all users
	MaxCPUSeconds     float64 // in-flight predicted CPU seconds, all users
	UserMaxQueries    int
	UserMaxCPUSeconds float64
	// Groups: a user's group comes from GroupHeader (if set and present),
	// else from UserGroups, else the user is their own group.
	GroupMaxQueries    int
	GroupMaxCPUSeconds float64
	UserGroups         map[string]string
	GroupHeader        string
	// QueueSize bounds the waiting queries; zero means 1000. Past it a new
	// query fails at once with a Trino error.
	QueueSize int
	// MaxWait is how long a query may wait; zero means 10 minutes.
	MaxWait time.Duration
	// MaxQueuedQueryBytes bounds the request (headers and SQL) a query
	// keeps while it waits; a larger one that would have to wait fails at
	// once (Trino refuses query text over 1,000,000 characters anyway).
	// Zero means 4 MiB.
	MaxQueuedQueryBytes int
	// MaxQueueBytes bounds the bytes held by all waiting queries together;
	// past it a query that would have to wait fails at once, like a full
	// queue. Zero means 256 MiB.
	MaxQueueBytes int64
	// IdleRelease frees the budget of an admitted query not seen on any
	// page for this long (a client that went away); zero means 6 minutes
	// (Trino abandons a query after 5 minutes without polls).
	IdleRelease time.Duration
}

func (o *AdmissionOptions) enabled() bool {
	return o != nil && (o.MaxQueries > 0 || o.MaxCPUSeconds > 0 || o.UserMaxQueries > 0 ||
		o.UserMaxCPUSeconds > 0 || o.GroupMaxQueries > 0 || o.GroupMaxCPUSeconds > 0)
}

// ticket is one query under admission control.
type ticket struct {
	id       string // the proxy's id while queued
	user     string
	group    string
	cpu      float64
	enqueued time.Time
	lastPoll time.Time
	admitted chan struct{} // closed on admission
	failed   string        // set with admitted closed: why it will not run
	req      *fasthttp.Request
	bytes    int64 // what req holds, counted in admission.queuedBytes while queued
	d        *decision

	// after admission
	upstreamID string
	cluster    string
	lastSeen   time.Time
	released   bool
}

type usage struct {
	n   int
	cpu float64
}

type admission struct {
	o AdmissionOptions

	mu          sync.Mutex
	queued      map[string]*ticket   // by proxy id
	byUser      map[string][]*ticket // FIFO per user
	users       []string             // round-robin order of users with queued tickets
	nQueued     int
	queuedBytes int64              // held by the requests of queued tickets
	inflight    map[string]*ticket // admitted, by proxy id
	byUp        map[string]*ticket // admitted, by upstream query id
	global      usage
	perUser     map[string]*usage
	perGroup    map[string]*usage
}

func newAdmission(o AdmissionOptions) *admission {
	if o.QueueSize == 0 {
		o.QueueSize = config.DefaultQueueSize
	}
	if o.MaxWait == 0 {
		o.MaxWait = config.DefaultMaxWait
	}
	if o.MaxQueuedQueryBytes == 0 {
		o.MaxQueuedQueryBytes = config.DefaultMaxQueuedQueryBytes
	}
	if o.MaxQueueBytes == 0 {
		o.MaxQueueBytes = config.DefaultMaxQueueBytes
	}
	if o.IdleRelease == 0 {
		o.IdleRelease = 6 * time.Minute
	}
	return &admission{o: o, queued: map[string]*ticket{}, byUser: map[string][]*ticket{},
		inflight: map[string]*ticket{}, byUp: map[string]*ticket{}, perUser: map[string]*usage{}, perGroup: map[string]*usage{}}
}

func (a *admission) groupOf(ctx *fasthttp.RequestCtx, user string) string {
	return userGroup(&ctx.Request.Header, &a.o, user)
}

// fits reports whether t can start now. A scope with nothing in flight
// always admits one query, so a query larger than its budget still runs.
func (a *admission) fits(t *ticket) bool {
	ok := func(u *usage, maxN int, maxCPU float64) bool {
		if u == nil || u.n == 0 {
			return true
		}
		return (maxN == 0 || u.n+1 <= maxN) && (maxCPU == 0 || u.cpu+t.cpu <= maxCPU)
	}
	return ok(&a.global, a.o.MaxQueries, a.o.MaxCPUSeconds) &&
		ok(a.perUser[t.user], a.o.UserMaxQueries, a.o.UserMaxCPUSeconds) &&
		ok(a.perGroup[t.group], a.o.GroupMaxQueries, a.o.GroupMaxCPUSeconds)
}

func (a *admission) charge(t *ticket, sign int) {
	for _, u := range []*usage{&a.global, a.use(a.perUser, t.user), a.use(a.perGroup, t.group)} {
		u.n += sign
		u.cpu += float64(sign) * t.cpu
		if u.n <= 0 {
			u.n, u.cpu = 0, 0
		}
	}
}

func (a *admission) use(m map[string]*usage, k string) *usage {
	u := m[k]
	if u == nil {
		u = &usage{}
		m[k] = u
	}
	return u
}

// enter admits t at once (true) or queues it (false). err is set when the
// queue is full.
func (a *admission) enter(t *ticket) (bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nQueued == 0 && a.fits(t) {
		a.start(t)
		return true, nil
	}
	if a.nQueued >= a.o.QueueSize {
		return false, fmt.Errorf("the proxy's admission queue is full (%d queries)", a.o.QueueSize)
	}
	if t.bytes > int64(a.o.MaxQueuedQueryBytes) {
		return false, fmt.Errorf("the query must wait for admission, and its request (%d bytes) is over the %d bytes a waiting query may hold", t.bytes, a.o.MaxQueuedQueryBytes)
	}
	if a.queuedBytes+t.bytes > a.o.MaxQueueBytes {
		return false, fmt.Errorf("the proxy's admission queue is full (%d bytes held by waiting queries)", a.queuedBytes)
	}
	a.queuedBytes += t.bytes
	a.queued[t.id] = t
	if len(a.byUser[t.user]) == 0 {
		a.users = append(a.users, t.user)
	}
	a.byUser[t.user] = append(a.byUser[t.user], t)
	a.nQueued++
	return false, nil
}

// start marks t admitted; a.mu held.
func (a *admission) start(t *ticket) {
	a.charge(t, +1)
	t.lastSeen = time.Now()
	a.inflight[t.id] = t
	close(t.admitted)
}

// pump admits queued tickets, taking users in round-robin order, as long as
// the head ticket of some user fits; a.mu held.
func (a *admission) pump() {
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
func (a *admission) dequeue(t *ticket) {
	if _, ok := a.queued[t.id]; !ok {
		return
	}
	delete(a.queued, t.id)
	q := a.byUser[t.user]
	for i, x := range q {
		if x == t {
			q = append(q[:i:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(a.byUser, t.user)
		if i := indexOf(a.users, t.user); i >= 0 {
			a.users = append(a.users[:i:i], a.users[i+1:]...)
		}
	} else {
		a.byUser[t.user] = q
	}
	a.nQueued--
	a.queuedBytes -= t.bytes
}

// cancel removes a queued ticket (DELETE while queued); ok is false when
// the id is not queued.
func (a *admission) cancel(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.queued[id]
	if !ok {
		return false
	}
	a.dequeue(t)
	t.failed = "canceled"
	close(t.admitted)
	return true
}

// takeRequest hands the saved request to exactly one poll.
func (a *admission) takeRequest(t *ticket) *fasthttp.Request {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := t.req
	t.req = nil
	return r
}

// bind records the upstream id of an admitted ticket.
func (a *admission) bind(t *ticket, upstreamID, cluster string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t.released {
		return
	}
	t.upstreamID, t.cluster = upstreamID, cluster
	a.byUp[upstreamID] = t
}

// seen refreshes an admitted query's liveness and, on its last page,
// releases its budget.
func (a *admission) seen(upstreamID string, last bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.byUp[upstreamID]
	if !ok {
		return
	}
	t.lastSeen = time.Now()
	if last {
		a.releaseLocked(t)
	}
}

// release frees an admitted ticket's budget (failed submission, DELETE).
func (a *admission) release(t *ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.releaseLocked(t)
}

func (a *admission) releaseLocked(t *ticket) {
	if t.released {
		return
	}
	t.released = true
	delete(a.inflight, t.id)
	if t.upstreamID != "" {
		delete(a.byUp, t.upstreamID)
	}
	a.charge(t, -1)
	a.pump()
}

// sweep releases admitted queries nobody polls and fails queued ones that
// waited too long or whose client went away.
func (a *admission) sweep(now time.Time) {
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
		case now.Sub(t.lastPoll) > 5*time.Minute:
			t.failed = "abandoned: no poll for 5 minutes"
		default:
			continue
		}
		a.dequeue(t)
		close(t.admitted)
	}
	a.pump()
}

func (a *admission) lookupQueued(id string) (*ticket, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t, ok := a.queued[id]; ok {
		t.lastPoll = time.Now()
		return t, true
	}
	if t, ok := a.inflight[id]; ok {
		return t, true
	}
	return nil, false
}

// Lengths for metrics and tests.
func (a *admission) lengths() (queued, inflight int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.nQueued, len(a.inflight)
}

// The proxy's own queued-query URIs: routed like any other, under the
// reserved cluster name localCluster, which configured clusters cannot use
// because it is not a valid config name.
const (
	localCluster = "prestroid~local"
	queuedPrefix = "/v1/prestroid/queued/"
)

func newLocalID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102_150405") + "_prestroid_" + hex.EncodeToString(b[:])
}

// admitOrQueue runs admission for a placed query. It returns true when the
// query may be forwarded now; otherwise it has answered the client.
func (s *Server) admitOrQueue(ctx *fasthttp.RequestCtx, d *decision) (*ticket, bool) {
	user := d.identity.User
	t := &ticket{id: newLocalID(), user: user, group: s.admit.groupOf(ctx, user), enqueued: time.Now(),
		admitted: make(chan struct{}), d: d}
	t.lastPoll = t.enqueued
	if d.estimate {
		t.cpu = d.est.CPUSeconds
	}
	// The request must outlive this handler if the query waits; t.bytes
	// is what the copy holds, which enter bounds for waiting queries.
	t.bytes = int64(len(ctx.Request.Header.Header()) + len(ctx.Request.Body()))
	t.req = &fasthttp.Request{}
	ctx.Request.CopyTo(t.req)
	now, err := s.admit.enter(t)
	if err != nil {
		s.trinoError(ctx, "PRESTROID_QUEUE_FULL", "INSUFFICIENT_RESOURCES", "prestroid: "+err.Error())
		return nil, false
	}
	if now {
		t.req = nil
		return t, true
	}
	d.Queued = true
	s.metrics.queued.Inc()
	s.queuedPage(ctx, t, 1)
	decisionHeaders(&ctx.Response.Header, d)
	return nil, false
}

// queuedPage answers with a QUEUED QueryResults whose nextUri polls the
// proxy.
func (s *Server) queuedPage(ctx *fasthttp.RequestCtx, t *ticket, token int) {
	base := s.publicBase(ctx)
	target := queuedPrefix + t.id + "/" + strconv.Itoa(token)
	elapsed := time.Since(t.enqueued).Milliseconds()
	page := map[string]any{
		"id":      t.id,
		"infoUri": base + "/ui/",
		"nextUri": base + s.signer.RoutedPath(localCluster, target),
		"stats": map[string]any{"state": "QUEUED", "queued": true, "scheduled": false, "nodes": 0,
			"totalSplits": 0, "queuedSplits": 0, "runningSplits": 0, "completedSplits": 0,
			"cpuTimeMillis": 0, "wallTimeMillis": 0, "queuedTimeMillis": elapsed, "elapsedTimeMillis": elapsed,
			"processedRows": 0, "processedBytes": 0, "physicalInputBytes": 0, "peakMemoryBytes": 0, "spilledBytes": 0},
		"warnings": []any{},
	}
	b, _ := json.Marshal(page)
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

// queuedPoll serves GET/DELETE on the proxy's own queued URIs.
func (s *Server) queuedPoll(ctx *fasthttp.RequestCtx, method, target string) {
	rest := strings.TrimPrefix(target, queuedPrefix)
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		s.fail(ctx, ErrNotFound, false)
		return
	}
	id := rest[:i]
	token, _ := strconv.Atoi(rest[i+1:])
	if s.admit == nil {
		s.lostQueued(ctx)
		return
	}
	if method == fasthttp.MethodDelete {
		s.admit.cancel(id)
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	t, ok := s.admit.lookupQueued(id)
	if !ok {
		s.lostQueued(ctx)
		return
	}
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	select {
	case <-t.admitted:
	case <-timer.C:
		s.queuedPage(ctx, t, token+1)
		return
	}
	s.metrics.queueWait.Observe(time.Since(t.enqueued).Seconds())
	if t.failed != "" {
		s.trinoError(ctx, "PRESTROID_QUEUE_TIMEOUT", "INSUFFICIENT_RESOURCES", "prestroid: query not run: "+t.failed)
		return
	}
	req := s.admit.takeRequest(t)
	if req == nil {
		// Already submitted by an earlier poll (a retried request): the
		// client holds Trino's URIs by now.
		s.trinoError(ctx, "PRESTROID_QUEUE_STALE", "USER_ERROR", "prestroid: this queued URI was already answered")
		return
	}
	// Submit now: replay the saved POST as this request.
	ctx.Request.Reset()
	req.CopyTo(&ctx.Request)
	s.submit(ctx, t)
}

// lostQueued answers a poll for a queued query this proxy does not know:
// it was queued in a proxy process that has since restarted.
func (s *Server) lostQueued(ctx *fasthttp.RequestCtx) {
	s.trinoError(ctx, "PRESTROID_QUEUE_LOST", "EXTERNAL",
		"prestroid: this query was waiting in a proxy's admission queue that no longer holds it (the proxy restarted); it never reached Trino; submit it again")
}

// submit forwards an admitted query.
func (s *Server) submit(ctx *fasthttp.RequestCtx, t *ticket) {
	d := t.d
	d.cluster.sent.Add(1)
	d.ticket = t
	s.forwardPlaced(ctx, d.cluster, "/v1/statement", modeStatementPOST, d)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		s.admit.release(t)
	}
}

// runSweeper runs admission's sweep until ctx ends.
func (s *Server) runSweeper(ctx context.Context) {
	tk := time.NewTicker(5 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			s.admit.sweep(now)
		}
	}
}
