package admission

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/prestroid/prestroid/testing/redistest"
	"github.com/redis/go-redis/v9"
)

// Budgets of in-flight predicted peak memory, beside the CPU ones, in both
// stores.

const gib = 1 << 30

func memEntry(user string, mem float64) *Entry {
	e := mkEntry(user, 1)
	e.Memory = mem
	return e
}

func TestMemoryBudgets(t *testing.T) {
	forBoth(t, func(t *testing.T, opts func(Options) *Options) {
		ctx := context.Background()
		a := storeFor(t, opts(Options{MaxPeakMemory: 10 * gib, UserMaxPeakMemory: 6 * gib}))
		first := memEntry("alice", 5*gib)
		if now, err := a.Enter(ctx, first); !now || err != nil {
			t.Fatalf("the first query waits (%v)", err)
		}
		t.Run("a query that predicts no memory counts as none", func(t *testing.T) {
			if now, err := a.Enter(ctx, memEntry("carol", 0)); !now || err != nil {
				t.Errorf("carol's memoryless query waits (%v)", err)
			}
		})
		alice2 := memEntry("alice", 2*gib)
		if now, _ := a.Enter(ctx, alice2); now {
			t.Error("alice's second query (5+2 GiB) admitted over her 6 GiB budget")
		}
		bob := memEntry("bob", 6*gib)
		if now, _ := a.Enter(ctx, bob); now {
			t.Error("bob's 6 GiB admitted beside 5 GiB in flight under a 10 GiB budget")
		}
		t.Run("the queue shows each waiting query's memory and the memory in flight", func(t *testing.T) {
			qs, err := a.Queue(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			seen := 0
			for _, q := range qs {
				if q.ID == bob.ID {
					seen++
					if q.Memory != 6*gib || q.Use[0].Memory != 5*gib || q.Use[1].Memory != 0 {
						t.Errorf("bob queued with memory %g, in flight %+v", q.Memory, q.Use)
					}
				}
			}
			if seen != 1 {
				t.Errorf("bob not in the queue: %+v", qs)
			}
		})
		if err := a.Release(ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		// 5 GiB freed: alice's 2 GiB and bob's 6 GiB now both fit (8 of 10).
		for _, e := range []*Entry{alice2, bob} {
			if got := state(t, a, e); got != StateAdmitted {
				t.Errorf("%s's query (%g GiB): state %d, want admitted", e.User, e.Memory/gib, got)
			}
		}
		third := memEntry("dave", 3*gib)
		if now, _ := a.Enter(ctx, third); now {
			t.Error("dave's 3 GiB admitted beside 8 GiB in flight under a 10 GiB budget")
		}
	})
}

// A slot written by a replica that predates memory budgets (its slot
// record has no memory, its usage hash no mem field) is released without
// harm, and the memory usage starts again from the one query in flight.
func TestRedisMemoryBudgetReadsOldSlots(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	o := &Options{MaxPeakMemory: 10 * gib, Redis: &RedisOptions{URL: "redis://" + srv.Addr}}
	a := storeFor(t, o)
	p := o.Redis.Prefix
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	// What an old replica writes when it admits "old" for user u: no mem.
	old := "old" + rand.Text()
	if err := rdb.ZAdd(ctx, p+"slots", redis.Z{Score: 1e15, Member: old}).Err(); err != nil {
		t.Fatal(err)
	}
	rdb.HSet(ctx, p+"slot", old, `["u","u",1]`)
	rdb.HSet(ctx, p+"use", "n", 1, "cpu", 1, "un:u", 1, "uc:u", 1, "gn:u", 1, "gc:u", 1, "mem", 99*gib) // a stale mem
	rdb.HSet(ctx, p+"t:"+old, "u", "u", "g", "u", "cpu", 1, "st", "x")
	if err := a.Release(ctx, old); err != nil {
		t.Fatal(err)
	}
	use, _ := rdb.HGetAll(ctx, p+"use").Result()
	if len(use) != 0 {
		t.Errorf("usage after the old slot's release: %v, want empty", use)
	}
	e := memEntry("v", 4*gib)
	if now, err := a.Enter(ctx, e); !now || err != nil {
		t.Fatalf("not admitted: %v", err)
	}
	if m, _ := rdb.HGet(ctx, p+"use", "mem").Float64(); m != 4*gib {
		t.Errorf("in-flight memory %g, want 4 GiB", m)
	}
}

// A class's memory budget bounds what its clusters hold together, apart
// from the other classes' and from queries of no class.
func TestClassMemoryBudgets(t *testing.T) {
	forBoth(t, func(t *testing.T, opts func(Options) *Options) {
		ctx := context.Background()
		a := storeFor(t, opts(Options{ClassMaxPeakMemory: map[string]float64{"small": 4 * gib, "large": 20 * gib}}))
		in := func(user, class string, mem float64) *Entry {
			e := memEntry(user, mem)
			e.Class = class
			return e
		}
		first := in("alice", "small", 3*gib)
		if now, err := a.Enter(ctx, first); !now || err != nil {
			t.Fatalf("the first small query waits (%v)", err)
		}
		for _, e := range []*Entry{in("bob", "large", 10*gib), in("carol", "", 50*gib)} {
			if now, err := a.Enter(ctx, e); !now || err != nil {
				t.Errorf("%s's query (class %q, %g GiB) waits beside a full small class (%v)", e.User, e.Class, e.Memory/gib, err)
			}
		}
		second := in("dave", "small", 2*gib)
		if now, _ := a.Enter(ctx, second); now {
			t.Fatal("a second small query (3+2 GiB) admitted over the small class's 4 GiB")
		}
		if err := a.Release(ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		if got := state(t, a, second); got != StateAdmitted {
			t.Errorf("the second small query after the first finished: state %d, want admitted", got)
		}
	})
}
