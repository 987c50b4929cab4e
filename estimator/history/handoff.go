package history

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Handoff passes a query's learning record (the estimator's Basis, as
// bytes) from the replica that placed the query to the one that sees its
// last page, when the replicas share a store: behind a load balancer a
// client's polls of one query may go to any replica, and only the placing
// replica knows what its estimate was based on. Every call is best effort
// and bounded by WriteTimeout; an unreachable store loses the record (the
// query then teaches nothing, as before).
type Handoff interface {
	// Leave keeps b under the query id for ttl.
	Leave(id string, b []byte, ttl time.Duration) error
	// Take returns what was left under id, and removes it; false when
	// nothing was (or the store did not answer).
	Take(id string) ([]byte, bool)
	// Refresh replaces what was left under id, keeping its TTL, only
	// while it is still there (nobody took or forgot it).
	Refresh(id string, b []byte) error
	// Forget removes what was left under id (the placing replica saw the
	// query end).
	Forget(id string) error
}

var _ Handoff = (*Redis)(nil)

// handoffKey is the Redis key of the record left for query id:
// Prefix+"q:"+id, outside the history's eviction index (its TTL bounds it).
func (r *Redis) handoffKey(id string) string { return r.prefix + "q:" + id }

// Leave implements Handoff: one SET … PX.
func (r *Redis) Leave(id string, b []byte, ttl time.Duration) error {
	if !r.up() {
		return errRedisDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	if err := r.rdb.Set(ctx, r.handoffKey(id), b, ttl).Err(); err != nil {
		r.failed(err)
		return err
	}
	r.ok()
	return nil
}

// Refresh implements Handoff: one SET … XX KEEPTTL.
func (r *Redis) Refresh(id string, b []byte) error {
	if !r.up() {
		return errRedisDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	if err := r.rdb.SetArgs(ctx, r.handoffKey(id), b, redis.SetArgs{Mode: "XX", KeepTTL: true}).Err(); err != nil && !errors.Is(err, redis.Nil) {
		r.failed(err)
		return err
	}
	r.ok()
	return nil
}

// Take implements Handoff: one GETDEL, so that one replica takes it.
func (r *Redis) Take(id string) ([]byte, bool) {
	if !r.up() {
		return nil, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	b, err := r.rdb.GetDel(ctx, r.handoffKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		r.ok()
		return nil, false
	}
	if err != nil {
		r.failed(err)
		return nil, false
	}
	r.ok()
	return b, true
}

// Forget implements Handoff: one DEL.
func (r *Redis) Forget(id string) error {
	if !r.up() {
		return errRedisDown
	}
	ctx, cancel := context.WithTimeout(context.Background(), WriteTimeout)
	defer cancel()
	if err := r.rdb.Del(ctx, r.handoffKey(id)).Err(); err != nil {
		r.failed(err)
		return err
	}
	r.ok()
	return nil
}

// errRedisDown is a call skipped during an outage (Redis's retry window).
var errRedisDown = errors.New("history: redis unreachable (retrying later)")
