package admission

import (
	"context"
	_ "embed"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// Rate limits on new queries (POST /v1/statement), per user and per group:
// token buckets, in this process (golang.org/x/time/rate) or, when
// admission is shared, in Redis (lua/ratelimit.lua), so that the limit holds
// across replicas. A query over a limit is refused before anything reaches
// Trino with HTTP 503 and Retry-After: the one answer every Trino client
// retries on its own (the Java client used by the CLI and JDBC retries 503
// on the POST until its request timeout; the Python client retries
// 429/502/503/504; the Go client 429/502/503/504 and honours Retry-After).
// Since the query was never sent, the retry is its only submission.

// RateLimits are requests per second of new queries; zero means no limit.
// A zero burst means the rate rounded up, at least 1.
type RateLimits struct {
	UserRate   float64
	UserBurst  int
	GroupRate  float64
	GroupBurst int
}

func (r RateLimits) Enabled() bool { return r.UserRate > 0 || r.GroupRate > 0 }

func burstOf(r float64, b int) int {
	if b > 0 {
		return b
	}
	return max(1, int(math.Ceil(r)))
}

//go:embed lua/ratelimit.lua
var luaRateLimit string

var scRateLimit = redis.NewScript(luaRateLimit)

// RateLimiter checks both scopes of a request; safe for concurrent use.
type RateLimiter struct {
	r      RateLimits
	rdb    *redis.Client // nil: in memory only
	keys   []string
	shared *redisStore // for its fail-fast and fallback state; nil without Redis
	m      Metrics

	mu    sync.Mutex
	local map[string]*localBucket // "u:"+user, "g:"+group; the fallback too
	// localDiv divides the rates of the local buckets while Redis is away
	// (the replica count); 1 without Redis.
	localDiv float64
	last     time.Time // the last prune of idle buckets
}

type localBucket struct {
	l    *rate.Limiter
	used time.Time
}

// NewRateLimiter builds the limits of o; when store is the Redis store, the
// Redis buckets share its outage state.
func NewRateLimiter(o Options, store Store, m Metrics, log *slog.Logger) (*RateLimiter, error) {
	shared, _ := store.(*redisStore)
	rl := &RateLimiter{r: o.Rate, m: m, local: map[string]*localBucket{}, localDiv: 1}
	if o.Redis != nil {
		opt, err := redis.ParseURL(o.Redis.URL)
		if err != nil {
			return nil, errBadRedisURL
		}
		opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout, opt.MaxRetries = time.Second, time.Second, time.Second, -1
		rl.rdb, rl.keys = redis.NewClient(opt), []string{o.Redis.Prefix}
		// Outage handling is the admission store's when there is one; a
		// rate limiter alone keeps its own.
		rl.shared = shared
		if shared == nil {
			rl.shared = &redisStore{m: m, log: log, fallback: "rate limits per replica (each rate divided by admission.replicas)"}
			if log == nil {
				rl.shared.log = slog.Default()
			}
		}
		rl.localDiv = float64(max(o.Redis.Replicas, 1))
	}
	return rl, nil
}

type Verdict struct {
	OK    bool
	Wait  time.Duration // how long until a new query would be allowed
	Scope string        // "user" or "group" that refused
}

func (rl *RateLimiter) Allow(ctx context.Context, user, group string) Verdict {
	type lim struct {
		scope, key string
		rate       float64
		burst      int
	}
	var ls []lim
	if rl.r.UserRate > 0 {
		ls = append(ls, lim{"user", "u:" + user, rl.r.UserRate, burstOf(rl.r.UserRate, rl.r.UserBurst)})
	}
	if rl.r.GroupRate > 0 {
		ls = append(ls, lim{"group", "g:" + group, rl.r.GroupRate, burstOf(rl.r.GroupRate, rl.r.GroupBurst)})
	}
	if rl.rdb != nil && time.Now().UnixNano() >= rl.shared.downUntil.Load() {
		args := make([]any, 0, 3*len(ls))
		for _, l := range ls {
			args = append(args, l.key, strconv.FormatFloat(l.rate, 'g', -1, 64), l.burst)
		}
		v, err := scRateLimit.Run(ctx, rl.rdb, rl.keys, args...).Int64Slice()
		if err == nil && len(v) == 3 {
			if v[0] == 1 {
				return Verdict{OK: true}
			}
			return Verdict{Wait: time.Duration(v[1]) * time.Millisecond, Scope: ls[max(v[2]-1, 0)].scope}
		}
		rl.shared.trip(err)
	}
	div := 1.0
	if rl.rdb != nil {
		div = rl.localDiv
	}
	now := time.Now()
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.prune(now)
	rs := make([]*rate.Reservation, 0, len(ls))
	for _, l := range ls {
		b := rl.local[l.key]
		if b == nil {
			b = &localBucket{l: rate.NewLimiter(rate.Limit(l.rate/div), l.burst)}
			rl.local[l.key] = b
		}
		b.used = now
		r := b.l.ReserveN(now, 1)
		if d := r.DelayFrom(now); d > 0 {
			for _, x := range append(rs, r) {
				x.CancelAt(now) // a refused request takes no token from any bucket
			}
			return Verdict{Wait: d, Scope: l.scope}
		}
		rs = append(rs, r)
	}
	return Verdict{OK: true}
}

// prune forgets buckets idle long enough to be full again; rl.mu held.
func (rl *RateLimiter) prune(now time.Time) {
	if now.Sub(rl.last) < time.Minute {
		return
	}
	rl.last = now
	for k, b := range rl.local {
		full := time.Duration(float64(b.l.Burst()) / float64(b.l.Limit()) * float64(time.Second))
		if now.Sub(b.used) > full+time.Second {
			delete(rl.local, k)
		}
	}
}

func (rl *RateLimiter) Close() error {
	if rl.rdb != nil {
		return rl.rdb.Close()
	}
	return nil
}
