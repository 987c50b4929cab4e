package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/redistest"
)

// Shared admission needs a real Redis: these tests start a redis-server
// (testing/redistest) and skip, saying so, where there is none.

func sharedOpts(srv *redistest.Server, lease time.Duration, o AdmissionOptions) *AdmissionOptions {
	o.Redis = &RedisAdmission{URL: "redis://" + srv.Addr, Lease: lease, Replicas: 2}
	return &o
}

func TestSharedAdmissionAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	stub, posts := statefulStub(t)
	signer, _ := protocol.NewSigner([]byte(strings.Repeat("s", 32)))
	o := sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 1})
	p1, _ := admissionProxy(t, stub.URL, signer, o)
	p2, srv2 := admissionProxy(t, stub.URL, signer, o)

	first, _ := call(t, "POST", p1+"/v1/statement", "SELECT 1", "alice")
	if first.Stats.State != "RUNNING" {
		t.Fatalf("first query: %+v", first)
	}
	second, _ := call(t, "POST", p2+"/v1/statement", "SELECT 2", "bob")
	if second.Stats.State != "QUEUED" || posts.Load() != 1 {
		t.Fatalf("the other replica admitted past the shared budget of 1: %+v (posts %d)", second, posts.Load())
	}
	// The queued query is polled through the first replica.
	again, _ := call(t, "GET", strings.Replace(second.NextURI, p2, p1, 1), "", "bob")
	if again.Stats.State != "QUEUED" {
		t.Fatalf("poll through the other replica: %+v", again)
	}
	// The first query's last page passes through the second replica: the
	// slot is freed in Redis, whichever replica admitted it.
	last, _ := call(t, "GET", strings.Replace(first.NextURI, p1, p2, 1), "", "alice")
	if last.NextURI != "" {
		t.Fatalf("last page: %+v", last)
	}
	start := time.Now()
	admitted, _ := call(t, "GET", again.NextURI, "", "bob")
	if admitted.Stats.State != "RUNNING" || posts.Load() != 2 {
		t.Fatalf("queued query not submitted by the replica that saw its admission: %+v (posts %d)", admitted, posts.Load())
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Errorf("the long poll took %v: the admission should wake it at once", time.Since(start))
	}
	if q, in := lengths(t, srv2); q != 0 || in != 1 {
		t.Errorf("shared lengths: queued %d in flight %d", q, in)
	}
	call(t, "GET", admitted.NextURI, "", "bob")
	if q, in := lengths(t, srv2); q != 0 || in != 0 {
		t.Errorf("after both finished: queued %d in flight %d", q, in)
	}
}

func TestSharedAdmissionLeases(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	o := sharedOpts(rs, time.Second, AdmissionOptions{MaxQueries: 1})
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
		if got := state(t, b, waiting); got != stateQueued {
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
		for state(t, b, waiting) != stateAdmitted {
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
		st := storeFor(t, sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 2})).(*redisStore)
		rs.Stop()
		e1, e2 := mkEntry("alice", 0), mkEntry("bob", 0)
		if now, err := st.Enter(ctx, e1); !now || err != nil {
			t.Fatalf("first query: %v %v", now, err)
		}
		if now, err := st.Enter(ctx, e2); now || err != nil {
			t.Fatalf("second query admitted past this replica's share (2 over 2 replicas): %v %v", now, err)
		}
		if got := state(t, st, e2); got != stateQueued {
			t.Fatalf("locally queued query: state %d", got)
		}
		if v := testutil.ToFloat64(st.m.storeFallback); v != 1 {
			t.Errorf("prestroid_admission_store_fallback = %v", v)
		}
		if v := testutil.ToFloat64(st.m.storeErrors); v < 1 {
			t.Errorf("prestroid_admission_store_errors_total = %v", v)
		}
		st.Release(ctx, e1.ID)
		if got := state(t, st, e2); got != stateAdmitted {
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
			if v := testutil.ToFloat64(st.m.storeFallback); v != 0 {
				t.Errorf("prestroid_admission_store_fallback = %v after Redis came back", v)
			}
		})
	})
	t.Run("open: every query is admitted", func(t *testing.T) {
		rs := redistest.Start(t)
		o := sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 1})
		o.Redis.Down = RedisDownOpen
		st := storeFor(t, o)
		rs.Stop()
		for i := 0; i < 3; i++ {
			if now, err := st.Enter(ctx, mkEntry("alice", 0)); !now || err != nil {
				t.Fatalf("query %d: %v %v", i, now, err)
			}
		}
	})
	t.Run("a queued query's poll while Redis is away stays queued", func(t *testing.T) {
		rs := redistest.Start(t)
		stub, _ := statefulStub(t)
		p, _ := admissionProxy(t, stub.URL, nil, sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 1}))
		call(t, "POST", p+"/v1/statement", "SELECT 1", "alice")
		queued, _ := call(t, "POST", p+"/v1/statement", "SELECT 2", "bob")
		if queued.Stats.State != "QUEUED" {
			t.Fatalf("not queued: %+v", queued)
		}
		rs.Stop()
		again, resp := call(t, "GET", queued.NextURI, "", "bob")
		if resp.StatusCode != 200 || again.Stats.State != "QUEUED" || again.Error != nil {
			t.Fatalf("status %d page %+v", resp.StatusCode, again)
		}
	})
}

func TestSharedQueueHoldsNoPlaintext(t *testing.T) {
	rs := redistest.Start(t)
	stub, _ := statefulStub(t)
	p, srv := admissionProxy(t, stub.URL, nil, sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 1}))
	call(t, "POST", p+"/v1/statement", "SELECT 1", "alice")
	req, _ := http.NewRequest("POST", p+"/v1/statement", strings.NewReader("SELECT 'sql-marker-42'"))
	req.Header.Set("X-Trino-User", "bob")
	req.SetBasicAuth("bob", "hunter2-password")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"QUEUED"`) {
		t.Fatalf("not queued: %s", body)
	}
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys %v %v", keys, err)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("bob:hunter2-password"))
	saved := 0
	for _, k := range keys {
		var vals []string
		switch typ := rdb.Type(ctx, k).Val(); typ {
		case "hash":
			for f, v := range rdb.HGetAll(ctx, k).Val() {
				vals = append(vals, f, v)
			}
		case "string":
			vals = []string{rdb.Get(ctx, k).Val()}
		case "list":
			vals = rdb.LRange(ctx, k, 0, -1).Val()
		case "zset":
			vals = rdb.ZRange(ctx, k, 0, -1).Val()
		default:
			t.Fatalf("key %s of type %s", k, typ)
		}
		dump := strings.Join(vals, "\n")
		if req := rdb.HGet(ctx, k, "req").Val(); strings.HasPrefix(k, "prestroid:t:") && req != "" {
			saved++
			id := strings.TrimPrefix(k, "prestroid:t:")
			if json.Valid([]byte(req)) {
				t.Errorf("ticket %s holds its request as plain JSON", k)
			}
			var q savedQuery
			plain, err := srv.signer.Open([]byte(req), []byte(id))
			if err != nil || json.Unmarshal(plain, &q) != nil || string(q.Body) != "SELECT 'sql-marker-42'" {
				t.Errorf("the saved request does not open under the route secret: %v %q", err, q.Body)
			}
			if _, err := srv.signer.Open([]byte(req), []byte("another id")); err == nil {
				t.Errorf("the saved request opens under another admission id")
			}
		}
		for _, secret := range []string{"sql-marker-42", basic, "hunter2"} {
			if strings.Contains(dump, secret) {
				t.Errorf("Redis key %s holds %q in the clear", k, secret)
			}
		}
	}
	if saved != 1 {
		t.Errorf("%d tickets hold a saved request, want bob's", saved)
	}
}

func TestSharedAdmissionForgetsFinishedQueries(t *testing.T) {
	rs := redistest.Start(t)
	ctx := context.Background()
	st := storeFor(t, sharedOpts(rs, 3*time.Second, AdmissionOptions{MaxQueries: 100})).(*redisStore)
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
		o := &AdmissionOptions{MaxQueries: 1, Redis: &RedisAdmission{URL: "redis://:s3cret-pw@" + rs.Addr}}
		st := storeFor(t, o).(*redisStore)
		if now, err := st.Enter(ctx, mkEntry("alice", 0)); !now || err != nil {
			t.Fatalf("enter: %v %v", now, err)
		}
		if v := testutil.ToFloat64(st.m.storeErrors); v != 0 {
			t.Errorf("errors with the right password: %v", v)
		}
	})
	t.Run("a wrong password falls back, and the log never shows it", func(t *testing.T) {
		var logs strings.Builder
		o := AdmissionOptions{MaxQueries: 1, Redis: &RedisAdmission{URL: "redis://:wrong-pw-77@" + rs.Addr}}
		o.Redis.Prefix = "pw:"
		st, err := newAdmissionStore(o, newMetrics(), slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
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
