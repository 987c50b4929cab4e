package admission

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/internal/fillzero"
	"github.com/prestroid/prestroid/testing/redistest"
	"github.com/prometheus/client_golang/prometheus"
)

// storeFor builds a bare store of the backend (no proxy around it).
func storeFor(t *testing.T, o *Options) Store {
	t.Helper()
	if o.Redis != nil {
		o.Redis.Prefix = "t" + rand.Text() + ":" // a store of its own
	}
	st, err := NewStore(withDefaults(*o), testMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func mkEntry(user string, cpu float64) *Entry {
	return &Entry{ID: rand.Text(), User: user, Group: user, CPU: cpu, Payload: func() []byte { return []byte("q-" + user) }}
}

// state is an entry's status right now.
func state(t *testing.T, st Store, e *Entry) State {
	t.Helper()
	s, err := st.Wait(context.Background(), e.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

func TestAdmissionBudgets(t *testing.T) {
	forBoth(t, func(t *testing.T, opts func(Options) *Options) {
		ctx := context.Background()
		a := storeFor(t, opts(Options{MaxCPUSeconds: 100, UserMaxQueries: 1}))
		big := mkEntry("alice", 500)
		if now, _ := a.Enter(ctx, big); !now {
			t.Fatal("a query larger than the whole budget must still run when nothing else does")
		}
		small := mkEntry("bob", 1)
		if now, _ := a.Enter(ctx, small); now {
			t.Fatal("bob admitted while the CPU budget is exhausted")
		}
		alice2, bob2 := mkEntry("alice", 2), mkEntry("bob", 3)
		a.Enter(ctx, alice2)
		a.Enter(ctx, bob2)
		if err := a.Release(ctx, big.ID); err != nil {
			t.Fatal(err)
		}
		// bob's first query runs; alice's second also fits the CPU budget, and
		// the per-user limit of 1 keeps bob's second waiting.
		for _, tc := range []struct {
			e    *Entry
			want State
		}{{small, StateAdmitted}, {alice2, StateAdmitted}, {bob2, StateQueued}} {
			if got := state(t, a, tc.e); got != tc.want {
				t.Errorf("%s's query (cpu %g): state %d, want %d", tc.e.User, tc.e.CPU, got, tc.want)
			}
		}
		t.Run("the admitted query's payload goes to exactly one poll", func(t *testing.T) {
			p, _, err := a.Take(ctx, small.ID)
			if err != nil || string(p) != "q-bob" {
				t.Fatalf("take: %q %v", p, err)
			}
			if p, st, _ := a.Take(ctx, small.ID); p != nil || st.State != StateTaken {
				t.Fatalf("second take: %q %+v", p, st)
			}
		})
		t.Run("its last page by Trino's id frees the slot and admits the next", func(t *testing.T) {
			if err := a.Bind(ctx, small.ID, "20260101_000000_00001_up"); err != nil {
				t.Fatal(err)
			}
			if up, ok := a.Upstream(ctx, small.ID); !ok || up != "20260101_000000_00001_up" {
				t.Fatalf("upstream %q %v", up, ok)
			}
			if freed, err := a.Finish(ctx, "20260101_000000_00001_up"); err != nil || !freed {
				t.Fatalf("Finish: freed %v, %v; want a slot freed", freed, err)
			}
			if freed, err := a.Finish(ctx, "20260101_000000_00001_up"); err != nil || freed {
				t.Fatalf("Finish again: freed %v, %v; want nothing left to free", freed, err)
			}
			if got := state(t, a, bob2); got != StateAdmitted {
				t.Fatalf("bob's second query: state %d after his first finished", got)
			}
		})
		t.Run("fair order: users take turns", func(t *testing.T) {
			b := storeFor(t, opts(Options{MaxQueries: 1}))
			hold := mkEntry("zed", 0)
			b.Enter(ctx, hold)
			var order []*Entry
			for _, u := range []string{"alice", "alice", "alice", "bob", "carol"} {
				e := mkEntry(u, 0)
				order = append(order, e)
				b.Enter(ctx, e)
			}
			want := []int{0, 3, 4, 1, 2} // alice, bob, carol, alice, alice
			prev := hold
			for _, i := range want {
				if err := b.Release(ctx, prev.ID); err != nil {
					t.Fatal(err)
				}
				if got := state(t, b, order[i]); got != StateAdmitted {
					t.Fatalf("after releasing, %s's query #%d is in state %d, want admitted", order[i].User, i, got)
				}
				b.Take(ctx, order[i].ID)
				prev = order[i]
			}
		})
	})
}

// A cancelled query's client reads why on its next poll, also with the
// in-memory store (as Redis keeps the reason), until the sweep forgets it.
func TestMemStoreKeepsEndedQueries(t *testing.T) {
	a := newMemStore(withDefaults(Options{MaxQueries: 1}))
	ctx := context.Background()
	first, second := mkEntry("alice", 1), mkEntry("bob", 1)
	if ok, _ := a.Enter(ctx, first); !ok {
		t.Fatal("the first query waits")
	}
	if ok, _ := a.Enter(ctx, second); ok {
		t.Fatal("the second query was admitted past the budget")
	}
	if ok, _ := a.Cancel(ctx, second.ID, "canceled by an operator (prestroid console)"); !ok {
		t.Fatal("not cancelled")
	}
	st, _ := a.Wait(ctx, second.ID, 0)
	if st.State != StateCanceled || st.Why != "canceled by an operator (prestroid console)" {
		t.Errorf("after the cancel: %+v", st)
	}
	_ = a.Sweep(ctx, time.Now().Add(abandonAfter+time.Minute))
	if st, _ := a.Wait(ctx, second.ID, 0); st.State != StateUnknown {
		t.Errorf("after the sweep: %+v, want it forgotten", st)
	}
}

// forBoth runs fn against the memory store and a Redis store on a real
// redis-server (admissiontest.ForEach does the same for tests outside this
// package, which it imports).
func forBoth(t *testing.T, fn func(t *testing.T, opts func(Options) *Options)) {
	t.Run("memory", func(t *testing.T) { fn(t, func(o Options) *Options { return &o }) })
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t) // skips without redis-server
		fn(t, func(o Options) *Options {
			o.Redis = &RedisOptions{URL: "redis://" + srv.Addr, Lease: 3 * time.Second}
			return &o
		})
	})
}

// shared is o with its budgets in srv, shared by two replicas.
func shared(srv *redistest.Server, lease time.Duration, o Options) *Options {
	o.Redis = &RedisOptions{URL: "redis://" + srv.Addr, Lease: lease, Replicas: 2}
	return &o
}

// testMetrics are real counters, read back with testutil.
func testMetrics() Metrics {
	return Metrics{StoreErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "errors"}),
		StoreFallback: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fallback"})}
}

// withDefaults is o with every setting it leaves zero taken from a
// configuration that sets nothing (the redis_* ones too when o has Redis).
func withDefaults(o Options) Options {
	var c config.Config
	c.Admission.Redis = "redis://defaults"
	c.FillDefaults()
	d := *OptionsFrom(c.Admission)
	if o.Redis == nil {
		d.Redis = nil
	}
	fillzero.Fill(&o, d)
	return o
}
