package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/testnet"
	"github.com/prestroid/prestroid/proxy/routing"
)

// TestHealthProbesDoNotWaitForAHangingCluster: a cluster that accepts
// connections and never answers delays no other cluster's state; the
// healthy one's state follows it within a round or two, far inside the
// hanging probe's timeout; shutdown waits for the monitor.
func TestHealthProbesDoNotWaitForAHangingCluster(t *testing.T) {
	live := newCoordinator(t)
	s, err := New(withDefaults(Options{
		Clusters:        []ClusterConfig{{Name: "hang", URL: testnet.Hanging(t)}, {Name: "live", URL: live.URL}},
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
		MonitorInterval: 50 * time.Millisecond,
	}))

	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	c := s.byName["live"]
	waitState := func(what string, ok func(*routing.State) bool) {
		t.Helper()
		limit := time.Now().Add(time.Second) // routing.ProbeTimeout is 5s
		for time.Now().Before(limit) {
			if st := c.State(); st != nil && ok(st) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the live cluster's state did not become %s within a second (hang probe still pending: %v)", what, s.byName["hang"].Probing())
	}
	t.Run("the healthy cluster is checked while the hanging one's probe is pending", func(t *testing.T) {
		waitState("healthy", func(st *routing.State) bool { return st.Healthy })
		if !s.byName["hang"].Probing() {
			t.Error("the hanging cluster's probe already ended")
		}
	})
	t.Run("a change of the healthy cluster is seen within a round or two", func(t *testing.T) {
		live.healthy.Store(false)
		start := time.Now()
		waitState("unhealthy", func(st *routing.State) bool { return !st.Healthy })
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("took %v", d)
		}
	})
	t.Run("shutdown waits for the monitor and its checks", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*routing.ProbeTimeout)
		defer cancel()
		start := time.Now()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("Shutdown took %v: it waited out the hanging probe", d)
		}
		select {
		case <-s.done:
		default:
			t.Error("Shutdown returned before the monitor ended")
		}
		for _, cl := range s.clusters {
			if cl.Probing() {
				t.Errorf("a check of %s still runs after Shutdown", cl.name)
			}
		}
	})
}

// TestMonitorReadsThroughTheProbeClient: the monitor's reads go through
// the cluster's probe client: the load endpoint of each monitor type (the
// routing package tests what it makes of the answers), and a response over
// monitor_max_bytes leaves the load unknown without marking the cluster
// down.
func TestMonitorReadsThroughTheProbeClient(t *testing.T) {
	const running, queued = "trino_execution_name_QueryManager_RunningQueries", "trino_execution_name_QueryManager_QueuedQueries"
	hugeList := "[" + strings.Repeat(`{"state":"RUNNING"},`, 200000) + `{"state":"QUEUED"}]` // ~4 MB
	var paths = make(chan string, 1000)
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		if r.Header.Get("X-Trino-User") != "monitor-user" {
			t.Errorf("%s as %q, want the monitor user", r.URL.Path, r.Header.Get("X-Trino-User"))
		}
		paths <- r.URL.Path
		switch r.URL.Path {
		case "/v1/info":
			io.WriteString(w, `{"starting":false}`)
		case "/metrics":
			if got := r.URL.Query()["name[]"]; len(got) != 2 {
				t.Errorf("/metrics asked for %v, want the two gauges", got)
			}
			fmt.Fprintf(w, "# TYPE %s gauge\n%s 3.0\n# TYPE %s gauge\n%s 4.0\n# EOF\n", running, running, queued, queued)
		case "/v1/query":
			io.WriteString(w, hugeList)
		}
	})
	for _, tc := range []struct {
		typ      string
		maxBytes int
		running  int
		queued   int
		loadErr  bool
		path     string
	}{
		{routing.MonitorMetrics, 0, 3, 4, false, "/metrics"},
		{routing.MonitorQueryList, 8 << 20, 200000, 1, false, "/v1/query"},
		{routing.MonitorQueryList, 0, 0, 0, true, "/v1/query"}, // 4 MB over the 1 MiB default
		{routing.MonitorInfo, 0, 0, 0, false, ""},
	} {
		t.Run(fmt.Sprintf("%s with max %d bytes", tc.typ, tc.maxBytes), func(t *testing.T) {
			for len(paths) > 0 {
				<-paths
			}
			s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "c", URL: stub.URL}}, MonitorInterval: time.Hour,
				MonitorType: tc.typ, MonitorMaxBytes: tc.maxBytes, MonitorUser: "monitor-user",
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			c := s.byName["c"]
			deadline := time.Now().Add(5 * time.Second) // the first round starts with the server
			for c.State() == nil && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			st := c.State()
			if st == nil || !st.Healthy || st.Running != tc.running || st.Queued != tc.queued || (st.LoadErr != "") != tc.loadErr {
				t.Fatalf("state %+v; want healthy, running %d, queued %d, load error %v", st, tc.running, tc.queued, tc.loadErr)
			}
			var got []string
			for len(paths) > 0 {
				if p := <-paths; p != "/v1/info" {
					got = append(got, p)
				}
			}
			if want := tc.path; (want == "" && len(got) != 0) || (want != "" && (len(got) == 0 || got[len(got)-1] != want)) {
				t.Errorf("load read from %v, want %q", got, want)
			}
		})
	}
}
