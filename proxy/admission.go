package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/valyala/fasthttp"
)

// Admission control: budgets of in-flight queries and of their predicted
// CPU seconds, global, per user and per group. A query over budget waits in
// a fair queue (round robin over users) while its client sees an ordinary
// QUEUED Trino query: the POST answers with a QUEUED page whose nextUri
// points at the proxy, and the proxy answers those polls itself
// (long-polling up to a second) until the query is admitted; the poll that
// sees the admission submits the query to Trino and returns Trino's first
// page, after which the client follows Trino's URIs as usual.
//
// Where budgets and the queue live is an admissionStore: this process's
// memory (memStore, the default: budgets per replica, and a queued query is
// lost with its process), or Redis (redisStore, AdmissionOptions.Redis):
// budgets shared by every replica, slots held as leases that the replicas
// serving a query renew (a crashed replica's slots come back when their
// lease runs out), and a queued query that any replica may poll and submit.
// The glue below is the same for both.

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
	// MaxQueueBytes bounds the bytes held by all waiting queries of this
	// replica's memory store together; past it a query that would have to
	// wait fails at once, like a full queue. Zero means 256 MiB. (With
	// Redis the waiting requests live in Redis, bounded per query only.)
	MaxQueueBytes int64
	// IdleRelease frees the budget of an admitted query not seen on any
	// page for this long (a client that went away); zero means 6 minutes
	// (Trino abandons a query after 5 minutes without polls).
	IdleRelease time.Duration
	// Redis, when set, holds the budgets and the queue in Redis, shared by
	// every replica configured with the same Redis and Redis.Prefix. Nil
	// means this process's memory.
	Redis *RedisAdmission
	// Rate limits new queries per user and per group (ratelimit.go),
	// in Redis too when Redis is set. Zero rates mean no limit.
	Rate RateLimits
}

func (o *AdmissionOptions) enabled() bool {
	return o != nil && (o.MaxQueries > 0 || o.MaxCPUSeconds > 0 || o.UserMaxQueries > 0 ||
		o.UserMaxCPUSeconds > 0 || o.GroupMaxQueries > 0 || o.GroupMaxCPUSeconds > 0)
}

// admissionStore holds the budgets, the admitted queries' slots and the
// fair queue. Ids are the proxy's own query ids (newLocalID); upstream ids
// are Trino's. Every method is safe for concurrent use. An error means the
// store could not answer (Redis unreachable); errQueueFull is the one
// refusal.
type admissionStore interface {
	// Enter admits e at once (true) or queues it (false), asking e for its
	// payload only when it must wait.
	Enter(ctx context.Context, e *entry) (bool, error)
	// Wait refreshes a queued query's last poll and waits up to d for it
	// to leave the queue; it returns the query's status then.
	Wait(ctx context.Context, id string, d time.Duration) (queueStatus, error)
	// Take hands an admitted query's payload to exactly one caller: the
	// poll that submits it. Otherwise it returns nil and the status.
	Take(ctx context.Context, id string) ([]byte, queueStatus, error)
	// Cancel removes a queued query (DELETE while queued, or an operator
	// in the console); false when id is not queued. Its next poll gets
	// USER_CANCELED with why.
	Cancel(ctx context.Context, id, why string) (bool, error)
	// Bind records the upstream id of an admitted query.
	Bind(ctx context.Context, id, upstreamID string) error
	// Touch notes that a page of the upstream query passed (it is alive);
	// it never blocks on the network.
	Touch(upstreamID string)
	// Finish frees the slot of the upstream query (its last page, DELETE).
	Finish(ctx context.Context, upstreamID string) error
	// Release frees an admitted query's slot by the proxy's id (a failed
	// submission).
	Release(ctx context.Context, id string) error
	// Upstream is the upstream id an admitted query was bound to.
	Upstream(ctx context.Context, id string) (string, bool)
	// Sweep fails queries that waited too long or whose client went away
	// and frees slots nobody renews.
	Sweep(ctx context.Context, now time.Time) error
	// Lengths are the queued and admitted queries, for metrics and tests.
	Lengths(ctx context.Context) (queued, inflight int, err error)
	// Queue lists up to max waiting queries with the usage of the budgets
	// that apply to each (the console's queue view, console_queue.go).
	Queue(ctx context.Context, max int) ([]queuedQuery, error)
	// Close stops background work.
	Close() error
}

// entry is a new query under admission control.
type entry struct {
	ID, User, Group string
	CPU             float64
	// Bytes is the size of the client's request (headers and body), known
	// before anything is copied: a store refuses to queue one over the
	// bounds.
	Bytes int64
	// Payload is the saved request and decision (savedQuery), asked for
	// only when the query must wait.
	Payload func() []byte
}

// queueState is where a query stands in admission.
type queueState uint8

const (
	stateUnknown  queueState = iota // not held (lost in a restart, expired)
	stateQueued                     // waiting
	stateAdmitted                   // admitted, payload not yet taken
	stateTaken                      // admitted and submitted
	stateFailed                     // will not run; queueStatus.Why says why
	stateCanceled                   // removed from the queue (Cancel); Why says by whom
)

type queueStatus struct {
	State    queueState
	Enqueued time.Time
	Why      string
}

// errQueueBytes: the query would have to wait, and its request (or the
// bytes all waiting requests hold) is over the bounds.
type errQueueBytes struct{ msg string }

func (e errQueueBytes) Error() string { return e.msg }

// tooBigToQueue says why e may not wait, or nil; held is what the waiting
// queries hold already (-1: not counted by this store).
func tooBigToQueue(o *AdmissionOptions, e *entry, held int64) error {
	maxOne, maxAll := int64(o.MaxQueuedQueryBytes), o.MaxQueueBytes
	if maxOne == 0 {
		maxOne = config.DefaultMaxQueuedQueryBytes
	}
	if maxAll == 0 {
		maxAll = config.DefaultMaxQueueBytes
	}
	if e.Bytes > maxOne {
		return errQueueBytes{fmt.Sprintf("the query must wait for admission, and its request (%d bytes) is over the %d bytes a waiting query may hold", e.Bytes, maxOne)}
	}
	if held >= 0 && held+e.Bytes > maxAll {
		return errQueueBytes{fmt.Sprintf("the proxy's admission queue is full (%d bytes held by waiting queries)", held)}
	}
	return nil
}

// errQueueFull: the queue holds QueueSize queries.
type errQueueFull struct{ size int }

func (e errQueueFull) Error() string {
	return fmt.Sprintf("the proxy's admission queue is full (%d queries)", e.size)
}

// savedQuery is a waiting query as any replica can submit it: the client's
// request and the routing decision.
type savedQuery struct {
	Header    []byte // the request line and headers, as fasthttp writes them
	Body      []byte
	Decision  Decision
	Cluster   string
	Estimate  estimate.Estimate
	Estimated bool
	TookNanos int64
	Identity  Identity
}

// saveQuery seals the waiting query for the store: it holds the caller's
// credentials (Authorization, cookies) and SQL, and with admission.redis it
// sits in Redis until a replica submits it, so it is encrypted (AES-256-GCM
// under a key derived from the route secret, which every replica shares)
// and bound to its admission id.
func (s *Server) saveQuery(id string, r *fasthttp.Request, d *decision) []byte {
	q := savedQuery{Header: r.Header.Header(), Body: r.Body(), Decision: d.Decision,
		Cluster: d.cluster.name, Estimate: d.est, Estimated: d.estimate, TookNanos: int64(d.took), Identity: d.identity}
	b, err := json.Marshal(q)
	if err != nil {
		// A number JSON cannot hold (NaN, ±Inf) in the estimate: the query
		// still runs, placed as decided, without its estimate's details.
		s.log.Warn("admission: the queued query's estimate cannot be saved; queued without it", "error", err)
		q.Estimate, q.Estimated = estimate.Estimate{}, false
		b, _ = json.Marshal(q)
	}
	return s.signer.seal(b, []byte(id))
}

// restoreQuery rebuilds a saved query into req; it fails when the payload
// does not open under this replica's route secret, is corrupt, or names a
// cluster this replica does not have.
func (s *Server) restoreQuery(id string, payload []byte, req *fasthttp.Request) (*decision, error) {
	plain, err := s.signer.open(payload, []byte(id))
	if err != nil {
		return nil, err
	}
	var q savedQuery
	if err := json.Unmarshal(plain, &q); err != nil {
		return nil, fmt.Errorf("proxy: saved query: %w", err)
	}
	c, ok := s.byName[q.Cluster]
	if !ok {
		return nil, fmt.Errorf("%w: saved query for cluster %q", ErrUnknownCluster, q.Cluster)
	}
	req.Reset()
	if err := req.Header.Read(bufio.NewReader(bytes.NewReader(q.Header))); err != nil {
		return nil, fmt.Errorf("proxy: saved query's header: %w", err)
	}
	req.SetBodyRaw(q.Body)
	return &decision{Decision: q.Decision, cluster: c, est: q.Estimate, estimate: q.Estimated,
		took: time.Duration(q.TookNanos), identity: q.Identity}, nil
}

// payloadKey derives the key that seals saved queries from the route secret.
func (s *Signer) payloadKey() []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("prestroid admission payload v1"))
	return m.Sum(nil)
}

// seal encrypts plain with AES-256-GCM, bound to aad: nonce || ciphertext.
func (s *Signer) seal(plain, aad []byte) []byte {
	block, _ := aes.NewCipher(s.payloadKey())
	gcm, _ := cipher.NewGCM(block)
	nonce := make([]byte, gcm.NonceSize(), gcm.NonceSize()+len(plain)+gcm.Overhead())
	_, _ = rand.Read(nonce)
	return gcm.Seal(nonce, nonce, plain, aad)
}

// errPayload: a saved query that does not open (another route secret, or
// tampered with in the store).
var errPayload = errors.New("proxy: saved query does not open under this route secret")

func (s *Signer) open(sealed, aad []byte) ([]byte, error) {
	block, _ := aes.NewCipher(s.payloadKey())
	gcm, _ := cipher.NewGCM(block)
	if len(sealed) < gcm.NonceSize() {
		return nil, errPayload
	}
	plain, err := gcm.Open(nil, sealed[:gcm.NonceSize()], sealed[gcm.NonceSize():], aad)
	if err != nil {
		return nil, errPayload
	}
	return plain, nil
}

// newAdmissionStore builds the store o asks for.
func newAdmissionStore(o AdmissionOptions, m *metrics, log *slog.Logger) (admissionStore, error) {
	if o.Redis != nil {
		return newRedisStore(o, m, log)
	}
	return newMemStore(o), nil
}

// admissionIdentity is who a query's budgets and rate limits are charged
// to, the one place that says so: the decision's identity (identity.go:
// the verified user with identity: verified, else X-Trino-User) when the
// query has been placed; before that (the rate limits, which run before
// any EXPLAIN) the identity the request claims.
func (s *Server) admissionIdentity(h *fasthttp.RequestHeader, d *decision) (user, group string) {
	if d != nil {
		user = d.identity.User
	} else {
		user = s.claimedIdentity(h).User
	}
	return user, userGroup(h, s.opts.Admission, user)
}

// Why a queued query was cancelled (admissionStore.Cancel), as its client
// reads it.
const (
	cancelByClient   = "canceled"
	cancelByOperator = "canceled by an operator (prestroid console)"
)

// storeTimeout bounds one call to the admission store from a handler.
const storeTimeout = 2 * time.Second

func storeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// releaseSlot frees an admitted query's slot by the proxy's id (a failed
// submission); a store error leaves it to the lease.
func (s *Server) releaseSlot(id string) {
	c, cancel := storeCtx()
	_ = s.admit.Release(c, id)
	cancel()
}

// finishQuery frees the slot of an upstream query (its last page, a
// cancel, a lost query); a store error leaves it to the lease.
func (s *Server) finishQuery(upstreamID string) {
	c, cancel := storeCtx()
	_ = s.admit.Finish(c, upstreamID)
	cancel()
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

// idTime is when a proxy id was made (its prefix), zero when unreadable.
func idTime(id string) time.Time {
	if len(id) < 15 {
		return time.Time{}
	}
	t, _ := time.Parse("20060102_150405", id[:15])
	return t
}

// admitOrQueue runs admission for a placed query. It returns the admission
// id and true when the query may be forwarded now; otherwise it has
// answered the client.
func (s *Server) admitOrQueue(ctx *fasthttp.RequestCtx, d *decision) (string, bool) {
	user, group := s.admissionIdentity(&ctx.Request.Header, d)
	// The request's size is known before any copy, so an oversized one is
	// refused uncopied, and only when it would have to wait (the store
	// decides).
	e := &entry{ID: newLocalID(), User: user, Group: group,
		Bytes: int64(len(ctx.Request.Header.Header()) + len(ctx.Request.Body()))}
	if d.estimate {
		e.CPU = d.est.CPUSeconds
	}
	// The request must outlive this handler if the query waits.
	e.Payload = func() []byte {
		d.Queued = true
		return s.saveQuery(e.ID, &ctx.Request, d)
	}
	c, cancel := storeCtx()
	now, err := s.admit.Enter(c, e)
	cancel()
	var full errQueueFull
	var big errQueueBytes
	switch {
	case errors.As(err, &full), errors.As(err, &big):
		s.trinoError(ctx, "PRESTROID_QUEUE_FULL", "INSUFFICIENT_RESOURCES", "prestroid: "+err.Error())
		return "", false
	case err != nil:
		// The store failed and had no fallback: fail open, as the
		// estimator does.
		s.log.Warn("admission store failed; query admitted without a budget", "error", err)
		return "", true
	case now:
		d.Queued = false
		return e.ID, true
	}
	s.metrics.queued.Inc()
	s.queuedPage(ctx, e.ID, time.Now(), 1)
	decisionHeaders(&ctx.Response.Header, d)
	return "", false
}

// queuedPage answers with a QUEUED QueryResults whose nextUri polls the
// proxy.
func (s *Server) queuedPage(ctx *fasthttp.RequestCtx, id string, enqueued time.Time, token int) {
	base := s.publicBase(ctx)
	target := queuedPrefix + id + "/" + strconv.Itoa(token)
	elapsed := max(time.Since(enqueued).Milliseconds(), 0)
	page := map[string]any{
		"id":      id,
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
		c, cancel := storeCtx()
		_, _ = s.admit.Cancel(c, id, cancelByClient)
		cancel()
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	st, err := s.admit.Wait(context.Background(), id, time.Second)
	if err != nil {
		s.storeUnavailable(ctx, id, token)
		return
	}
	switch st.State {
	case stateUnknown:
		s.lostQueued(ctx)
		return
	case stateQueued:
		s.queuedPage(ctx, id, st.Enqueued, token+1)
		return
	case stateFailed:
		s.metrics.queueWait.Observe(time.Since(st.Enqueued).Seconds())
		s.trinoError(ctx, "PRESTROID_QUEUE_TIMEOUT", "INSUFFICIENT_RESOURCES", "prestroid: query not run: "+st.Why)
		return
	case stateCanceled:
		// Trino's own name for a query cancelled before it finished.
		s.trinoError(ctx, "USER_CANCELED", "USER_ERROR", "prestroid: query not run: "+st.Why)
		return
	}
	c, cancel := storeCtx()
	payload, st, err := s.admit.Take(c, id)
	cancel()
	switch {
	case err != nil:
		s.storeUnavailable(ctx, id, token)
		return
	case payload == nil && st.State == stateQueued:
		s.queuedPage(ctx, id, st.Enqueued, token+1)
		return
	case payload == nil:
		// Already submitted by an earlier poll (a retried request): the
		// client holds Trino's URIs by now.
		s.trinoError(ctx, "PRESTROID_QUEUE_STALE", "USER_ERROR", "prestroid: this queued URI was already answered")
		return
	}
	s.metrics.queueWait.Observe(time.Since(st.Enqueued).Seconds())
	// Submit now: replay the saved POST as this request.
	d, err := s.restoreQuery(id, payload, &ctx.Request)
	if err != nil {
		s.releaseSlot(id)
		s.log.Warn("queued query could not be restored", "error", err)
		s.trinoError(ctx, "PRESTROID_QUEUE_LOST", "EXTERNAL", "prestroid: the queued query could not be restored on this proxy; it never reached Trino; submit it again")
		return
	}
	s.submit(ctx, id, d)
}

// storeUnavailable answers a queued poll while the admission store cannot
// be reached: the query stays queued (the client polls again) until its
// wait runs out.
func (s *Server) storeUnavailable(ctx *fasthttp.RequestCtx, id string, token int) {
	enq := idTime(id)
	if !enq.IsZero() && time.Since(enq) > s.maxWait() {
		s.trinoError(ctx, "PRESTROID_QUEUE_TIMEOUT", "INSUFFICIENT_RESOURCES",
			fmt.Sprintf("prestroid: query not run: waited more than %s in the proxy's admission queue (the shared queue is unreachable)", s.maxWait()))
		return
	}
	time.Sleep(time.Second) // as a long poll would
	s.queuedPage(ctx, id, enq, token+1)
}

func (s *Server) maxWait() time.Duration {
	if o := s.opts.Admission; o != nil && o.MaxWait > 0 {
		return o.MaxWait
	}
	return 10 * time.Minute
}

// lostQueued answers a poll for a queued query this proxy does not know:
// it was queued in a proxy process that has since restarted.
func (s *Server) lostQueued(ctx *fasthttp.RequestCtx) {
	s.trinoError(ctx, "PRESTROID_QUEUE_LOST", "EXTERNAL",
		"prestroid: this query was waiting in a proxy's admission queue that no longer holds it (the proxy restarted); it never reached Trino; submit it again")
}

// submit forwards an admitted query.
func (s *Server) submit(ctx *fasthttp.RequestCtx, id string, d *decision) {
	d.cluster.sent.Add(1)
	d.admitID = id
	s.forwardPlaced(ctx, d.cluster, "/v1/statement", modeStatementPOST, d)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		s.releaseSlot(id)
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
			c, cancel := storeCtx()
			if err := s.admit.Sweep(c, now); err != nil {
				s.log.Debug("admission sweep failed", "error", err)
			}
			cancel()
		}
	}
}
