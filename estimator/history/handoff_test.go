package history

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/testing/redistest"
)

// One replica leaves a query's record, another takes it once; the placing
// replica's Forget removes it; the TTL bounds what nobody takes; another
// prefix (deployment) never sees it.
func TestRedisHandoffBetweenReplicas(t *testing.T) {
	rs := redistest.Start(t)
	a, b, other := openRedis(t, rs.Addr, "dep1:", 10), openRedis(t, rs.Addr, "dep1:", 10), openRedis(t, rs.Addr, "dep2:", 10)
	defer a.Close()
	defer b.Close()
	defer other.Close()
	rec := []byte(`{"x":"AAEC","src":"text"}`)
	if err := a.Leave("20261206_q1", rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, ok := other.Take("20261206_q1"); ok {
		t.Fatal("another deployment's prefix took the record")
	}
	got, ok := b.Take("20261206_q1")
	if !ok || string(got) != string(rec) {
		t.Fatalf("b took %q (ok %v); want %q", got, ok, rec)
	}
	if _, ok := a.Take("20261206_q1"); ok {
		t.Fatal("a second Take found the record again; want it taken once")
	}

	if err := a.Leave("20261206_q2", rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Forget("20261206_q2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Take("20261206_q2"); ok {
		t.Fatal("b took a record its placing replica forgot")
	}

	if err := a.Leave("20261206_q3", rec, time.Minute); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	ttl, err := c.PTTL(context.Background(), "dep1:q:20261206_q3").Result()
	if err != nil || ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the record's TTL is %v (%v); want (0, 1m]", ttl, err)
	}
	if n := a.Len(); n != 0 {
		t.Fatalf("history Len %d after handoffs; want the records outside the history's count", n)
	}

	// Refresh replaces a record still there and keeps its TTL; a taken
	// one stays taken.
	newer := []byte(`{"x":"AAEC","src":"text","m":0.5}`)
	if err := a.Refresh("20261206_q3", newer); err != nil {
		t.Fatal(err)
	}
	if ttl2, err := c.PTTL(context.Background(), "dep1:q:20261206_q3").Result(); err != nil || ttl2 <= 0 || ttl2 > ttl {
		t.Fatalf("the refreshed record's TTL is %v (%v); want at most the first's %v", ttl2, err, ttl)
	}
	if got, ok := b.Take("20261206_q3"); !ok || string(got) != string(newer) {
		t.Fatalf("b took %q (ok %v) after the refresh; want %q", got, ok, newer)
	}
	if err := a.Refresh("20261206_q3", newer); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Exists(context.Background(), "dep1:q:20261206_q3").Result(); err != nil || n != 0 {
		t.Fatalf("a refresh after the take wrote the record again (exists %d, %v); want nothing", n, err)
	}
}

// With Redis gone every call fails fast and reports nothing taken.
func TestRedisHandoffDuringAnOutage(t *testing.T) {
	rs := redistest.Start(t)
	a := openRedis(t, rs.Addr, "dep1:", 10)
	defer a.Close()
	rs.Stop()
	if err := a.Leave("q", []byte("x"), time.Minute); err == nil {
		t.Fatal("Leave with Redis stopped: no error")
	}
	if _, ok := a.Take("q"); ok {
		t.Fatal("Take with Redis stopped found a record")
	}
	if err := a.Forget("q"); err == nil {
		t.Fatal("Forget during the outage: no error")
	}
}
