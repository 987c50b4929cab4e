package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/testnet"
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
	waitState := func(what string, ok func(*clusterState) bool) {
		t.Helper()
		limit := time.Now().Add(time.Second) // probeTimeout is 5s
		for time.Now().Before(limit) {
			if st := c.state.Load(); st != nil && ok(st) {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("the live cluster's state did not become %s within a second (hang probe still pending: %v)", what, s.byName["hang"].probing.Load())
	}
	t.Run("the healthy cluster is checked while the hanging one's probe is pending", func(t *testing.T) {
		waitState("healthy", func(st *clusterState) bool { return st.Healthy })
		if !s.byName["hang"].probing.Load() {
			t.Error("the hanging cluster's probe already ended")
		}
	})
	t.Run("a change of the healthy cluster is seen within a round or two", func(t *testing.T) {
		live.healthy.Store(false)
		start := time.Now()
		waitState("unhealthy", func(st *clusterState) bool { return !st.Healthy })
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("took %v", d)
		}
	})
	t.Run("shutdown waits for the monitor and its checks", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*probeTimeout)
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
			if cl.probing.Load() {
				t.Errorf("a check of %s still runs after Shutdown", cl.name)
			}
		}
	})
}
