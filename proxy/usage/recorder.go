package usage

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Recorder. config fills their defaults (usage.*):
// the zero values mean what each field says.
type Options struct {
	// Bucket is the width of the stored time buckets: the finest window.
	// Required (positive).
	Bucket time.Duration
	// Retention is how long a bucket is kept: the longest window.
	// Required (positive).
	Retention time.Duration
	// Top caps the names each dimension has its own Prometheus series for
	// (per replica); later names count under Other. Zero means none: every
	// query counts under Other.
	Top int
	// Store holds the buckets. Nil means a RedisStore when RedisURL is
	// set, else a MemoryStore of Retention.
	Store Store
	// RedisURL, when set (and Store nil), is the Redis every replica adds
	// its usage to (usage.redis); RedisPrefix starts its keys
	// (usage.redis_prefix).
	RedisURL, RedisPrefix string
	// Queue bounds the queries waiting to be written to Store (a slow
	// Redis); past it a query is dropped from the store (not from the
	// metrics) and counted. Zero means 10000.
	Queue int
	// Fetch, when set, fetches a query's final info from its cluster, to
	// settle a query whose last page may have missed CPU (settle.go). Nil
	// means every query is accounted as its last page read.
	Fetch Fetcher
	// GroupOf maps a user to their group, for the queries whose group is
	// not known (Untracked). Nil means each user is their own group.
	GroupOf func(user string) string
	// Logger receives the store's errors (one line per outage). Nil means
	// slog.Default().
	Logger *slog.Logger
}

// Other is the Prometheus label value of the names past Options.Top.
const Other = "(other)"

// Recorder accounts finished queries. Create it with New, start its
// writer with Run; Record and Report are safe for concurrent use.
type Recorder struct {
	o       Options
	store   Store
	pending chan Query
	log     *slog.Logger

	queries, cpu, pcpu, mem, wall, elapsed *prometheus.CounterVec
	storeErrors, dropped, duplicates       prometheus.Counter
	seen                                   *seenIDs // the ids accounted here lately (claim)

	mu     sync.Mutex
	labels map[Dimension]map[string]bool // the names admitted to their own series

	down      atomic.Bool   // the store is failing (logged once per outage)
	settling  chan struct{} // a slot per query settling now
	settlers  sync.WaitGroup
	closing   chan struct{} // closed by Close: settling stops waiting
	closeOnce sync.Once
}

// New makes a Recorder over o; it fails only on a bad o.RedisURL. Start
// its writer with Run, and Close it at shutdown.
func New(o Options) (*Recorder, error) {
	if o.Store == nil && o.RedisURL != "" {
		st, err := NewRedisStore(RedisOptions{URL: o.RedisURL, Prefix: o.RedisPrefix, Bucket: o.Bucket, Retention: o.Retention})
		if err != nil {
			return nil, err
		}
		o.Store = st
	}
	if o.Store == nil {
		o.Store = NewMemoryStore(o.Retention)
	}
	if o.Queue <= 0 {
		o.Queue = 10000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	vec := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	const by = " Per name of each dimension (user, group, source): the first usage.top names a replica sees, the rest as name=\"" + Other + "\"."
	r := &Recorder{o: o, store: o.Store, pending: make(chan Query, o.Queue), log: o.Logger,
		queries: vec("prestroid_usage_queries_total", "Finished queries, by final state (FINISHED, FAILED)."+by, "dimension", "name", "state"),
		cpu:     vec("prestroid_usage_cpu_seconds_total", "CPU seconds Trino reported for finished queries."+by, "dimension", "name"),
		pcpu:    vec("prestroid_usage_predicted_cpu_seconds_total", "Predicted CPU seconds (the estimate's median) of finished queries."+by, "dimension", "name"),
		mem:     vec("prestroid_usage_memory_byte_seconds_total", "Memory-seconds of finished queries: peak memory (bytes) times elapsed seconds (Prometheus' base units; the API says GB·s)."+by, "dimension", "name"),
		wall:    vec("prestroid_usage_wall_seconds_total", "Wall seconds (Trino's wallTimeMillis: summed over tasks) of finished queries."+by, "dimension", "name"),
		elapsed: vec("prestroid_usage_elapsed_seconds_total", "Elapsed seconds of finished queries."+by, "dimension", "name"),
		storeErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_usage_store_errors_total",
			Help: "Finished queries the usage store failed to record (Redis unreachable): missing from /prestroid/api/usage, counted in the metrics."}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_usage_dropped_total",
			Help: "Finished queries not written to the usage store because its queue was full."}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{Name: "prestroid_usage_duplicates_total",
			Help: "Last pages of queries already accounted (fetched again, or through another replica) and not counted again."}),
		labels: map[Dimension]map[string]bool{}, settling: make(chan struct{}, maxSettling), seen: newSeenIDs(100000),
		closing: make(chan struct{}),
	}
	for _, d := range Dimensions {
		r.labels[d] = map[string]bool{}
	}
	return r, nil
}

// Collectors are the Recorder's metrics, to register.
func (r *Recorder) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.queries, r.cpu, r.pcpu, r.mem, r.wall, r.elapsed, r.storeErrors, r.dropped, r.duplicates}
}

// Shared reports whether Report sums every replica (the store is Redis).
func (r *Recorder) Shared() bool { return r.store.Shared() }

// label is name's label value in dimension d: name itself once admitted
// (it stays: counters must stay monotonic), Other past the cap.
func (r *Recorder) label(d Dimension, name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := r.labels[d]
	if set[name] {
		return name
	}
	if len(set) < r.o.Top {
		set[name] = true
		return name
	}
	return Other
}

// Record accounts q, in the metrics and in the store, by the writer
// (Run); at once, or once settled (settle.go) when it failed, its
// statistics were not rolled up or the replica did not place it
// (Untracked). It never blocks.
func (r *Recorder) Record(q Query) {
	if r.o.Fetch != nil && (q.Untracked || needsSettling(&q)) {
		select {
		case r.settling <- struct{}{}:
			r.settlers.Add(1)
			go r.settleAndEnqueue(q)
			return
		default: // too many at once: as it reads
		}
	}
	r.enqueue(q)
}

// settleAndEnqueue settles q, then hands it to the writer (a slot of
// settling is held).
func (r *Recorder) settleAndEnqueue(q Query) {
	defer func() { <-r.settling; r.settlers.Done() }()
	r.settle(&q)
	r.enqueue(q)
}

// enqueue hands q to the writer.
func (r *Recorder) enqueue(q Query) {
	select {
	case r.pending <- q:
	default:
		r.dropped.Inc()
	}
}

// count counts q in the metrics.
func (r *Recorder) count(q *Query) {
	state := "FINISHED"
	if q.State != "FINISHED" {
		state = "FAILED"
	}
	mem := q.MemoryGBSeconds() * 1e9 // byte-seconds
	for _, d := range Dimensions {
		l := r.label(d, q.Key(d))
		r.queries.WithLabelValues(string(d), l, state).Inc()
		r.cpu.WithLabelValues(string(d), l).Add(q.CPUSeconds)
		r.mem.WithLabelValues(string(d), l).Add(mem)
		r.wall.WithLabelValues(string(d), l).Add(q.WallSeconds)
		r.elapsed.WithLabelValues(string(d), l).Add(q.ElapsedSeconds)
		if q.Predicted {
			r.pcpu.WithLabelValues(string(d), l).Add(q.PredictedCPUSeconds)
		}
	}
}

// Run writes recorded queries to the store until ctx ends; Close then
// writes what is left.
func (r *Recorder) Run(ctx context.Context) {
	for {
		select {
		case q := <-r.pending:
			r.write(context.Background(), &q)
		case <-ctx.Done():
			return
		}
	}
}

// Close ends accounting once nothing more is recorded (the servers have
// shut down, Run has returned): queries still settling are accounted as
// their last page read, what is queued is written (until ctx ends), and
// the store is closed.
func (r *Recorder) Close(ctx context.Context) error {
	r.closeOnce.Do(func() { close(r.closing) })
	r.settlers.Wait()
	for {
		select {
		case q := <-r.pending:
			r.write(ctx, &q)
		default:
			return r.store.Close()
		}
	}
}

// write accounts q once: unless this replica (or, with a shared store,
// any) already has, it counts q in the metrics and adds it to the store,
// within 2 seconds.
func (r *Recorder) write(ctx context.Context, q *Query) {
	q.User, q.Group, q.Source = validKey(q.User), validKey(q.Group), validKey(q.Source)
	q.CPUSeconds, q.WallSeconds, q.ElapsedSeconds = cleanFloat(q.CPUSeconds), cleanFloat(q.WallSeconds), cleanFloat(q.ElapsedSeconds)
	q.PredictedCPUSeconds = cleanFloat(q.PredictedCPUSeconds)
	q.PredictedMemoryGBSeconds, q.PredictedElapsedSeconds = cleanFloat(q.PredictedMemoryGBSeconds), cleanFloat(q.PredictedElapsedSeconds)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if !r.claim(ctx, q.QueryID) {
		r.duplicates.Inc()
		return
	}
	r.count(q)
	keys := make(map[Dimension]string, len(Dimensions))
	for _, d := range Dimensions {
		keys[d] = q.Key(d)
	}
	t := totalsOf(q)
	err := r.store.Add(ctx, q.Finished.Truncate(r.o.Bucket), keys, &t)
	r.storeResult(err)
}

// claim reports whether query id is to be accounted here: the first time
// this replica sees it (a client may fetch a last page twice) and, with a
// shared store, the first time any replica does (a last page fetched
// through two replicas). An empty id is always accounted; a store that
// cannot answer lets it be (counted twice rather than lost).
func (r *Recorder) claim(ctx context.Context, id string) bool {
	if id == "" {
		return true
	}
	if !r.seen.add(id) {
		return false
	}
	ok, err := r.store.Claim(ctx, id)
	r.storeResult(err)
	return ok || err != nil
}

// storeResult counts and logs a store failure (once per outage).
func (r *Recorder) storeResult(err error) {
	if err != nil {
		r.storeErrors.Inc()
		if !r.down.Swap(true) {
			r.log.Warn("usage: the store failed; queries finished meanwhile are missing from /prestroid/api/usage (the metrics count them)", "error", err)
		}
		return
	}
	if r.down.Swap(false) {
		r.log.Info("usage: the store works again")
	}
}

// seenIDs is a bounded set of query ids: the last n added.
type seenIDs struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

func newSeenIDs(n int) *seenIDs {
	return &seenIDs{set: map[string]struct{}{}, ring: make([]string, n)}
}

// add adds id, reporting false when it is already there.
func (s *seenIDs) add(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.set[id]; ok {
		return false
	}
	if old := s.ring[s.next]; old != "" {
		delete(s.set, old)
	}
	s.ring[s.next], s.set[id] = id, struct{}{}
	s.next = (s.next + 1) % len(s.ring)
	return true
}

// Window is the buckets a window of length d ending now covers: the
// current bucket and those before it, d long in all (at least one
// bucket, at most the retention).
func (r *Recorder) Window(now time.Time, d time.Duration) (from, to time.Time) {
	to = now.Truncate(r.o.Bucket).Add(r.o.Bucket)
	d = min(max(d, r.o.Bucket), r.o.Retention)
	n := (d + r.o.Bucket - 1) / r.o.Bucket
	return to.Add(-n * r.o.Bucket), to
}

// Span is the whole buckets covering [from, to), cut to the retention
// before now.
func (r *Recorder) Span(now, from, to time.Time) (time.Time, time.Time) {
	from = from.Truncate(r.o.Bucket)
	if t := to.Truncate(r.o.Bucket); t.Before(to) {
		to = t.Add(r.o.Bucket)
	}
	if oldest := now.Truncate(r.o.Bucket).Add(-r.o.Retention); from.Before(oldest) {
		from = oldest
	}
	if to.Before(from) {
		to = from
	}
	return from, to
}

// Report sums usage by d over the buckets in [from, to) (whole buckets,
// as Window and Span give), at most limit rows (0: all).
func (r *Recorder) Report(ctx context.Context, d Dimension, from, to time.Time, limit int) (Report, error) {
	sums, err := r.store.Sum(ctx, d, from, to)
	if err != nil {
		return Report{}, err
	}
	rep := report(d, sums, limit)
	rep.From, rep.To, rep.BucketSeconds, rep.Shared = from.UTC(), to.UTC(), r.o.Bucket.Seconds(), r.store.Shared()
	return rep, nil
}
