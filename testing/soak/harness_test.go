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

func TestMemoryLeaksCountsTheCaches(t *testing.T) {
	const mib = 1 << 20
	// A replica whose heap goal says 40 MiB live, RSS 120 MiB of which 80
	// is heap kept from the OS.
	base := sample{gogc: 100, nextGC: 80 * mib, retained: 80 * mib, rss: 120 * mib, caches: map[string]float64{"plan": 1 * mib}}
	after := func(live, caches, retained, rss float64) sample {
		return sample{gogc: 100, nextGC: 2 * live * mib, retained: retained * mib, rss: rss * mib,
			caches: map[string]float64{"plan": caches * mib / 2, "predicate": caches * mib / 2}}
	}
	for _, c := range []struct {
		name  string
		a     sample
		leaks int
	}{
		{"heap grown by what the caches hold, RSS by the goal it sets: no leak", after(140, 101, 300, 340), 0},
		{"heap grown 20 MiB past the caches' 100 plus their eighth: a leak", after(173, 101, 350, 390), 1},
		{"heap grown with nothing cached: a leak past 16 MiB", after(60, 1, 120, 160), 1},
		{"small growth with nothing cached: within the slack", after(50, 1, 100, 140), 0},
		{"heap kept from the OS past 1.1 x its goal + 16 MiB: the scavenger has not caught up", after(40, 1, 110, 150), 1},
		{"RSS outside the heap grown by 60 MiB: a leak outside Go (cgo, ONNX Runtime)", after(40, 1, 80, 180), 1},
	} {
		if got := memoryLeaks(base, c.a, true); len(got) != c.leaks {
			t.Errorf("%s: %q, want %d finding(s)", c.name, got, c.leaks)
		}
	}
}

func TestMemoryLeaksWithoutAGCAfterTheLoad(t *testing.T) {
	const mib = 1 << 20
	base := sample{gogc: 100, nextGC: 80 * mib, retained: 80 * mib, rss: 120 * mib}
	a := sample{gogc: 100, nextGC: 200 * mib, retained: 200 * mib, rss: 240 * mib}
	if got := memoryLeaks(base, a, false); len(got) != 0 {
		t.Errorf("heap not judged, RSS by the goal: %q, want nothing", got)
	}
	if got := memoryLeaks(base, a, true); len(got) != 1 {
		t.Errorf("heap judged: %q, want the live heap's growth", got)
	}
}
