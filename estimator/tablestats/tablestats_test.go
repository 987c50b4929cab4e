package tablestats

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

// The real Trino's own statistics: the tpch connector knows its tables'
// row counts at every scale, and an unknown table is an error.
func TestFetchFromTrino(t *testing.T) {
	server := trinotest.URL(t)
	c := &Client{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tiny, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "orders"}, trinotest.UserHeader("stats-test"))
	if err != nil {
		t.Fatal(err)
	}
	sf1, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "sf1", Table: "orders"}, trinotest.UserHeader("stats-test"))
	if err != nil {
		t.Fatal(err)
	}
	if !tiny.Known || tiny.Rows != 15000 || !sf1.Known || sf1.Rows != 1.5e6 {
		t.Fatalf("tpch orders: tiny %+v, sf1 %+v; want 15000 and 1.5M rows", tiny, sf1)
	}
	if !(sf1.Bytes > tiny.Bytes && tiny.Bytes > 0) {
		t.Errorf("data sizes tiny %v, sf1 %v: want positive and growing", tiny.Bytes, sf1.Bytes)
	}
	_, err = c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "no_such_table"}, trinotest.UserHeader("stats-test"))
	if err == nil || !strings.Contains(err.Error(), "TABLE_NOT_FOUND") {
		t.Errorf("missing table: err %v, want TABLE_NOT_FOUND", err)
	}
	// Names are quoted: a name that would be SQL stays a name.
	_, err = c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: `orders" x`}, trinotest.UserHeader("stats-test"))
	if err == nil {
		t.Error("a table named `orders\" x` was read")
	}
	// Without a user Trino refuses the request: no identity is invented.
	if _, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "orders"}, http.Header{}); err == nil {
		t.Error("a fetch without a caller's user succeeded")
	}
}

func TestQuoteName(t *testing.T) {
	if got := QuoteName(plan.TableName{Catalog: "a", Schema: `b"c`, Table: "d"}); got != `"a"."b""c"."d"` {
		t.Errorf("QuoteName = %s", got)
	}
}

// fakeFetch counts fetches per caller and table; tables named "bad" fail.
type fakeFetch struct {
	mu    sync.Mutex
	calls map[string]int
	rows  atomic.Int64
	block chan struct{} // when set, every fetch waits for it
}

func (f *fakeFetch) fetch(ctx context.Context, server string, t plan.TableName, h http.Header) (featurize.TableStats, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return featurize.TableStats{}, ctx.Err()
		}
	}
	f.mu.Lock()
	f.calls[h.Get("X-Trino-User")+"/"+t.String()]++
	f.mu.Unlock()
	if t.Table == "bad" {
		return featurize.TableStats{}, errors.New("TABLE_NOT_FOUND")
	}
	return featurize.TableStats{Rows: float64(f.rows.Load()), Known: true}, nil
}

func wait(t *testing.T, c *Cache) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.idle(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestCacheServesPerCallerAndRefreshes(t *testing.T) {
	clock := time.Unix(1e9, 0)
	now = func() time.Time { return clock }
	defer func() { now = time.Now }()
	f := &fakeFetch{calls: map[string]int{}}
	f.rows.Store(100)
	c := New(Options{Fetch: f.fetch, Refresh: time.Hour, Expire: 3 * time.Hour, Retry: time.Minute})
	defer c.Close()
	orders := []plan.TableName{{Catalog: "c", Schema: "s", Table: "orders"}, {Catalog: "c", Schema: "s", Table: "bad"}}

	// A miss answers at once, unknown, and fetches in the background.
	if got := c.Lookup("http://trino", orders, trinotest.UserHeader("alice")); got[0].Known || got[1].Known {
		t.Fatalf("first lookup %+v: want unknown", got)
	}
	wait(t, c)
	got := c.Lookup("http://trino", orders, trinotest.UserHeader("alice"))
	if !got[0].Known || got[0].Rows != 100 || got[1].Known {
		t.Fatalf("after the fetch %+v: want orders 100 rows, bad unknown", got)
	}
	// Another caller is not served alice's statistics: fetched as bob.
	if got := c.Lookup("http://trino", orders[:1], trinotest.UserHeader("bob")); got[0].Known {
		t.Fatalf("bob served alice's statistics: %+v", got)
	}
	wait(t, c)
	if got := c.Lookup("http://trino", orders[:1], trinotest.UserHeader("bob")); !got[0].Known {
		t.Fatalf("bob after his own fetch: %+v", got)
	}
	// Fresh entries and remembered failures are not fetched again.
	for i := 0; i < 10; i++ {
		c.Lookup("http://trino", orders, trinotest.UserHeader("alice"))
	}
	wait(t, c)
	if n, bad := f.calls["alice/c.s.orders"], f.calls["alice/c.s.bad"]; n != 1 || bad != 1 {
		t.Fatalf("fetches: orders %d, bad %d; want 1 each", n, bad)
	}
	// Past Retry the failure is asked again; past Refresh the entry is
	// served while it is fetched again.
	clock = clock.Add(90 * time.Minute)
	f.rows.Store(200)
	if got := c.Lookup("http://trino", orders, trinotest.UserHeader("alice")); got[0].Rows != 100 {
		t.Fatalf("stale entry not served while refreshed: %+v", got)
	}
	wait(t, c)
	if got := c.Lookup("http://trino", orders, trinotest.UserHeader("alice")); got[0].Rows != 200 {
		t.Fatalf("after the refresh: %+v, want 200 rows", got)
	}
	if n, bad := f.calls["alice/c.s.orders"], f.calls["alice/c.s.bad"]; n != 2 || bad != 2 {
		t.Fatalf("fetches after 90 min: orders %d, bad %d; want 2 each", n, bad)
	}
	// Past Expire nothing is served (and it is fetched again).
	clock = clock.Add(4 * time.Hour)
	if got := c.Lookup("", orders[:1], trinotest.UserHeader("alice")); got[0].Known {
		t.Fatalf("expired entry served: %+v", got)
	}
	st := c.Stats()
	if st.Fetched != 3 || st.Failed != 2 {
		t.Errorf("stats %+v: want 3 fetched, 2 failed", st)
	}
}

func TestCacheNeverWaitsAndStaysBounded(t *testing.T) {
	f := &fakeFetch{calls: map[string]int{}, block: make(chan struct{})}
	c := New(Options{Fetch: f.fetch, Queue: 2, MaxEntries: 50})
	defer c.Close()
	start := time.Now()
	for i := 0; i < 200; i++ {
		c.Lookup("http://trino", []plan.TableName{{Catalog: "c", Schema: "s", Table: "t" + string(rune('a'+i%26)) + string(rune('a'+i/26))}}, trinotest.UserHeader("u"))
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("200 lookups with the fetcher blocked took %v", d)
	}
	if st := c.Stats(); st.Dropped == 0 || st.Entries > 50 {
		t.Errorf("stats %+v: want dropped fetches and at most 50 entries", st)
	}
	close(f.block)
}

func TestReaderKeyHidesCredentials(t *testing.T) {
	h := trinotest.UserHeader("alice")
	h.Set("Authorization", "Bearer secret-token")
	k := ReaderKey(h)
	if strings.Contains(k, "secret") || strings.Contains(k, "alice") {
		t.Errorf("ReaderKey %q shows the caller", k)
	}
	h2 := trinotest.UserHeader("alice")
	h2.Set("Authorization", "Bearer other-token")
	if ReaderKey(h2) == k || ReaderKey(trinotest.UserHeader("alice")) == k {
		t.Error("callers with other credentials share a reader key")
	}
}

// idle blocks until no fetch is queued or running, or ctx ends.
func (c *Cache) idle(ctx context.Context) error {
	for {
		busy := len(c.queue) > 0
		if !busy {
			c.mu.RLock()
			for _, e := range c.entries {
				if e.inFlight {
					busy = true
					break
				}
			}
			c.mu.RUnlock()
		}
		if !busy {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The reported bytes follow the entries in and out (evictions included).
func TestCacheBytesFollowItsEntries(t *testing.T) {
	c := New(Options{Fetch: (&fakeFetch{calls: map[string]int{}}).fetch, MaxEntries: 20})
	defer c.Close()
	if st := c.Stats(); st.Entries != 0 || st.Bytes != 0 {
		t.Fatalf("empty cache: %+v", st)
	}
	for i := range 60 { // three times the bound: evictions
		c.Seed(plan.TableName{Catalog: "c", Schema: "s", Table: fmt.Sprint("t", i)}, trinotest.UserHeader("u"), featurize.TableStats{Rows: 1, Known: true})
		c.mu.RLock()
		var want int64
		for k := range c.entries {
			want += entrySize(k)
		}
		c.mu.RUnlock()
		st := c.Stats()
		if st.Bytes != want || st.Entries > 20 {
			t.Fatalf("after %d seeds: %d entries, %d bytes; the entries take %d", i+1, st.Entries, st.Bytes, want)
		}
		if st.Bytes < int64(st.Entries)*(24+2) { // at least the reader key and names
			t.Fatalf("after %d seeds: %d bytes for %d entries is too few", i+1, st.Bytes, st.Entries)
		}
	}
}
