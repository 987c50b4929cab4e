package usage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore keeps usage in Redis, shared by every replica configured
// with the same Redis and prefix: one hash per (bucket, dimension),
// PREFIX "usage:" UNIX-SECONDS ":" DIMENSION, whose fields are FIELD ":" KEY
// (FIELD one of the short names in fields), incremented with HINCRBY and
// HINCRBYFLOAT in one MULTI/EXEC per query and expiring after the
// retention. Reading sums the window's hashes.
type RedisStore struct {
	// downUntil (unix nanos): after a failed call, calls fail at once
	// until then, so that an outage costs the writer no time per query
	// (the metrics, counted by the writer, stay current).
	downUntil atomic.Int64
	rdb       *redis.Client
	prefix    string
	bucket    time.Duration
	retention time.Duration
}

var _ Store = (*RedisStore)(nil)

// RedisOptions configure a RedisStore.
type RedisOptions struct {
	// URL is redis://[[user]:password@]host:port[/db] (rediss:// for TLS).
	URL string
	// Prefix starts every key.
	Prefix string
	// Bucket is the buckets' width, Retention how long one is kept.
	Bucket, Retention time.Duration
}

// NewRedisStore connects lazily (the first command dials).
func NewRedisStore(o RedisOptions) (*RedisStore, error) {
	opt, err := redis.ParseURL(o.URL)
	if err != nil {
		return nil, errors.New("usage: bad Redis URL") // the URL may hold a password: not quoted
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, 2*time.Second, time.Second
	opt.MaxRetries = -1 // one try: a failure trips the fast-fail window
	return &RedisStore{rdb: redis.NewClient(opt), prefix: o.Prefix + "usage:", bucket: o.Bucket, retention: o.Retention}, nil
}

// downFor is how long calls fail at once after a failed one.
const downFor = 5 * time.Second

// errDown: a recent call failed; this one was not tried.
var errDown = errors.New("usage: redis: unreachable a moment ago, not tried")

// check fails while a recent call failed.
func (r *RedisStore) check() error {
	if time.Now().UnixNano() < r.downUntil.Load() {
		return errDown
	}
	return nil
}

// result wraps err and, when set, opens the fast-fail window.
func (r *RedisStore) result(err error) error {
	if err == nil {
		return nil
	}
	r.downUntil.Store(time.Now().Add(downFor).UnixNano())
	return fmt.Errorf("usage: redis: %w", err)
}

func (r *RedisStore) key(bucket int64, d Dimension) string {
	return r.prefix + strconv.FormatInt(bucket, 10) + ":" + string(d)
}

// Add implements Store.
func (r *RedisStore) Add(ctx context.Context, bucket time.Time, keys map[Dimension]string, t *Totals) error {
	if err := r.check(); err != nil {
		return err
	}
	ttl := r.retention + r.bucket
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for d, k := range keys {
			h := r.key(bucket.Unix(), d)
			for _, f := range fields {
				switch v := f.ptr(t).(type) {
				case *int64:
					if *v != 0 {
						p.HIncrBy(ctx, h, f.name+":"+k, *v)
					}
				case *float64:
					if *v != 0 {
						p.HIncrByFloat(ctx, h, f.name+":"+k, *v)
					}
				}
			}
			p.Expire(ctx, h, ttl)
		}
		return nil
	})
	return r.result(err)
}

// Sum implements Store.
func (r *RedisStore) Sum(ctx context.Context, d Dimension, from, to time.Time) (map[string]*Totals, error) {
	var cmds []*redis.MapStringStringCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for b := from; b.Before(to); b = b.Add(r.bucket) {
			cmds = append(cmds, p.HGetAll(ctx, r.key(b.Unix(), d)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("usage: redis: %w", err)
	}
	out := map[string]*Totals{}
	for _, c := range cmds {
		for field, val := range c.Val() {
			name, k, ok := strings.Cut(field, ":")
			if !ok {
				continue
			}
			sum := out[k]
			if sum == nil {
				sum = &Totals{}
				out[k] = sum
			}
			addField(sum, name, val)
		}
	}
	return out, nil
}

// addField adds the stored value val of the field named name to t;
// unknown names (a newer replica's) are skipped.
func addField(t *Totals, name, val string) {
	for _, f := range fields {
		if f.name != name {
			continue
		}
		switch p := f.ptr(t).(type) {
		case *int64:
			n, _ := strconv.ParseInt(val, 10, 64)
			*p += n
		case *float64:
			v, _ := strconv.ParseFloat(val, 64)
			*p += v
		}
		return
	}
}

// claimTTL is how long a claimed query id is remembered: far longer than
// a client takes to fetch a last page again.
const claimTTL = time.Hour

// Claim implements Store: SET PREFIX "usage:seen:" ID NX.
func (r *RedisStore) Claim(ctx context.Context, id string) (bool, error) {
	if err := r.check(); err != nil {
		return false, err
	}
	ok, err := r.rdb.SetNX(ctx, r.prefix+"seen:"+id, 1, claimTTL).Result()
	return ok, r.result(err)
}

// Shared implements Store.
func (r *RedisStore) Shared() bool { return true }

// Close implements Store.
func (r *RedisStore) Close() error { return r.rdb.Close() }
