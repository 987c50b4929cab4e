package admission

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Admission control: budgets of in-flight queries and of their predicted
// CPU seconds and peak memory, global, per user and per group. A query over budget waits in
// a fair queue (round robin over users) while its client sees an ordinary
// QUEUED Trino query: the POST answers with a QUEUED page whose nextUri
// points at the proxy, and the proxy answers those polls itself
// (long-polling up to a second) until the query is admitted; the poll that
// sees the admission submits the query to Trino and returns Trino's first
// page, after which the client follows Trino's URIs as usual.
//
// Where budgets and the queue live is an Store: this process's
// memory (memStore, the default: budgets per replica, and a queued query is
// lost with its process), or Redis (redisStore, Options.Redis):
// budgets shared by every replica, slots held as leases that the replicas
// serving a query renew (a crashed replica's slots come back when their
// lease runs out), and a queued query that any replica may poll and submit.
// The glue below is the same for both.

// Options are the budgets and the bounds of the queue, built from the
// admission section of a configuration (OptionsFrom), whose defaults
// config fills: the stores take them as they are. A zero budget means
// unlimited; a zero bound on waiting (QueueSize, MaxWait,
// MaxQueuedQueryBytes, MaxQueueBytes) means no query may wait that much.
type Options struct {
	MaxQueries        int     // in-flight queries, all users
	MaxCPUSeconds     float64 // in-flight predicted CPU seconds, all users
	UserMaxQueries    int
	UserMaxCPUSeconds float64
	// Groups: a user's group comes from GroupHeader (if set and present),
	// else from UserGroups, else the user is their own group.
	GroupMaxQueries    int
	GroupMaxCPUSeconds float64
	// MaxPeakMemory, UserMaxPeakMemory and GroupMaxPeakMemory bound the
	// in-flight predicted peak memory in bytes (Entry.Memory), all users,
	// per user and per group (admission.max_peak_memory, ...).
	MaxPeakMemory      float64
	UserMaxPeakMemory  float64
	GroupMaxPeakMemory float64
	// ClassMaxPeakMemory bounds the in-flight predicted peak memory of
	// the queries admitted to each cost class's clusters (Entry.Class),
	// by class name (admission.class_max_peak_memory); a class absent or
	// at zero is unlimited.
	ClassMaxPeakMemory map[string]float64
	UserGroups         map[string]string
	GroupHeader        string
	// QueueSize bounds the waiting queries (admission.queue_size). Past it a
	// new query fails at once with a Trino error.
	QueueSize int
	// MaxWait is how long a query may wait (admission.max_wait).
	MaxWait time.Duration
	// MaxQueuedQueryBytes bounds the request (headers and SQL) a query
	// keeps while it waits; a larger one that would have to wait fails at
	// once (Trino refuses query text over 1,000,000 characters anyway;
	// admission.max_queued_query_bytes).
	MaxQueuedQueryBytes int
	// MaxQueueBytes bounds the bytes held by all waiting queries of this
	// replica's memory store together; past it a query that would have to
	// wait fails at once, like a full queue (admission.max_queue_bytes). (With
	// Redis the waiting requests live in Redis, bounded per query only.)
	MaxQueueBytes int64
	// IdleRelease frees the budget of an admitted query not seen on any
	// page for this long (a client that went away; admission.idle_release);
	// zero frees it at the next sweep.
	IdleRelease time.Duration
	// abandon fails a queued query whose client has not polled it for this
	// long; zero means abandonAfter (Trino's query.client.timeout). The
	// Redis store's local fallback sets it to the lease (see
	// newRedisStore).
	abandon time.Duration
	// Redis, when set, holds the budgets and the queue in Redis, shared by
	// every replica configured with the same Redis and Redis.Prefix. Nil
	// means this process's memory.
	Redis *RedisOptions
	// Rate limits new queries per user and per group (ratelimit.go),
	// in Redis too when Redis is set. Zero rates mean no limit.
	Rate RateLimits
}

func (o *Options) Enabled() bool {
	return o != nil && (o.MaxQueries > 0 || o.MaxCPUSeconds > 0 || o.UserMaxQueries > 0 ||
		o.UserMaxCPUSeconds > 0 || o.GroupMaxQueries > 0 || o.GroupMaxCPUSeconds > 0 ||
		o.MaxPeakMemory > 0 || o.UserMaxPeakMemory > 0 || o.GroupMaxPeakMemory > 0 || o.classBudgets())
}

// classBudgets reports whether some class has a memory budget.
func (o *Options) classBudgets() bool {
	for _, v := range o.ClassMaxPeakMemory {
		if v > 0 {
			return true
		}
	}
	return false
}

// Store holds the budgets, the admitted queries' slots and the
// fair queue. Ids are the proxy's own query ids (newLocalID); upstream ids
// are Trino's. Every method is safe for concurrent use. An error means the
// store could not answer (Redis unreachable); ErrQueueFull is the one
// refusal.
type Store interface {
	// Enter admits e at once (true) or queues it (false), asking e for its
	// payload only when it must wait.
	Enter(ctx context.Context, e *Entry) (bool, error)
	// Wait refreshes a queued query's last poll and waits up to d for it
	// to leave the queue; it returns the query's status then.
	Wait(ctx context.Context, id string, d time.Duration) (Status, error)
	// Take hands an admitted query's payload to exactly one caller: the
	// poll that submits it. Otherwise it returns nil and the status.
	Take(ctx context.Context, id string) ([]byte, Status, error)
	// Cancel removes a queued query (DELETE while queued, or an operator
	// in the console); false when id is not queued. Its next poll gets
	// USER_CANCELED with why.
	Cancel(ctx context.Context, id, why string) (bool, error)
	// Bind records the upstream id of an admitted query.
	Bind(ctx context.Context, id, upstreamID string) error
	// Touch notes that a page of the upstream query passed (it is alive);
	// it never blocks on the network.
	Touch(upstreamID string)
	// Finish frees the slot of the upstream query (its last page, DELETE)
	// and reports whether it held one.
	Finish(ctx context.Context, upstreamID string) (bool, error)
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
	// Queue lists up to max waiting queries with the Usage of the budgets
	// that apply to each (the console's queue view, console_queue.go).
	Queue(ctx context.Context, max int) ([]Queued, error)
	// Kind names where the budgets live: "memory" or "redis".
	Kind() string
	// Down reports whether a shared store is unreachable and this replica
	// admits on its own for now (always false for memory).
	Down() bool
	// Close stops background work.
	Close() error
}

// Entry is a new query under admission control.
type Entry struct {
	ID, User, Group string
	// CPU is its predicted CPU seconds and Memory its predicted peak
	// memory in bytes (the medians); zero when not predicted (it then
	// counts as a query and nothing more on that budget).
	CPU    float64
	Memory float64
	// Class is the cost class of the cluster the query goes to, whose
	// memory budget (Options.ClassMaxPeakMemory) it counts against; ""
	// for none.
	Class string
	// Bytes is the size of the client's request (headers and body), known
	// before anything is copied: a store refuses to queue one over the
	// bounds.
	Bytes int64
	// Payload is the saved request and decision (savedQuery), asked for
	// only when the query must wait.
	Payload func() []byte
}

// State is where a query stands in admission.
type State uint8

const (
	StateUnknown  State = iota // not held (lost in a restart, expired)
	StateQueued                // waiting
	StateAdmitted              // admitted, payload not yet taken
	StateTaken                 // admitted and submitted
	StateFailed                // will not run; Status.Why says why
	StateCanceled              // removed from the queue (Cancel); Why says by whom
)

type Status struct {
	State    State
	Enqueued time.Time
	Why      string
}

// ErrQueueBytes: the query would have to wait, and its request (or the
// bytes all waiting requests hold) is over the bounds.
type ErrQueueBytes struct{ msg string }

func (e ErrQueueBytes) Error() string { return e.msg }

// tooBigToQueue says why e may not wait, or nil; held is what the waiting
// queries hold already (-1: not counted by this store).
func tooBigToQueue(o *Options, e *Entry, held int64) error {
	maxOne, maxAll := int64(o.MaxQueuedQueryBytes), o.MaxQueueBytes
	if e.Bytes > maxOne {
		return ErrQueueBytes{fmt.Sprintf("the query must wait for admission, and its request (%d bytes) is over the %d bytes a waiting query may hold", e.Bytes, maxOne)}
	}
	if held >= 0 && held+e.Bytes > maxAll {
		return ErrQueueBytes{fmt.Sprintf("the proxy's admission queue is full (%d bytes held by waiting queries)", held)}
	}
	return nil
}

// ErrQueueFull: the queue holds QueueSize queries.
type ErrQueueFull struct{ size int }

func (e ErrQueueFull) Error() string {
	return fmt.Sprintf("the proxy's admission queue is full (%d queries)", e.size)
}

// NewStore builds the store o asks for.
func NewStore(o Options, m Metrics, log *slog.Logger) (Store, error) {
	if o.Redis != nil {
		return newRedisStore(o, m, log)
	}
	return newMemStore(o), nil
}

// storeTimeout bounds one call to the admission store from a handler.
const storeTimeout = 2 * time.Second

func StoreCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), storeTimeout)
}

// Queued is one waiting query as Store.Queue reports it.
type Queued struct {
	ID, User, Group string
	CPU             float64
	Memory          float64
	Enqueued        time.Time
	// Position is its place in its user's queue (0: next of the user's).
	Position int
	// Use is what is in flight now on the budgets that apply to it: the
	// global ones, its user's, its group's.
	Use [3]Usage
}

// Metrics are where a store reports the health of a shared store: each
// failed Redis call, and whether the store fell back to this replica's
// memory (1) or shares its budgets again (0). A nil field reports nothing.
type Metrics struct {
	StoreErrors   prometheus.Counter
	StoreFallback prometheus.Gauge
}

func (m Metrics) storeError() {
	if m.StoreErrors != nil {
		m.StoreErrors.Inc()
	}
}

func (m Metrics) fallback(on bool) {
	if m.StoreFallback != nil {
		m.StoreFallback.Set(map[bool]float64{false: 0, true: 1}[on])
	}
}
