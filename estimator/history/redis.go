package history

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisOptions configure a Redis store.
type RedisOptions struct {
	// URL is redis://[[user]:password@]host:port[/db] (rediss:// for
	// TLS). Required. It may hold a password: it is never logged.
	URL string
	// Prefix starts every key: a statistic is Prefix+"h:"+key, the
	// eviction index Prefix+"hlru", its counter Prefix+"hseq". Deployments sharing one Redis use
	// different prefixes. Empty means "prestroid:".
	Prefix string
	// MaxEntries bounds the keys held (≤ 0: unbounded); past it, the
	// least recently updated are deleted in the same script.
	MaxEntries int
	// Timeout bounds one read (Get, on the proxy's hot path) and the
	// connection's dial. Zero means 50ms. Writes (off the hot path) get
	// WriteTimeout.
	Timeout time.Duration
	// Logger gets one line when Redis becomes unreachable and one when it
	// is back. Nil means slog.Default().
	Logger *slog.Logger
}

// Defaults of RedisOptions (config/defaults.go holds the served ones).
const (
	defaultRedisPrefix  = "prestroid:"
	defaultRedisTimeout = 50 * time.Millisecond
	// WriteTimeout bounds one batch of updates.
	WriteTimeout = 2 * time.Second
	// retryDown is how long the store skips Redis after a failure: reads
	// miss and writes are dropped at once instead of each waiting out a
	// timeout.
	retryDown = 2 * time.Second
	// casChunk bounds the keys of one script call, so that one call does
	// not hold Redis (single-threaded) for long.
	casChunk = 256
)

// ErrBadRedisURL replaces go-redis' parse error, which may quote the URL
// and its password.
var ErrBadRedisURL = errors.New("history: redis: not a redis:// or rediss:// URL")

//go:embed redis_cas.lua
var luaCAS string

var scCAS = redis.NewScript(luaCAS)

// Redis is a Store in a Redis shared by every replica configured with the
// same URL and prefix: what one replica learns, the others read.
//
// Get is one GET of Stats.MarshalBinary's 56 bytes, bounded by Timeout.
// Update is optimistic and atomic per key across replicas: one MGET of
// the batch's keys (one round trip), each key's updates applied here, then
// one Lua script (redis_cas.lua) that writes each key only if it still
// holds the value read, refreshes its place in the eviction index and
// evicts past MaxEntries; the keys another replica changed in between are
// read and applied again, after a short random pause, within WriteTimeout.
// No observation is lost to a concurrent update, and the EWMA stays in Go
// (Update.Apply), the same code as the other stores. A batch of more than
// casChunk keys goes in several such steps.
//
// The bound: a sorted set Prefix+"hlru" scores each key by the sequence
// number of its last update (a counter, Prefix+"hseq", so the order is
// Redis' own, whatever the replicas' clocks); when it holds more than
// MaxEntries, the script pops the oldest and deletes their statistics. The
// bound is exact and per prefix, whatever the server's maxmemory-policy
// (which applies to the whole server; the keys carry no expiry, so
// noeviction, Redis' default, or a volatile-* policy leaves them alone).
//
// Redis unreachable (or failing): Get misses (the cascade falls through to
// EXPLAIN and the model), Update drops the batch and counts it (Health),
// both at once for retryDown after a failure; one log line per outage,
// one when Redis is back. Update returns nil for a dropped batch: a lost
// observation is counted here, not an error to retry.
type Redis struct {
	rdb       *redis.Client
	prefix    string // Prefix
	keyPrefix string // Prefix+"h:"
	lru       string // Prefix+"hlru"
	seq       string // Prefix+"hseq"
	maxArg    string // MaxEntries for the script
	timeout   time.Duration
	retry     time.Duration // retryDown (shorter in tests)
	log       *slog.Logger
	n         atomic.Int64 // Len as last read
	downUntil atomic.Int64 // unix nanos
	down      atomic.Bool
	errs      atomic.Uint64
	dropped   atomic.Uint64
	conflicts atomic.Uint64
}

var _ Store = (*Redis)(nil)

// OpenRedis connects to the Redis of o.URL (lazily: an unreachable Redis
// is an outage, not an error here; a malformed URL is).
func OpenRedis(o RedisOptions) (*Redis, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, ErrBadRedisURL
	}
	if o.Prefix == "" {
		o.Prefix = defaultRedisPrefix
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultRedisTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// Every call carries its own deadline (Timeout for reads,
	// WriteTimeout for writes), applied to the socket.
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.PoolTimeout = WriteTimeout, WriteTimeout, WriteTimeout, o.Timeout
	opt.MaxRetries = -1   // one try: a failure trips the outage
	opt.DialerRetries = 1 // likewise for a dial
	// A read on the hot path should find a connection ready: dialing
	// (TCP, then go-redis' HELLO and CLIENT SETINFO round trips) can take
	// longer than Timeout.
	opt.MinIdleConns = 2
	redisLog.Do(func() { redis.SetLogger(redisLogger{o.Logger}) })
	r := &Redis{rdb: redis.NewClient(opt), prefix: o.Prefix, keyPrefix: o.Prefix + "h:", lru: o.Prefix + "hlru", seq: o.Prefix + "hseq",
		maxArg: fmt.Sprint(max(o.MaxEntries, 0)), timeout: o.Timeout, retry: retryDown, log: o.Logger}
	r.n.Store(-1)
	go r.Len() // dials the first connection off the hot path (and reads the size)
	return r, nil
}

// redisLog routes go-redis' own messages (a pool that cannot dial: one a
// call) to the first store's logger at debug level: the store logs each
// outage once. (go-redis has one logger per process; proxy's admission
// store routes it the same way.)
var redisLog sync.Once

type redisLogger struct{ l *slog.Logger }

func (r redisLogger) Printf(_ context.Context, format string, v ...any) {
	r.l.Debug("redis: " + fmt.Sprintf(format, v...))
}

// up reports whether Redis may be tried now.
func (r *Redis) up() bool { return time.Now().UnixNano() >= r.downUntil.Load() }

// failed counts a failure and starts (or extends) the outage.
func (r *Redis) failed(err error) {
	if errors.Is(err, redis.ErrClosed) {
		return // closed here, not an outage
	}
	r.errs.Add(1)
	r.downUntil.Store(time.Now().Add(r.retry).UnixNano())
	if r.down.CompareAndSwap(false, true) {
		r.log.Warn("history: Redis unreachable; estimates miss the shared history and observations are dropped until it is back", "error", err)
	}
}

// ok ends an outage.
func (r *Redis) ok() {
	if r.down.Load() && r.down.CompareAndSwap(true, false) {
		r.log.Info("history: Redis reachable again; the history is shared")
	}
}

// Get implements Store: a miss when Redis does not answer within Timeout.
func (r *Redis) Get(key string) (Stats, bool) {
	if !r.up() {
		return Stats{}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	b, err := r.rdb.Get(ctx, r.keyPrefix+key).Bytes()
	if errors.Is(err, redis.Nil) {
		r.ok()
		return Stats{}, false
	}
	if err != nil {
		r.failed(err)
		return Stats{}, false
	}
	r.ok()
	var s Stats
	if s.UnmarshalBinary(b) != nil {
		return Stats{}, false
	}
	return s, true
}

var _ Multi = (*Redis)(nil)

// GetMany implements Multi: one MGET, bounded by Timeout; every key misses
// when Redis does not answer in time.
func (r *Redis) GetMany(keys ...string) ([]Stats, []bool) {
	stats, found := make([]Stats, len(keys)), make([]bool, len(keys))
	if len(keys) == 0 || !r.up() {
		return stats, found
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = r.keyPrefix + k
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.timeout)
	defer cancel()
	vals, err := r.rdb.MGet(ctx, names...).Result()
	if err != nil {
		r.failed(err)
		return stats, found
	}
	r.ok()
	for i, v := range vals {
		if i >= len(keys) {
			break
		}
		if s, isStr := v.(string); isStr {
			found[i] = stats[i].UnmarshalBinary([]byte(s)) == nil
			if !found[i] {
				stats[i] = Stats{}
			}
		}
	}
	return stats, found
}

// pending is one key of a batch: its updates in order, and the value read.
type pending struct {
	key   string
	apply []func(Stats, bool) Stats
	old   string // as read; "" when absent
}

// Update implements Store (see Redis).
func (r *Redis) Update(ups ...Update) error {
	if len(ups) == 0 {
		return nil
	}
	var keys []*pending
	byKey := map[string]*pending{}
	for _, u := range ups {
		p := byKey[u.Key]
		if p == nil {
			p = &pending{key: u.Key}
			byKey[u.Key] = p
			keys = append(keys, p)
		}
		p.apply = append(p.apply, u.Apply)
	}
	if !r.up() {
		r.dropped.Add(uint64(len(ups)))
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), casChunk)]
		keys = keys[len(chunk):]
		lost, err := r.updateChunk(ctx, chunk)
		if err != nil && !errors.Is(err, errContended) {
			r.failed(err)
			lost = append(lost, keys...)
			keys = nil
		}
		for _, p := range lost {
			r.dropped.Add(uint64(len(p.apply)))
		}
		if err == nil {
			r.ok()
		}
	}
	return nil
}

// errContended: keys other replicas kept changing until the write's
// deadline (not an outage).
var errContended = errors.New("history: redis: keys contended until the deadline")

// updateChunk reads, applies and writes keys, again (after a short random
// pause) for those another replica changed in between, until ctx expires.
// lost are the keys not written.
func (r *Redis) updateChunk(ctx context.Context, keys []*pending) (lost []*pending, err error) {
	for try := 0; len(keys) > 0; try++ {
		if try > 0 {
			t := time.NewTimer(time.Duration(rand.Int64N(int64(min(try, 20)) * int64(200*time.Microsecond))))
			select {
			case <-ctx.Done():
				t.Stop()
				return keys, fmt.Errorf("%w: %d keys after %d tries", errContended, len(keys), try)
			case <-t.C:
			}
		}
		names := make([]string, len(keys))
		for i, p := range keys {
			names[i] = r.keyPrefix + p.key
		}
		vals, err := r.rdb.MGet(ctx, names...).Result()
		if err != nil {
			return keys, fmt.Errorf("history: redis: %w", err)
		}
		argv := make([]any, 0, 1+2*len(keys))
		argv = append(argv, r.maxArg)
		for i, p := range keys {
			var cur Stats
			ok := false
			p.old = ""
			if v, isStr := vals[i].(string); isStr {
				p.old = v
				ok = cur.UnmarshalBinary([]byte(v)) == nil
				if !ok {
					cur = Stats{} // corrupt: start again
				}
			}
			for _, f := range p.apply {
				cur = f(cur, ok)
				ok = true
			}
			enc, _ := cur.MarshalBinary()
			argv = append(argv, p.old, enc)
		}
		res, err := scCAS.Run(ctx, r.rdb, append([]string{r.lru, r.seq}, names...), argv...).Result()
		if err != nil {
			return keys, fmt.Errorf("history: redis: %w", err)
		}
		out, _ := res.([]any)
		if len(out) < 1 {
			return keys, fmt.Errorf("history: redis: unexpected script answer %v", res)
		}
		if n, ok := out[0].(int64); ok {
			r.n.Store(n)
		}
		var again []*pending
		for _, v := range out[1:] {
			if i, ok := v.(int64); ok && i >= 1 && int(i) <= len(keys) {
				again = append(again, keys[i-1])
			}
		}
		r.conflicts.Add(uint64(len(again)))
		keys = again
	}
	return nil, nil
}

// Len implements Store: the eviction index's size (ZCARD), or the last
// size read while Redis is unreachable.
func (r *Redis) Len() int {
	if r.up() {
		ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout) // off the hot path (a scrape)
		n, err := r.rdb.ZCard(ctx, r.lru).Result()
		cancel()
		if err == nil {
			r.n.Store(n)
			r.ok()
		} else {
			r.failed(err)
		}
	}
	return int(max(r.n.Load(), 0))
}

// Close implements Store; what was written is in Redis already.
func (r *Redis) Close() error { return r.rdb.Close() }

// Health is the state of a store that can be unreachable (Redis).
type Health struct {
	// Errors counts failed calls to the store; Dropped the updates
	// (one key of one observation each) lost to them.
	Errors, Dropped uint64
	// Conflicts counts keys written again because another replica
	// updated them between the read and the write (none lost).
	Conflicts uint64
	// Down is true while the store is treated as unreachable.
	Down bool
}

// Reporter is implemented by stores that report their Health.
type Reporter interface{ Health() Health }

var _ Reporter = (*Redis)(nil)

// Health implements Reporter.
func (r *Redis) Health() Health {
	return Health{Errors: r.errs.Load(), Dropped: r.dropped.Load(), Conflicts: r.conflicts.Load(), Down: r.down.Load()}
}
