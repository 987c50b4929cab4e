package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/admission/admissiontest"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prometheus/client_golang/prometheus/testutil"
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

func admissionProxy(t *testing.T, upstream string, signer *protocol.Signer, a *admission.Options) (string, *Server) {
	t.Helper()
	addr, s := serveTest(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: upstream}}, Signer: signer, MonitorInterval: -1,
		Admission: a, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return addr, s
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

func lengths(t *testing.T, s *Server) (int, int) {
	t.Helper()
	q, in, err := s.admit.Lengths(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return q, in
}

func TestAdmissionQueuesOverBudgetAndAdmitsInOrder(t *testing.T) {
	admissiontest.ForEach(t, func(t *testing.T, _ admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		stub, posts := statefulStub(t)
		p, srv := admissionProxy(t, stub.URL, nil, opts(admission.Options{MaxQueries: 1}))

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
	admissiontest.ForEach(t, func(t *testing.T, b admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		stub, posts := statefulStub(t)
		signer, _ := protocol.NewSigner([]byte(strings.Repeat("q", 32)))
		p, srv := admissionProxy(t, stub.URL, signer, opts(admission.Options{MaxQueries: 1, QueueSize: 1}))
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
		if b.Redis == nil {
			t.Run("a proxy restart loses queued queries with a clear error, never a hang", func(t *testing.T) {
				p2, _ := admissionProxy(t, stub.URL, signer, &admission.Options{MaxQueries: 1})
				lost, resp := call(t, "GET", strings.Replace(queued.NextURI, p, p2, 1), "", "alice")
				if resp.StatusCode != 200 || lost.Error == nil || lost.Error.ErrorName != "PRESTROID_QUEUE_LOST" || lost.NextURI != "" {
					t.Fatalf("status %d page %+v", resp.StatusCode, lost)
				}
			})
		} else {
			t.Run("another replica sharing Redis serves the queued query's poll", func(t *testing.T) {
				p2, _ := admissionProxy(t, stub.URL, signer, opts(admission.Options{MaxQueries: 1, QueueSize: 1}))
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

type sink struct{ got chan Completed }

func (s sink) Record(c Completed) { s.got <- c }

func TestFeedbackAndMetrics(t *testing.T) {
	stub, _ := statefulStub(t)
	fb := sink{got: make(chan Completed, 4)}
	addr, _ := serveTest(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, MonitorInterval: -1,
		Estimator: &fixedEstimator{}, Feedback: fb, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p := addr

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

// A query's plan is kept from its first page to its last only for a sink
// that writes plans (Options.FeedbackPlans): a query completed by another
// replica would hold it here until 10,000 newer queries push it out.
func TestFeedbackKeepsPlansOnlyWhenAsked(t *testing.T) {
	for _, keep := range []bool{false, true} {
		stub, _ := statefulStub(t)
		fb := sink{got: make(chan Completed, 4)}
		addr, s := serveTest(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, MonitorInterval: -1,
			Estimator: &fixedEstimator{}, Feedback: fb, FeedbackPlans: keep, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		p := addr
		first, _ := call(t, "POST", p+"/v1/statement", "SELECT 1 -- cpu=0.5 plan", "alice")
		call(t, "GET", first.NextURI, "", "alice") // the last page
		select {
		case c := <-fb.got:
			if got := len(c.Estimate.Plan) > 0; got != keep || !c.Estimated || c.Estimate.CPUSeconds != 0.5 {
				t.Errorf("FeedbackPlans %v: the record has a plan: %v (estimate %+v)", keep, got, c.Estimate)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("FeedbackPlans %v: no feedback record for a completed query", keep)
		}
		s.Shutdown(context.Background())
	}
}

// TestARestartedClusterFreesTheSlotsOfItsLostQueries: a query admitted on
// a cluster whose client went away holds its slot until its cluster's
// coordinator restarts (the monitor reads the new start from /v1/info's
// uptime); then its slot is freed, the query waiting behind it is
// admitted, and it is counted as LOST.
func TestARestartedClusterFreesTheSlotsOfItsLostQueries(t *testing.T) {
	admissiontest.ForEach(t, func(t *testing.T, _ admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		var started atomic.Int64
		started.Store(time.Now().Add(-time.Hour).UnixNano())
		var n atomic.Int64
		stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			w.Header().Set("Content-Type", "application/json")
			switch {
			case r.URL.Path == "/v1/info":
				fmt.Fprintf(w, `{"starting":false,"uptime":"%.2fs","nodeVersion":{"version":"476"}}`, time.Since(time.Unix(0, started.Load())).Seconds())
			case r.Method == "POST" && r.URL.Path == "/v1/statement":
				id := fmt.Sprintf("20260101_000000_%05d_stub", n.Add(1))
				fmt.Fprintf(w, `{"id":"%s","nextUri":"%s/v1/statement/executing/%s/yslug/1","stats":{"state":"RUNNING"}}`, id, base, id)
			default:
				http.NotFound(w, r)
			}
		})
		addr, s := serveTest(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: stub.URL}}, MonitorInterval: 20 * time.Millisecond,
			Admission: opts(admission.Options{MaxQueries: 1}), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		p := addr

		if first, _ := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice"); first.Stats.State != "RUNNING" {
			t.Fatalf("first query not submitted: %+v", first)
		}
		// alice never polls again. bob waits behind her slot.
		second, _ := call(t, "POST", p+"/v1/statement", "SELECT 2", "bob")
		if second.Stats.State != "QUEUED" {
			t.Fatalf("second query not queued: %+v", second)
		}
		time.Sleep(100 * time.Millisecond) // several checks of the old coordinator
		if again, _ := call(t, "GET", second.NextURI, "", "bob"); again.Stats.State != "QUEUED" {
			t.Fatalf("second query admitted before any restart: %+v", again)
		} else {
			second = again
		}
		started.Store(time.Now().UnixNano())
		deadline := time.Now().Add(10 * time.Second)
		for second.Stats.State == "QUEUED" && time.Now().Before(deadline) {
			second, _ = call(t, "GET", second.NextURI, "", "bob")
		}
		if second.Stats.State != "RUNNING" || !strings.HasSuffix(second.ID, "_stub") {
			t.Fatalf("second query not admitted after the restart: %+v", second)
		}
		// The slot is freed before alice's query is counted: bob can be
		// admitted a moment before the count.
		lost := func() float64 { return testutil.ToFloat64(s.metrics.Completed.WithLabelValues(stateLost, "default")) }
		for deadline := time.Now().Add(5 * time.Second); lost() == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		if got := lost(); got != 1 {
			t.Errorf("%v queries counted LOST, want 1 (alice's)", got)
		}
	})
}
