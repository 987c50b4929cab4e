package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/redistest"
)

// statefulStub is a coordinator whose queries run until their executing
// URI is polled once: the first poll returns the final page.
func statefulStub(t *testing.T) (*stubTrino, *atomic.Int64) {
	var posts atomic.Int64
	var n atomic.Int64
	s := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/statement":
			posts.Add(1)
			id := fmt.Sprintf("20260101_000000_%05d_stub", n.Add(1))
			fmt.Fprintf(w, `{"id":"%s","nextUri":"%s/v1/statement/executing/%s/yslug/1","stats":{"state":"RUNNING"}}`, id, base, id)
		case strings.HasPrefix(r.URL.Path, "/v1/statement/executing/"):
			id := strings.Split(r.URL.Path, "/")[4]
			if r.Method == "DELETE" {
				w.WriteHeader(204)
				return
			}
			fmt.Fprintf(w, `{"id":"%s","stats":{"state":"FINISHED","cpuTimeMillis":5}}`, id)
		default:
			http.NotFound(w, r)
		}
	})
	return s, &posts
}

func admissionProxy(t *testing.T, upstream string, signer *protocol.Signer, a *AdmissionOptions) (string, *Server) {
	t.Helper()
	s, err := New(Options{Clusters: []ClusterConfig{{Name: "default", URL: upstream}}, Signer: signer, MonitorInterval: -1,
		Admission: a, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String(), s
}

type pg struct {
	ID      string
	NextURI string
	Stats   struct{ State string }
	Error   *struct{ ErrorName, Message string }
}

func call(t *testing.T, method, url, body string, user string) (pg, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("X-Trino-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p pg
	b, _ := io.ReadAll(resp.Body)
	if len(b) > 0 && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, &p); err != nil {
			t.Fatalf("%s: %s", err, b)
		}
	}
	return p, resp
}

// backend is where admission keeps its state in a test: this process's
// memory, or a real redis-server started for the test.
type backend struct {
	name  string
	redis func(t *testing.T) *RedisAdmission // nil: memory
}

var backends = []backend{
	{name: "memory"},
	{name: "redis", redis: func(t *testing.T) *RedisAdmission {
		srv := redistest.Start(t) // skips without redis-server
		return &RedisAdmission{URL: "redis://" + srv.Addr, Lease: 3 * time.Second}
	}},
}

// forEachBackend runs fn against both stores: the same behaviour is
// expected of each.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend, a func(AdmissionOptions) *AdmissionOptions)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			var r *RedisAdmission
			if b.redis != nil {
				r = b.redis(t)
			}
			fn(t, b, func(o AdmissionOptions) *AdmissionOptions {
				if r != nil {
					rc := *r
					o.Redis = &rc
				}
				return &o
			})
		})
	}
}

func lengths(t *testing.T, s *Server) (int, int) {
	t.Helper()
	q, in, err := s.admit.Lengths(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return q, in
}

func TestAdmissionQueuesOverBudgetAndAdmitsInOrder(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, opts func(AdmissionOptions) *AdmissionOptions) {
		stub, posts := statefulStub(t)
		p, srv := admissionProxy(t, stub.URL, nil, opts(AdmissionOptions{MaxQueries: 1}))

		first, _ := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice")
		if first.Stats.State != "RUNNING" || posts.Load() != 1 {
			t.Fatalf("first query not submitted: %+v", first)
		}
		second, resp := call(t, "POST", p+"/v1/statement", "SELECT 2", "bob")
		if second.Stats.State != "QUEUED" || !strings.Contains(second.NextURI, "/r/prestroid~local.") || posts.Load() != 1 {
			t.Fatalf("second query not queued in the proxy: %+v (posts %d)", second, posts.Load())
		}
		if !strings.HasSuffix(resp.Header.Get("X-Prestroid-Decision"), "; queued") {
			t.Errorf("decision %q", resp.Header.Get("X-Prestroid-Decision"))
		}
		start := time.Now()
		again, _ := call(t, "GET", second.NextURI, "", "bob")
		if again.Stats.State != "QUEUED" || time.Since(start) < 900*time.Millisecond {
			t.Fatalf("a poll while over budget should long-poll ~1s and stay QUEUED: %+v after %v", again, time.Since(start))
		}
		if q, in := lengths(t, srv); q != 1 || in != 1 {
			t.Fatalf("queued %d in flight %d", q, in)
		}
		// The first query's last page frees the budget.
		last, _ := call(t, "GET", first.NextURI, "", "alice")
		if last.NextURI != "" || last.Stats.State != "FINISHED" {
			t.Fatalf("first query's last page: %+v", last)
		}
		admitted, resp := call(t, "GET", again.NextURI, "", "bob")
		if admitted.Stats.State != "RUNNING" || !strings.HasSuffix(admitted.ID, "_stub") || posts.Load() != 2 {
			t.Fatalf("second query not submitted on admission: %+v (posts %d)", admitted, posts.Load())
		}
		if !strings.Contains(admitted.NextURI, "/r/default.") {
			t.Errorf("admitted query's nextUri not routed to the cluster: %s", admitted.NextURI)
		}
		if d := resp.Header.Get("X-Prestroid-Decision"); !strings.HasSuffix(d, "; queued") {
			t.Errorf("the admitted query's decision %q does not say it waited", d)
		}
		call(t, "GET", admitted.NextURI, "", "bob")
		if q, in := lengths(t, srv); q != 0 || in != 0 {
			t.Errorf("after both finished: queued %d in flight %d", q, in)
		}
	})
}

func TestAdmissionCancelFullAndLost(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend, opts func(AdmissionOptions) *AdmissionOptions) {
		stub, posts := statefulStub(t)
		signer, _ := protocol.NewSigner([]byte(strings.Repeat("q", 32)))
		p, srv := admissionProxy(t, stub.URL, signer, opts(AdmissionOptions{MaxQueries: 1, QueueSize: 1}))
		call(t, "POST", p+"/v1/statement", "SELECT 1", "alice") // runs, holds the budget
		queued, _ := call(t, "POST", p+"/v1/statement", "SELECT 2", "alice")
		if queued.Stats.State != "QUEUED" {
			t.Fatalf("not queued: %+v", queued)
		}
		t.Run("past the queue size a query fails at once with a Trino error", func(t *testing.T) {
			full, resp := call(t, "POST", p+"/v1/statement", "SELECT 3", "carol")
			if resp.StatusCode != 200 || full.Error == nil || full.Error.ErrorName != "PRESTROID_QUEUE_FULL" {
				t.Fatalf("status %d page %+v", resp.StatusCode, full)
			}
		})
		if b.redis == nil {
			t.Run("a proxy restart loses queued queries with a clear error, never a hang", func(t *testing.T) {
				p2, _ := admissionProxy(t, stub.URL, signer, &AdmissionOptions{MaxQueries: 1})
				lost, resp := call(t, "GET", strings.Replace(queued.NextURI, p, p2, 1), "", "alice")
				if resp.StatusCode != 200 || lost.Error == nil || lost.Error.ErrorName != "PRESTROID_QUEUE_LOST" || lost.NextURI != "" {
					t.Fatalf("status %d page %+v", resp.StatusCode, lost)
				}
			})
		} else {
			t.Run("another replica sharing Redis serves the queued query's poll", func(t *testing.T) {
				p2, _ := admissionProxy(t, stub.URL, signer, opts(AdmissionOptions{MaxQueries: 1, QueueSize: 1}))
				still, resp := call(t, "GET", strings.Replace(queued.NextURI, p, p2, 1), "", "alice")
				if resp.StatusCode != 200 || still.Stats.State != "QUEUED" || !strings.HasPrefix(still.NextURI, p2) {
					t.Fatalf("status %d page %+v", resp.StatusCode, still)
				}
			})
		}
		t.Run("DELETE /v1/query/{id} removes a queued query; nothing reaches Trino", func(t *testing.T) {
			_, resp := call(t, "DELETE", p+"/v1/query/"+queued.ID, "", "alice")
			if resp.StatusCode != 204 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if q, _ := lengths(t, srv); q != 0 {
				t.Fatalf("still queued: %d", q)
			}
			gone, _ := call(t, "GET", queued.NextURI, "", "alice")
			if gone.Error == nil {
				t.Errorf("poll after cancel: %+v", gone)
			}
			if posts.Load() != 1 {
				t.Errorf("cancelled queued query reached Trino (%d posts)", posts.Load())
			}
		})
		t.Run("DELETE on the queued nextUri removes it too", func(t *testing.T) {
			q2, _ := call(t, "POST", p+"/v1/statement", "SELECT 4", "dave")
			if q2.Stats.State != "QUEUED" {
				t.Fatalf("not queued: %+v", q2)
			}
			_, resp := call(t, "DELETE", q2.NextURI, "", "dave")
			if resp.StatusCode != 204 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if q, _ := lengths(t, srv); q != 0 {
				t.Fatalf("still queued: %d", q)
			}
		})
	})
}

// storeFor builds a bare store of the backend (no proxy around it).
func storeFor(t *testing.T, o *AdmissionOptions) admissionStore {
	t.Helper()
	if o.Redis != nil {
		o.Redis.Prefix = "t" + newLocalID() + ":" // a store of its own
	}
	st, err := newAdmissionStore(*o, newMetrics(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func mkEntry(user string, cpu float64) *entry {
	return &entry{ID: newLocalID(), User: user, Group: user, CPU: cpu, Payload: func() []byte { return []byte("q-" + user) }}
}

// state is an entry's status right now.
func state(t *testing.T, st admissionStore, e *entry) queueState {
	t.Helper()
	s, err := st.Wait(context.Background(), e.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return s.State
}

func TestAdmissionBudgets(t *testing.T) {
	forEachBackend(t, func(t *testing.T, _ backend, opts func(AdmissionOptions) *AdmissionOptions) {
		ctx := context.Background()
		a := storeFor(t, opts(AdmissionOptions{MaxCPUSeconds: 100, UserMaxQueries: 1}))
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
			e    *entry
			want queueState
		}{{small, stateAdmitted}, {alice2, stateAdmitted}, {bob2, stateQueued}} {
			if got := state(t, a, tc.e); got != tc.want {
				t.Errorf("%s's query (cpu %g): state %d, want %d", tc.e.User, tc.e.CPU, got, tc.want)
			}
		}
		t.Run("the admitted query's payload goes to exactly one poll", func(t *testing.T) {
			p, _, err := a.Take(ctx, small.ID)
			if err != nil || string(p) != "q-bob" {
				t.Fatalf("take: %q %v", p, err)
			}
			if p, st, _ := a.Take(ctx, small.ID); p != nil || st.State != stateTaken {
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
			if err := a.Finish(ctx, "20260101_000000_00001_up"); err != nil {
				t.Fatal(err)
			}
			if got := state(t, a, bob2); got != stateAdmitted {
				t.Fatalf("bob's second query: state %d after his first finished", got)
			}
		})
		t.Run("fair order: users take turns", func(t *testing.T) {
			b := storeFor(t, opts(AdmissionOptions{MaxQueries: 1}))
			hold := mkEntry("zed", 0)
			b.Enter(ctx, hold)
			var order []*entry
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
				if got := state(t, b, order[i]); got != stateAdmitted {
					t.Fatalf("after releasing, %s's query #%d is in state %d, want admitted", order[i].User, i, got)
				}
				b.Take(ctx, order[i].ID)
				prev = order[i]
			}
		})
	})
}

type sink struct{ got chan Completed }

func (s sink) Record(c Completed) { s.got <- c }

func TestFeedbackAndMetrics(t *testing.T) {
	stub, _ := statefulStub(t)
	fb := sink{got: make(chan Completed, 4)}
	s, err := New(Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, MonitorInterval: -1,
		Estimator: &fixedEstimator{}, Feedback: fb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	p := "http://" + ln.Addr().String()

	first, _ := call(t, "POST", p+"/v1/statement", "SELECT 1 -- cpu=0.5", "alice")
	call(t, "GET", first.NextURI, "", "alice") // the last page
	var c Completed
	select {
	case c = <-fb.got:
	case <-time.After(5 * time.Second):
		t.Fatal("no feedback record for a completed query")
	}
	if c.QueryID != first.ID || c.User != "alice" || c.SQL != "SELECT 1 -- cpu=0.5" || !c.Estimated ||
		c.Estimate.CPUSeconds != 0.5 || c.State != "FINISHED" || c.Stats.CPUTimeMillis != 5 || c.Cluster != "default" {
		t.Errorf("feedback record = %+v", c)
	}
	resp, err := http.Get(p + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`prestroid_decisions_total{class="",cluster="default",kind="estimated"} 1`,
		// Prometheus writes label names in sorted order.
		`prestroid_completed_queries_total{cluster="default",state="FINISHED"} 1`,
		`prestroid_qerror_bucket{le="+Inf"} 1`,
		`prestroid_estimate_cache_total{result="miss"} 1`,
		`prestroid_cluster_healthy{cluster="default"} 1`,
		"# TYPE prestroid_estimate_seconds histogram",
		"# TYPE go_goroutines gauge",
		"# TYPE process_start_time_seconds gauge",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s\n%s", want, body)
		}
	}
}
