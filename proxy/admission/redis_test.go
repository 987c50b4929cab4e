package admission

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/redistest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
)

func TestSharedAdmissionLeases(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	o := shared(rs, time.Second, Options{MaxQueries: 1})
	o.Redis.Prefix = "lease:"
	t.Run("a replica that keeps serving its query keeps the slot", func(t *testing.T) {
		a, b := storeFor(t, o), storeFor(t, o)
		// storeFor gives each its own prefix; share one.
		a.(*redisStore).keys, b.(*redisStore).keys = []string{"renew:"}, []string{"renew:"}
		held := mkEntry("alice", 0)
		if now, err := a.Enter(ctx, held); !now || err != nil {
			t.Fatalf("enter: %v %v", now, err)
		}
		a.Bind(ctx, held.ID, "20260101_000000_00001_up")
		waiting := mkEntry("bob", 0)
		if now, _ := b.Enter(ctx, waiting); now {
			t.Fatal("admitted past the budget")
		}
		for i := 0; i < 6; i++ { // three leases
			a.Touch("20260101_000000_00001_up")
			time.Sleep(500 * time.Millisecond)
			b.Sweep(ctx, time.Now())
		}
		if got := state(t, b, waiting); got != StateQueued {
			t.Fatalf("the renewed slot was lost: bob's query is in state %d", got)
		}
	})
	t.Run("a crashed replica's slots come back within the lease", func(t *testing.T) {
		a, b := storeFor(t, o), storeFor(t, o)
		a.(*redisStore).keys, b.(*redisStore).keys = []string{"crash:"}, []string{"crash:"}
		held := mkEntry("alice", 0)
		a.Enter(ctx, held)
		waiting := mkEntry("bob", 0)
		b.Enter(ctx, waiting)
		a.Close() // stops renewing, releases nothing: a kill -9 as Redis sees it
		start := time.Now()
		for state(t, b, waiting) != StateAdmitted {
			if time.Since(start) > 5*time.Second {
				t.Fatal("the dead replica's slot did not come back")
			}
			b.Sweep(ctx, time.Now())
			time.Sleep(100 * time.Millisecond)
		}
		if el := time.Since(start); el > 1500*time.Millisecond {
			t.Errorf("slot came back after %v, lease 1s", el)
		}
	})
}

func TestSharedAdmissionRedisDown(t *testing.T) {
	ctx := context.Background()
	t.Run("local: each replica admits its share of the budgets, with a metric", func(t *testing.T) {
		rs := redistest.Start(t)
		st := storeFor(t, shared(rs, 3*time.Second, Options{MaxQueries: 2})).(*redisStore)
		rs.Stop()
		e1, e2 := mkEntry("alice", 0), mkEntry("bob", 0)
		if now, err := st.Enter(ctx, e1); !now || err != nil {
			t.Fatalf("first query: %v %v", now, err)
		}
		if now, err := st.Enter(ctx, e2); now || err != nil {
			t.Fatalf("second query admitted past this replica's share (2 over 2 replicas): %v %v", now, err)
		}
		if got := state(t, st, e2); got != StateQueued {
			t.Fatalf("locally queued query: state %d", got)
		}
		if v := testutil.ToFloat64(st.m.StoreFallback); v != 1 {
			t.Errorf("prestroid_admission_store_fallback = %v", v)
		}
		if v := testutil.ToFloat64(st.m.StoreErrors); v < 1 {
			t.Errorf("prestroid_admission_store_errors_total = %v", v)
		}
		st.Release(ctx, e1.ID)
		if got := state(t, st, e2); got != StateAdmitted {
			t.Fatalf("locally queued query after a release: state %d", got)
		}
		t.Run("and share again once Redis is back", func(t *testing.T) {
			rs.Restart(t)
			time.Sleep(retryDown + 100*time.Millisecond)
			e3 := mkEntry("carol", 0)
			if now, err := st.Enter(ctx, e3); !now || err != nil {
				t.Fatalf("enter: %v %v", now, err)
			}
			if q, in, _ := st.Lengths(ctx); in != 2 || q != 0 {
				t.Errorf("lengths: queued %d in flight %d (1 local, 1 in Redis)", q, in)
			}
			if v := testutil.ToFloat64(st.m.StoreFallback); v != 0 {
				t.Errorf("prestroid_admission_store_fallback = %v after Redis came back", v)
			}
		})
	})
	t.Run("open: every query is admitted", func(t *testing.T) {
		rs := redistest.Start(t)
		o := shared(rs, 3*time.Second, Options{MaxQueries: 1})
		o.Redis.Down = RedisDownOpen
		st := storeFor(t, o)
		rs.Stop()
		for i := 0; i < 3; i++ {
			if now, err := st.Enter(ctx, mkEntry("alice", 0)); !now || err != nil {
				t.Fatalf("query %d: %v %v", i, now, err)
			}
		}
	})
}

func TestSharedAdmissionForgetsFinishedQueries(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	st := storeFor(t, shared(rs, 3*time.Second, Options{MaxQueries: 100})).(*redisStore)
	for i := 0; i < 50; i++ {
		e := mkEntry("alice", 1)
		st.Enter(ctx, e)
		st.Bind(ctx, e.ID, "up"+e.ID)
		st.Touch("up" + e.ID)
		st.Finish(ctx, "up"+e.ID)
	}
	st.mu.Lock()
	n := len(st.held)
	st.mu.Unlock()
	if n != 0 {
		t.Errorf("%d finished queries still renewed by this replica", n)
	}
	if q, in, _ := st.Lengths(ctx); q != 0 || in != 0 {
		t.Errorf("lengths: queued %d in flight %d", q, in)
	}
	keys, _ := redis.NewClient(&redis.Options{Addr: rs.Addr}).Keys(ctx, st.keys[0]+"*").Result()
	for _, k := range keys {
		if !strings.HasSuffix(k, "use") { // the usage hash may stay, empty of counts
			t.Errorf("key %s left behind by finished queries", k)
		}
	}
}

func TestSharedAdmissionRedisPassword(t *testing.T) {
	rs := redistest.Start(t, "--requirepass", "s3cret-pw")
	ctx := context.Background()
	t.Run("the URL's password authenticates", func(t *testing.T) {
		o := &Options{MaxQueries: 1, Redis: &RedisOptions{URL: "redis://:s3cret-pw@" + rs.Addr}}
		st := storeFor(t, o).(*redisStore)
		if now, err := st.Enter(ctx, mkEntry("alice", 0)); !now || err != nil {
			t.Fatalf("enter: %v %v", now, err)
		}
		if v := testutil.ToFloat64(st.m.StoreErrors); v != 0 {
			t.Errorf("errors with the right password: %v", v)
		}
	})
	t.Run("a wrong password falls back, and the log never shows it", func(t *testing.T) {
		var logs strings.Builder
		o := Options{MaxQueries: 1, Redis: &RedisOptions{URL: "redis://:wrong-pw-77@" + rs.Addr}}
		o.Redis.Prefix = "pw:"
		st, err := NewStore(withDefaults(o), testMetrics(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if now, err := st.Enter(ctx, mkEntry("alice", 0)); !now || err != nil {
			t.Fatalf("enter (local fallback): %v %v", now, err)
		}
		if !strings.Contains(logs.String(), "Redis unreachable") {
			t.Errorf("no outage log line: %s", logs.String())
		}
		if strings.Contains(logs.String(), "wrong-pw-77") {
			t.Errorf("the log shows the password: %s", logs.String())
		}
	})
}

// A query polled through two replicas behind a load balancer, whose last
// page passed through one of them while Redis was stopped: that replica's
// release failed, the other replica still renews the slot it saw earlier,
// so the release must be sent again once Redis is back, not wait for
// idle_release (the soak found the slot held for its 6 minutes).
func TestSharedAdmissionReleaseLostInAnOutage(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	const lease = time.Second
	o := shared(rs, lease, Options{MaxQueries: 2, IdleRelease: 10 * time.Minute})
	a, b := storeFor(t, o).(*redisStore), storeFor(t, o).(*redisStore)
	a.keys, b.keys = []string{"lost:"}, []string{"lost:"}
	e := mkEntry("alice", 0)
	if now, err := a.Enter(ctx, e); !now || err != nil {
		t.Fatalf("enter: %v %v", now, err)
	}
	const up = "20260101_000000_00001_lost"
	a.Bind(ctx, e.ID, up)
	a.Touch(up) // a saw its first pages, b its last
	b.Touch(up)
	// b's Redis fails (a stopped Redis would run the command it was sent
	// once resumed; a tripped store sends nothing, as a refused connection).
	b.trip(errors.New("test: Redis unreachable"))
	if _, err := b.Finish(ctx, up); err == nil {
		t.Fatal("a release with Redis unreachable succeeded")
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	start := time.Now()
	for {
		n, err := rdb.ZCard(ctx, "lost:slots").Result()
		if err == nil && n == 0 {
			break
		}
		if time.Since(start) > retryDown+5*lease {
			t.Fatalf("the slot is still held %s after the failed release (%d slots, %v): a renews it, b's release was lost", time.Since(start).Round(time.Millisecond), n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slot released %s after the failed release (Redis skipped for %s after a failure)", time.Since(start).Round(10*time.Millisecond), retryDown)
	if use, _ := rdb.HGet(ctx, "lost:use", "n").Int(); use != 0 {
		t.Errorf("%d queries still charged to the budget", use)
	}
}

// While Redis is away the local fallback holds what this replica admitted
// or queued; behind a load balancer their polls may go to the other
// replica, so what this one stops seeing lapses after a lease (a queued
// query after max(lease, 30 s)), not after idle_release or 5 minutes.
func TestSharedAdmissionLocalFallbackLapses(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	const lease = 2 * time.Second
	st := storeFor(t, shared(rs, lease, Options{MaxQueries: 2, IdleRelease: 10 * time.Minute})).(*redisStore)
	rs.Stop()
	admitted, queued := mkEntry("alice", 0), mkEntry("bob", 0)
	if now, err := st.Enter(ctx, admitted); !now || err != nil {
		t.Fatalf("first query: %v %v", now, err)
	}
	st.Bind(ctx, admitted.ID, "up-"+admitted.ID)
	if now, err := st.Enter(ctx, queued); now || err != nil {
		t.Fatalf("second query not queued locally: %v %v", now, err)
	}
	if q, in, _ := st.Lengths(ctx); q != 1 || in != 1 {
		t.Fatalf("lengths: queued %d in flight %d, want 1 and 1", q, in)
	}
	// Neither is seen here again (their client polls the other replica).
	_ = st.Sweep(ctx, time.Now().Add(lease/2))
	if q, in, _ := st.Lengths(ctx); q != 1 || in != 1 {
		t.Fatalf("within the lease: queued %d in flight %d, want 1 and 1", q, in)
	}
	// The first sweep frees the admitted query's slot, which admits the
	// queued one (its client would take it within a poll) and abandons
	// nothing; unseen, that one lapses at the next.
	_ = st.Sweep(ctx, time.Now().Add(localMinAbandon+time.Second))
	_ = st.Sweep(ctx, time.Now().Add(localMinAbandon+time.Second))
	if q, in, _ := st.Lengths(ctx); q != 0 || in != 0 {
		t.Errorf("a lease after the last sight: queued %d in flight %d, want 0 and 0", q, in)
	}
}
