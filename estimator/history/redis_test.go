package history

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/testing/redistest"
)

// The Redis store against a real redis-server (testing/redistest; skipped,
// saying so, where there is none). The tests shared with the other stores
// are in history_test.go (TestStores).

func TestRedisReplicasLoseNoConcurrentObservation(t *testing.T) {
	rs := redistest.Start(t)
	a, b := openRedis(t, rs.Addr, "conc:", 0), openRedis(t, rs.Addr, "conc:", 0)
	defer a.Close()
	defer b.Close()
	const workers, batches, perBatch = 4, 50, 3
	at := time.Unix(10, 0)
	var wg sync.WaitGroup
	for i, st := range []*Redis{a, b} {
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := range batches {
					// Every batch hits the global key (as every query
					// updates the model offset) and one of a few shared
					// shapes, several times.
					var ups []Update
					for range perBatch {
						ups = append(ups, Update{Key: "g:model", Apply: add(1, at)},
							Update{Key: fmt.Sprintf("s:%d", n%3), Apply: add(2, at)})
					}
					ups = append(ups, Update{Key: fmt.Sprintf("x:%d-%d-%d", i, w, n), Apply: add(3, at)})
					if err := st.Update(ups...); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	total := uint64(2 * workers * batches * perBatch)
	if g, ok := a.Get("g:model"); !ok || g.Count != total {
		t.Fatalf("g:model counted %d observations (ok %v); want %d from both replicas", g.Count, ok, total)
	}
	var shapes uint64
	for k := range 3 {
		s, _ := b.Get(fmt.Sprintf("s:%d", k))
		shapes += s.Count
	}
	if shapes != total {
		t.Fatalf("the shapes counted %d observations; want %d", shapes, total)
	}
	if n := a.Len(); n != 1+3+2*workers*batches {
		t.Fatalf("Len %d; want %d", n, 1+3+2*workers*batches)
	}
	h := a.Health()
	h2 := b.Health()
	if h.Dropped+h2.Dropped != 0 || h.Errors+h2.Errors != 0 {
		t.Fatalf("health %+v %+v: nothing may be dropped", h, h2)
	}
	t.Logf("keys written again after a concurrent update: %d and %d", h.Conflicts, h2.Conflicts)
}

func TestRedisRetriesAKeyAnotherReplicaChanged(t *testing.T) {
	rs := redistest.Start(t)
	a, b := openRedis(t, rs.Addr, "cas:", 0), openRedis(t, rs.Addr, "cas:", 0)
	defer a.Close()
	defer b.Close()
	at := time.Unix(10, 0)
	calls := 0
	// Between a's read and a's write, b folds in an observation of 10.
	intrude := func(s Stats, ok bool) Stats {
		if calls++; calls == 1 {
			if err := b.Update(Update{Key: "k", Apply: add(10, at)}); err != nil {
				t.Fatal(err)
			}
		}
		return s.Add(20, 0.2, at)
	}
	if err := a.Update(Update{Key: "k", Apply: intrude}); err != nil {
		t.Fatal(err)
	}
	s, ok := a.Get("k")
	if !ok || s.Count != 2 || s.Mean != 15 {
		t.Fatalf("k = %+v (ok %v); want both observations (count 2, mean 15)", s, ok)
	}
	if calls != 2 || a.Health().Conflicts != 1 {
		t.Fatalf("Apply called %d times, %d conflicts; want the key applied again once", calls, a.Health().Conflicts)
	}
}

func TestRedisPrefixesAreSeparateHistories(t *testing.T) {
	rs := redistest.Start(t)
	a, b := openRedis(t, rs.Addr, "dep1:", 3), openRedis(t, rs.Addr, "dep2:", 3)
	defer a.Close()
	defer b.Close()
	at := time.Unix(1, 0)
	if err := b.Update(Update{Key: "k", Apply: add(5, at)}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 { // a overflows its own bound three times over
		if err := a.Update(Update{Key: fmt.Sprintf("k%d", i), Apply: add(1, at)}, Update{Key: "k", Apply: add(1, at)}); err != nil {
			t.Fatal(err)
		}
	}
	if s, ok := b.Get("k"); !ok || s.Count != 1 || s.Mean != 5 || b.Len() != 1 {
		t.Fatalf("the other prefix's k = %+v (ok %v), Len %d; want it untouched", s, ok, b.Len())
	}
	if s, _ := a.Get("k"); s.Count != 10 || a.Len() != 3 {
		t.Fatalf("k = %+v, Len %d; want 10 runs, 3 keys", s, a.Len())
	}
	// Nothing beyond the bound is left in Redis: 3 statistics and the
	// index and counter of each prefix.
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	keys, err := c.Keys(context.Background(), "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 3+1+2+2 {
		t.Fatalf("Redis holds %d keys %v; want 3+1 statistics, an index and a counter per prefix", len(keys), keys)
	}
}

func TestRedisCorruptValueIsAMissAndOverwritten(t *testing.T) {
	rs := redistest.Start(t)
	r := openRedis(t, rs.Addr, "bad:", 0)
	defer r.Close()
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	if err := c.Set(context.Background(), "bad:h:k", "abc", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get("k"); ok {
		t.Fatal("a 3-byte value decoded")
	}
	if err := r.Update(Update{Key: "k", Apply: add(4, time.Unix(1, 0))}); err != nil {
		t.Fatal(err)
	}
	if s, ok := r.Get("k"); !ok || s.Count != 1 || s.Mean != 4 {
		t.Fatalf("after an update: %+v %v; want a fresh count of 1", s, ok)
	}
}

func TestRedisDownMissesDropsAndLogsOnce(t *testing.T) {
	rs := redistest.Start(t)
	var logs bytes.Buffer
	var mu sync.Mutex
	r, err := OpenRedis(RedisOptions{URL: "redis://" + rs.Addr, Prefix: "down:", Timeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	r.retry = 300 * time.Millisecond
	at := time.Unix(1, 0)
	if err := r.Update(Update{Key: "k", Apply: add(1, at)}); err != nil {
		t.Fatal(err)
	}
	if _, ok := r.Get("k"); !ok {
		t.Fatal("no k while Redis is up")
	}

	rs.Stop()
	deadline := time.Now().Add(3 * r.retry)
	for time.Now().Before(deadline) { // through several retry windows
		if _, ok := r.Get("k"); ok {
			t.Fatal("Get hit with Redis down")
		}
		if _, ok := r.GetMany("k", "j"); ok[0] || ok[1] {
			t.Fatal("GetMany hit with Redis down")
		}
		if err := r.Update(Update{Key: "k", Apply: add(1, at)}, Update{Key: "j", Apply: add(1, at)}); err != nil {
			t.Fatalf("Update with Redis down: %v; want the batch dropped and counted", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	h := r.Health()
	if !h.Down || h.Errors == 0 || h.Dropped == 0 || h.Dropped%2 != 0 {
		t.Fatalf("health with Redis down: %+v; want down, errors, the dropped updates counted", h)
	}
	if n := strings.Count(logs.String(), "Redis unreachable"); n != 1 {
		t.Fatalf("%d outage log lines; want 1:\n%s", n, logs.String())
	}
	t.Logf("%d failed calls and %d dropped updates in %v down", h.Errors, h.Dropped, 3*r.retry)

	rs.Restart(t) // empty: no persistence
	time.Sleep(r.retry)
	if err := r.Update(Update{Key: "k", Apply: add(7, at)}); err != nil {
		t.Fatal(err)
	}
	if s, ok := r.Get("k"); !ok || s.Mean != 7 {
		t.Fatalf("after Redis came back: %+v %v", s, ok)
	}
	if s, ok := r.GetMany("j", "k"); ok[0] || !ok[1] || s[1].Mean != 7 {
		t.Fatalf("GetMany after Redis came back: %+v %v", s, ok)
	}
	if r.Health().Down || !strings.Contains(logs.String(), "Redis reachable again") {
		t.Fatalf("health %+v, logs %s; want up again, said once", r.Health(), logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestRedisBadURLHidesThePassword(t *testing.T) {
	_, err := OpenRedis(RedisOptions{URL: "http://:hunter2@r:6379"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("err %v; want a refusal that does not quote the password", err)
	}
}

// BenchmarkGet reads one key that exists, as the cascade does for an exact
// repeat, from each store (Redis: a local redis-server over TCP).
func BenchmarkGet(b *testing.B) {
	for _, st := range stores(1000) {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			defer s.Close()
			if err := s.Update(Update{Key: "x:statement", Apply: add(1, time.Unix(1, 0))}); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, ok := s.Get("x:statement"); !ok {
					b.Fatal("miss")
				}
			}
		})
	}
}

// BenchmarkGetMany reads a statement's three targets at once, as the
// cascade's history stage does (Redis: one MGET).
func BenchmarkGetMany(b *testing.B) {
	keys := []string{"x:statement", "x:statement/peak_memory", "x:statement/elapsed"}
	for _, st := range stores(1000) {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			defer s.Close()
			for _, k := range keys {
				if err := s.Update(Update{Key: k, Apply: add(1, time.Unix(1, 0))}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, ok := GetMany(s, keys...); !ok[2] {
					b.Fatal("miss")
				}
			}
		})
	}
}

// BenchmarkUpdateBatch writes one learner batch: 16 completed queries, 5
// keys each (statement, shape, residual, the two global calibrations).
func BenchmarkUpdateBatch(b *testing.B) {
	for _, st := range stores(100000) {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			defer s.Close()
			at := time.Unix(1, 0)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				var ups []Update
				for q := range 16 {
					id := fmt.Sprint((i*16 + q) % 500)
					ups = append(ups, Update{Key: "x:" + id, Apply: add(1, at)}, Update{Key: "s:" + id, Apply: add(1, at)},
						Update{Key: "r:" + id, Apply: add(1, at)}, Update{Key: "g:model", Apply: add(1, at)},
						Update{Key: "g:optimizer", Apply: add(1, at)})
				}
				if err := s.Update(ups...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
