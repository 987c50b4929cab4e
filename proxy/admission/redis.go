package admission

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configures the shared admission store.
type RedisOptions struct {
	// URL is redis://[[user]:password@]host:port[/db] (rediss:// for TLS).
	// Required. It may hold a password: it is never logged.
	URL string
	// Prefix starts every key (admission.redis_prefix).
	Prefix string
	// Lease is how long a slot is held without renewal (admission.lease).
	Lease time.Duration
	// Down is what to do while Redis is unreachable: RedisDownLocal or
	// RedisDownOpen (admission.redis_down).
	Down string
	// Replicas divides the budgets while Redis is unreachable (Down
	// local; admission.replicas). Zero means 1: not divided.
	Replicas int
}

// What a replica does while Redis is unreachable.
const (
	// RedisDownLocal admits against this replica's share of the budgets
	// (each divided by Replicas, rounded up), in memory.
	RedisDownLocal = "local"
	// RedisDownOpen admits every query.
	RedisDownOpen = "open"
)

//go:embed lua/admission.lua
var luaPrelude string

func script(body string) *redis.Script { return redis.NewScript(luaPrelude + "\n" + body) }

var (
	//go:embed lua/enter.lua
	luaEnter string
	//go:embed lua/poll.lua
	luaPoll string
	//go:embed lua/take.lua
	luaTake string
	//go:embed lua/cancel.lua
	luaCancel string
	//go:embed lua/bind.lua
	luaBind string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/sweep.lua
	luaSweep string
	//go:embed lua/lengths.lua
	luaLengths string
	//go:embed lua/upstream.lua
	luaUpstream string
	//go:embed lua/queue.lua
	luaQueue string

	scEnter, scPoll, scTake, scCancel, scBind, scRelease, scRenew, scSweep, scLengths, scUpstream, scQueue = script(luaEnter),
		script(luaPoll), script(luaTake), script(luaCancel), script(luaBind), script(luaRelease), script(luaRenew),
		script(luaSweep), script(luaLengths), script(luaUpstream), script(luaQueue)
)

// errStoreDown: Redis failed recently; calls skip it for a moment instead of
// each waiting out a timeout.
var errStoreDown = errors.New("proxy: admission store unreachable")

// errBadRedisURL replaces go-redis' parse error, which may quote the URL
// and its password.
var errBadRedisURL = errors.New("proxy: admission redis: not a redis:// or rediss:// URL")

// redisStore keeps budgets, slots and the fair queue in Redis (the Lua
// scripts in lua/, atomic each), so every replica sharing the Redis and the
// prefix admits against the same budgets and any of them serves any queued
// query's poll. A slot is a lease: the replicas that see the query's pages
// renew it every Lease/3 while it is polled, so a crashed replica's slots
// come back within Lease. While Redis is unreachable the store falls back
// to local (a memStore with this replica's share of the budgets) or, with
// RedisDownOpen, admits everything.
type redisStore struct {
	o      Options
	rdb    *redis.Client
	keys   []string // the prefix, KEYS[1] of every script
	limits []any    // ARGV[1..10]
	lease  time.Duration
	local  *memStore // nil: fail open
	m      Metrics
	log    *slog.Logger

	downUntil atomic.Int64 // unix nanos; calls fail fast before it
	down      atomic.Bool  // in fallback (logged once per outage)
	// fallback says, in the outage's log line, what the replica does.
	fallback string

	mu      sync.Mutex
	waiters map[string][]chan struct{} // queued ids long-polled here
	held    map[string]time.Time       // "t:"+id or "u:"+upstream id -> last seen here
	// pending are the releases ("t:"+id or "u:"+upstream id -> when) that
	// failed while Redis was unreachable, sent again by the renewal loop
	// once it is back: another replica that saw the query's earlier pages
	// renews its slot until it learns the slot is gone, so a release lost
	// with the outage would hold the slot for idle_release.
	pending map[string]time.Time

	sub  *redis.PubSub
	stop context.CancelFunc
	wg   sync.WaitGroup
}

var _ Store = (*redisStore)(nil)

// redisLog routes go-redis' own messages (a pool that cannot dial) to the
// first store's logger at debug level: the store logs each outage once.
var redisLog sync.Once

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug("redis: " + fmt.Sprintf(format, v...))
}

func newRedisStore(o Options, m Metrics, log *slog.Logger) (*redisStore, error) {
	r := *o.Redis
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		return nil, errBadRedisURL
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, time.Second, time.Second
	opt.MaxRetries = -1             // one try: a failure trips the fallback
	r.Replicas = max(r.Replicas, 1) // zero: the budgets are not divided
	if log == nil {
		log = slog.Default()
	}
	redisLog.Do(func() { redis.SetLogger(redisLogger{log}) })
	ttl := o.MaxWait + o.IdleRelease + 2*r.Lease
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	s := &redisStore{o: o, rdb: redis.NewClient(opt), keys: []string{r.Prefix}, lease: r.Lease, m: m, log: log,
		limits: []any{o.MaxQueries, f(o.MaxCPUSeconds), o.UserMaxQueries, f(o.UserMaxCPUSeconds), o.GroupMaxQueries,
			f(o.GroupMaxCPUSeconds), o.QueueSize, r.Lease.Milliseconds(), ttl.Milliseconds(), o.MaxWait.Milliseconds(),
			f(o.MaxPeakMemory), f(o.UserMaxPeakMemory), f(o.GroupMaxPeakMemory)},
		waiters: map[string][]chan struct{}{}, held: map[string]time.Time{}, pending: map[string]time.Time{}}
	switch r.Down {
	case "", RedisDownLocal:
		lo := o
		lo.Redis = nil
		share := func(n int) int { return (n + r.Replicas - 1) / r.Replicas }
		lo.MaxQueries, lo.UserMaxQueries, lo.GroupMaxQueries = share(o.MaxQueries), share(o.UserMaxQueries), share(o.GroupMaxQueries)
		lo.MaxCPUSeconds /= float64(r.Replicas)
		lo.UserMaxCPUSeconds /= float64(r.Replicas)
		lo.GroupMaxCPUSeconds /= float64(r.Replicas)
		lo.MaxPeakMemory /= float64(r.Replicas)
		lo.UserMaxPeakMemory /= float64(r.Replicas)
		lo.GroupMaxPeakMemory /= float64(r.Replicas)
		lo.ClassMaxPeakMemory = map[string]float64{}
		for c, v := range o.ClassMaxPeakMemory {
			lo.ClassMaxPeakMemory[c] = v / float64(r.Replicas)
		}
		lo.QueueSize = share(o.QueueSize)
		// Behind a load balancer a query this replica holds locally may
		// be polled through another replica, which cannot tell this one
		// it finished (nor that its client went away): what this replica
		// no longer sees lapses as a Redis slot does, a lease after its
		// last page or poll here, instead of holding this replica's
		// share for idle_release or 5 minutes.
		lo.IdleRelease = r.Lease
		lo.abandon = max(r.Lease, localMinAbandon)
		s.local = newMemStore(lo)
		s.fallback = "admitting with this replica's share of the budgets (redis_down: local)"
	case RedisDownOpen:
		s.fallback = "admitting every query (redis_down: open)"
	default:
		return nil, fmt.Errorf("proxy: admission redis: unknown redis_down %q (want local or open)", r.Down)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.sub = s.rdb.Subscribe(ctx, r.Prefix+"admitted")
	s.wg.Add(2)
	go func() { defer s.wg.Done(); s.listen() }()
	go func() { defer s.wg.Done(); s.renewLoop(ctx) }()
	return s, nil
}

// run calls a script, failing fast while Redis is known to be down and
// tripping the fallback on a failure.
func (s *redisStore) run(ctx context.Context, sc *redis.Script, args ...any) (any, error) {
	if time.Now().UnixNano() < s.downUntil.Load() {
		return nil, errStoreDown
	}
	v, err := sc.Run(ctx, s.rdb, s.keys, append(append([]any(nil), s.limits...), args...)...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		s.trip(err)
		return nil, fmt.Errorf("proxy: admission redis: %w", err)
	}
	if s.down.Load() && s.down.CompareAndSwap(true, false) {
		s.m.fallback(false)
		s.log.Info("admission: Redis reachable again; budgets are shared")
	}
	return v, nil
}

// localMinAbandon is the least wait before the local fallback fails a
// queued query nobody polls here: behind a balancer a live client's polls
// may all go to the other replica for a while (each waiting out a Redis
// timeout there); at 5 s the full soak saw one live CLI query abandoned.
const localMinAbandon = 30 * time.Second

// maxPending bounds the releases kept for Redis' return.
const maxPending = 100000

// retryDown is how long calls skip Redis after a failure.
const retryDown = 2 * time.Second

func (s *redisStore) trip(err error) {
	s.m.storeError()
	s.downUntil.Store(time.Now().Add(retryDown).UnixNano())
	if s.down.CompareAndSwap(false, true) {
		s.m.fallback(true)
		s.log.Warn("admission: Redis unreachable; "+s.fallback, "error", err)
	}
}

func (s *redisStore) Enter(ctx context.Context, e *Entry) (bool, error) {
	args := []any{e.ID, e.User, e.Group, strconv.FormatFloat(e.CPU, 'g', -1, 64)}
	mem := strconv.FormatFloat(e.Memory, 'g', -1, 64)
	class := []any{e.Class, strconv.FormatFloat(s.o.ClassMaxPeakMemory[e.Class], 'g', -1, 64)}
	v, err := s.run(ctx, scEnter, append(append(args, "", mem), class...)...)
	if err == nil && v.(int64) == 0 {
		// It must wait: the request goes to Redis, within the per-query
		// bound (Redis holds the waiting requests, not this process).
		if big := tooBigToQueue(&s.o, e, -1); big != nil {
			return false, big
		}
		v, err = s.run(ctx, scEnter, append(append(args, e.Payload(), mem), class...)...)
	}
	if err != nil {
		if s.local == nil {
			return true, nil
		}
		return s.local.Enter(ctx, e)
	}
	switch v.(int64) {
	case 1:
		s.hold("t:" + e.ID)
		return true, nil
	case -1:
		return false, ErrQueueFull{s.o.QueueSize}
	}
	return false, nil
}

func (s *redisStore) hold(item string) {
	s.mu.Lock()
	s.held[item] = time.Now()
	s.mu.Unlock()
}

func (s *redisStore) poll(ctx context.Context, id string) (Status, error) {
	v, err := s.run(ctx, scPoll, id)
	if err != nil {
		return Status{}, err
	}
	return parseStatus(v.([]any)), nil
}

func parseStatus(r []any) Status {
	str := func(i int) string {
		if i < len(r) {
			if s, ok := r[i].(string); ok {
				return s
			}
		}
		return ""
	}
	st := Status{Why: str(2)}
	if ms, _ := strconv.ParseInt(str(1), 10, 64); ms > 0 {
		st.Enqueued = time.UnixMilli(ms)
	}
	switch str(0) {
	case "q":
		st.State = StateQueued
	case "a":
		st.State = StateAdmitted
	case "x":
		st.State = StateTaken
	case "f":
		st.State = StateFailed
	case "c":
		st.State = StateCanceled
	}
	return st
}

func (s *redisStore) Wait(ctx context.Context, id string, d time.Duration) (Status, error) {
	if s.local != nil && s.local.has(id) {
		return s.local.Wait(ctx, id, d)
	}
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	s.waiters[id] = append(s.waiters[id], ch)
	s.mu.Unlock()
	defer s.unwait(id, ch)
	c, cancel := context.WithTimeout(ctx, storeTimeout)
	st, err := s.poll(c, id)
	cancel()
	if err != nil || st.State != StateQueued {
		return st, err
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
	case <-ctx.Done():
	}
	c, cancel = context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	return s.poll(c, id)
}

func (s *redisStore) unwait(id string, ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.waiters[id]
	for i, x := range w {
		if x == ch {
			w = append(w[:i:i], w[i+1:]...)
			break
		}
	}
	if len(w) == 0 {
		delete(s.waiters, id)
	} else {
		s.waiters[id] = w
	}
}

// listen wakes the long polls of ids the scripts publish as admitted (or
// failed). go-redis resubscribes after a lost connection; a wake-up lost
// meanwhile costs a poll at most a second.
func (s *redisStore) listen() {
	for msg := range s.sub.Channel() {
		s.mu.Lock()
		for _, ch := range s.waiters[msg.Payload] {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		s.mu.Unlock()
	}
}

func (s *redisStore) Take(ctx context.Context, id string) ([]byte, Status, error) {
	if s.local != nil && s.local.has(id) {
		return s.local.Take(ctx, id)
	}
	v, err := s.run(ctx, scTake, id)
	if err != nil {
		return nil, Status{}, err
	}
	r := v.([]any)
	st := parseStatus(r)
	if st.State != StateAdmitted || len(r) < 4 {
		return nil, st, nil
	}
	s.hold("t:" + id)
	p, _ := r[3].(string)
	return []byte(p), st, nil
}

func (s *redisStore) Cancel(ctx context.Context, id, why string) (bool, error) {
	if s.local != nil && s.local.has(id) {
		return s.local.Cancel(ctx, id, why)
	}
	v, err := s.run(ctx, scCancel, id, why)
	if err != nil {
		return false, err
	}
	return v.(int64) == 1, nil
}

func (s *redisStore) Bind(ctx context.Context, id, upstreamID string) error {
	if s.local != nil && s.local.has(id) {
		return s.local.Bind(ctx, id, upstreamID)
	}
	// From now on the slot is renewed under Trino's id, which every page
	// carries (Touch) and the last page releases (Finish).
	s.mu.Lock()
	delete(s.held, "t:"+id)
	s.held["u:"+upstreamID] = time.Now()
	s.mu.Unlock()
	_, err := s.run(ctx, scBind, id, upstreamID)
	return err
}

// Touch notes the upstream query as alive here; the renewal loop extends
// its lease. Queries this store does not hold cost one lookup each renewal
// until it reports them lost.
func (s *redisStore) Touch(upstreamID string) {
	if s.local != nil {
		s.local.Touch(upstreamID)
	}
	s.hold("u:" + upstreamID)
}

func (s *redisStore) Finish(ctx context.Context, upstreamID string) (bool, error) {
	freed := false
	if s.local != nil {
		freed, _ = s.local.Finish(ctx, upstreamID)
	}
	s.mu.Lock()
	delete(s.held, "u:"+upstreamID)
	s.mu.Unlock()
	v, err := s.run(ctx, scRelease, "u", upstreamID)
	s.keep("u:"+upstreamID, err)
	if n, ok := v.(int64); ok && n > 0 {
		freed = true
	}
	return freed, err
}

// keep notes a release that failed (err set) for the renewal loop to send
// again.
func (s *redisStore) keep(item string, err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	if len(s.pending) < maxPending {
		s.pending[item] = time.Now()
	}
	s.mu.Unlock()
}

func (s *redisStore) Release(ctx context.Context, id string) error {
	if s.local != nil && s.local.has(id) {
		return s.local.Release(ctx, id)
	}
	s.mu.Lock()
	delete(s.held, "t:"+id)
	s.mu.Unlock()
	_, err := s.run(ctx, scRelease, "t", id)
	s.keep("t:"+id, err)
	return err
}

func (s *redisStore) Upstream(ctx context.Context, id string) (string, bool) {
	if s.local != nil {
		if up, ok := s.local.Upstream(ctx, id); ok {
			return up, true
		}
	}
	v, err := s.run(ctx, scUpstream, id)
	if err != nil || v == nil {
		return "", false
	}
	up, ok := v.(string)
	return up, ok && up != ""
}

func (s *redisStore) Sweep(ctx context.Context, now time.Time) error {
	if s.local != nil {
		_ = s.local.Sweep(ctx, now)
	}
	_, err := s.run(ctx, scSweep, fmt.Sprintf("waited more than %s in the proxy's admission queue", s.o.MaxWait))
	return err
}

func (s *redisStore) Lengths(ctx context.Context) (int, int, error) {
	lq, li := 0, 0
	if s.local != nil {
		lq, li, _ = s.local.Lengths(ctx)
	}
	v, err := s.run(ctx, scLengths)
	if err != nil {
		return lq, li, nil // this replica's own, while Redis is away
	}
	r := v.([]any)
	return int(r[0].(int64)) + lq, int(r[1].(int64)) + li, nil
}

// Queue lists the queries waiting in Redis, after those waiting in this
// replica's fallback store (queued while Redis was down); with Redis
// unreachable, those alone and the error.
func (s *redisStore) Queue(ctx context.Context, max int) ([]Queued, error) {
	var out []Queued
	if s.local != nil {
		out, _ = s.local.Queue(ctx, max)
	}
	if len(out) >= max {
		return out, nil
	}
	v, err := s.run(ctx, scQueue, max-len(out))
	if err != nil {
		return out, err
	}
	for _, row := range v.([]any) {
		f, _ := row.([]any)
		if len(f) < 12 {
			continue
		}
		str := func(i int) string { s, _ := f[i].(string); return s }
		num := func(i int) float64 { v, _ := strconv.ParseFloat(str(i), 64); return v }
		q := Queued{ID: str(0), User: str(1), Group: str(2), CPU: num(3), Position: int(num(5))}
		if len(f) >= 16 {
			q.Memory = num(12)
		}
		if ms := int64(num(4)); ms > 0 {
			q.Enqueued = time.UnixMilli(ms)
		}
		for i := range q.Use {
			q.Use[i] = Usage{Queries: int(num(6 + 2*i)), CPU: num(7 + 2*i)}
			if len(f) >= 16 {
				q.Use[i].Memory = num(13 + i)
			}
		}
		out = append(out, q)
	}
	return out, nil
}

// renewLoop extends, every Lease/3, the leases of the slots this replica
// serves: those it admitted or submitted and those whose pages it passed,
// as long as it saw them within IdleRelease (a query whose client went
// away loses its slot a lease later).
func (s *redisStore) renewLoop(ctx context.Context) {
	tk := time.NewTicker(s.lease / 3)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			s.renew(ctx, now)
		}
	}
}

func (s *redisStore) renew(ctx context.Context, now time.Time) {
	if !s.releasePending(ctx, now) {
		return // Redis still away
	}
	held := s.fresh(s.held, now)
	items := make([]any, len(held))
	for i, k := range held {
		items[i] = k
	}
	// Renew in batches: a script runs alone in Redis, so keep each short.
	for len(items) > 0 {
		n := int(math.Min(float64(len(items)), 500))
		c, cancel := context.WithTimeout(ctx, storeTimeout)
		v, err := s.run(c, scRenew, items[:n]...)
		cancel()
		items = items[n:]
		if err != nil {
			return
		}
		s.mu.Lock()
		for _, lost := range v.([]any) {
			if k, ok := lost.(string); ok {
				delete(s.held, k)
			}
		}
		s.mu.Unlock()
	}
}

// fresh drops from m (held or pending, under s.mu) what was last seen
// more than idle_release before now, and returns the keys left.
func (s *redisStore) fresh(m map[string]time.Time, now time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(m))
	for k, at := range m {
		if now.Sub(at) > s.o.IdleRelease {
			delete(m, k)
			continue
		}
		keys = append(keys, k)
	}
	return keys
}

// releasePending sends the releases that failed during an outage again,
// dropping those older than idle_release (every replica has stopped
// renewing their slots by then); false while Redis is still unreachable.
func (s *redisStore) releasePending(ctx context.Context, now time.Time) bool {
	for _, item := range s.fresh(s.pending, now) {
		c, cancel := context.WithTimeout(ctx, storeTimeout)
		_, err := s.run(c, scRelease, item[:1], item[2:])
		cancel()
		if err != nil {
			return false
		}
		s.mu.Lock()
		delete(s.pending, item)
		s.mu.Unlock()
	}
	return true
}

func (s *redisStore) Kind() string { return "redis" }

func (s *redisStore) Down() bool { return s.down.Load() }

func (s *redisStore) Close() error {
	s.stop()
	_ = s.sub.Close()
	s.wg.Wait()
	return s.rdb.Close()
}
