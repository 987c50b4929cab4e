package proxy

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/admission/admissiontest"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/redistest"
)

// Shared admission needs a real Redis: these tests start a redis-server
// (testing/redistest) and skip, saying so, where there is none.

func TestSharedAdmissionAcrossReplicas(t *testing.T) {
	rs := redistest.Start(t)
	stub, posts := statefulStub(t)
	signer, _ := protocol.NewSigner([]byte(strings.Repeat("s", 32)))
	o := admissiontest.Shared(rs, 3*time.Second, admission.Options{MaxQueries: 1})
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

func TestSharedQueueHoldsNoPlaintext(t *testing.T) {
	rs := redistest.Start(t)
	stub, _ := statefulStub(t)
	p, srv := admissionProxy(t, stub.URL, nil, admissiontest.Shared(rs, 3*time.Second, admission.Options{MaxQueries: 1}))
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

// A queued query's poll while Redis is away stays queued.
func TestSharedAdmissionQueuedPollWhileRedisAway(t *testing.T) {
	rs := redistest.Start(t)
	stub, _ := statefulStub(t)
	p, _ := admissionProxy(t, stub.URL, nil, admissiontest.Shared(rs, 3*time.Second, admission.Options{MaxQueries: 1}))
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
}
