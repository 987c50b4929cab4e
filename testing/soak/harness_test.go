package soak

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// The harness's own parts, without Trino: fault windows, the mix, the
// balancer.

func TestFaultWindows(t *testing.T) {
	fs := &faults{}
	t0 := time.Now()
	fs.add(&fault{name: "kill", start: t0, end: t0.Add(10 * time.Second), grace: 5 * time.Second})
	for _, c := range []struct {
		from, to time.Duration
		want     string
	}{
		{-30 * time.Second, -2 * time.Second, ""}, // over before the fault (1 s slack)
		{-30 * time.Second, -500 * time.Millisecond, "kill"},
		{2 * time.Second, 3 * time.Second, "kill"},   // inside
		{14 * time.Second, 20 * time.Second, "kill"}, // within the grace
		{16 * time.Second, 20 * time.Second, ""},     // after it
	} {
		if got := fs.explain(t0.Add(c.from), t0.Add(c.to)); got != c.want {
			t.Errorf("query [%s, %s]: explained by %q, want %q", c.from, c.to, got, c.want)
		}
	}
}

func TestPickerFollowsTheWeights(t *testing.T) {
	cat := []stmt{{"t1", "", "tiny"}, {"t2", "", "tiny"}, {"m", "", "medium"}, {"l", "", "large"}, {"h", "", "heavy"}, {"x", "", "heavy"}}
	p := newPicker(cat, func(i int) bool { return cat[i].name != "x" })
	n := map[string]int{}
	for i := range 20000 {
		j := p.pick(1, i)
		if cat[j].name == "x" {
			t.Fatal("picked a statement left out")
		}
		n[cat[j].size]++
	}
	for size, w := range weights {
		if got := float64(n[size]) / 20000 * 1000; got < float64(w)*0.8 || got > float64(w)*1.2 {
			t.Errorf("%s: %.0f per 1,000, want about %d", size, got, w)
		}
	}
	if p.pick(7, 42) != p.pick(7, 42) {
		t.Error("the mix is not deterministic in its seed")
	}
}

func TestBalancerMovesRefusedConnections(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(append([]byte(r.Host+" "), b...))
	}))
	defer up.Close()
	dead, _ := net.Listen("tcp", "127.0.0.1:0")
	deadURL := "http://" + dead.Addr().String()
	dead.Close() // refuses connections
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	lb := newBalancer(ln, deadURL, up.URL)
	defer lb.close()
	for i := range 4 {
		resp, err := http.Post(lb.URL+"/v1/statement", "text/plain", strings.NewReader("SELECT 1"))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		// The Host is the balancer's (the replicas' public_url), the body
		// arrives whole on the live backend.
		if want := ln.Addr().String() + " SELECT 1"; resp.StatusCode != 200 || string(b) != want {
			t.Fatalf("request %d: %s %q, want 200 %q", i, resp.Status, b, want)
		}
	}
	up.Close()
	resp, err := http.Get(lb.URL + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("no backend up: %s, want 502", resp.Status)
	}
}
