// Package load puts 200 concurrent real clients on the real binary in front
// of the real Trino, and on the Trino directly, for a bounded time (issue
// 16's fault suite): errors, latency, and the proxy's memory, file
// descriptors and goroutines before, at the peak and after (no leak).
package load

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trinodb/trino-go-client/trino"

	"github.com/prestroid/prestroid/testing/e2e"
)

// clients is how many clients run at once.
const clients = 200

// phase is how long the clients start new queries in each run (direct,
// then through the proxy); PRESTROID_LOAD_SECONDS overrides it.
func phase(t *testing.T) time.Duration {
	if s := os.Getenv("PRESTROID_LOAD_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("PRESTROID_LOAD_SECONDS=%q: want a positive number of seconds", s)
		}
		return time.Duration(n) * time.Second
	}
	return 20 * time.Second
}

// run is what one load run measured.
type run struct {
	queries   int
	errors    map[string]int // by message, query ids stripped
	wrong     []string       // queries that returned something else
	latencies []time.Duration
	wall      time.Duration
}

func (r *run) nErrors() int {
	n := 0
	for _, c := range r.errors {
		n += c
	}
	return n
}

func (r *run) quantile(q float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	s := slices.Clone(r.latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (r *run) String() string {
	return fmt.Sprintf("%d queries in %s (%.1f/s), %d errors, %d wrong results, latency p50 %s p99 %s max %s",
		r.queries, r.wall.Round(time.Millisecond), float64(r.queries)/r.wall.Seconds(), r.nErrors(), len(r.wrong),
		r.quantile(0.5).Round(time.Millisecond), r.quantile(0.99).Round(time.Millisecond),
		r.quantile(1).Round(time.Millisecond))
}

// load runs `clients` trino-go-client clients against server until the
// phase ends (each then finishes its query). Each client has its own
// http.Client (its own keep-alive connection, as separate client processes
// would) and runs SELECT count(*) FROM tpch.tiny.nation WHERE nationkey < k
// for a random k in [0, 30): a table read that the proxy estimates (new
// literals of one shape: EXPLAINs, history, the model), with a known
// answer, min(k, 25). Every query is read to its end, so the client polls
// it to completion as a client does.
func load(t *testing.T, name, server string, d time.Duration) *run {
	t.Helper()
	r := &run{errors: map[string]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	start := time.Now()
	for c := range clients {
		tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute,
			DialContext: (&net.Dialer{Timeout: 10 * time.Second}).DialContext}
		key := fmt.Sprintf("load-%s-%d", name, c)
		if err := trino.RegisterCustomClient(key, &http.Client{Transport: tr}); err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(server)
		u.User = url.User("load" + strconv.Itoa(c%20))
		db, err := sql.Open("trino", u.String()+"?source=prestroid-load&custom_client="+key)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { db.Close(); tr.CloseIdleConnections(); trino.DeregisterCustomClient(key) }()
			rng := rand.New(rand.NewPCG(uint64(c), uint64(len(name))))
			for time.Now().Before(stop) {
				k := rng.IntN(30)
				q := fmt.Sprintf("SELECT count(*) FROM tpch.tiny.nation WHERE nationkey < %d", k)
				began := time.Now()
				got, err := countOf(db, q)
				took := time.Since(began)
				mu.Lock()
				r.queries++
				switch {
				case err != nil:
					r.errors[e2e.StripQueryID(err)]++
				case got != min(k, 25):
					r.wrong = append(r.wrong, fmt.Sprintf("%s = %d", q, got))
				default:
					r.latencies = append(r.latencies, took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	r.wall = time.Since(start)
	return r
}

// loadavg is the machine's 1-minute load average, for the log: the
// figures mean little without it on a shared machine.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// countOf runs q and reads every page to the end (4 minutes at most: 200
// queries at once on a saturated 2-core machine took up to 65 s each).
func countOf(db *sql.DB, q string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n, got := 0, 0
	for rows.Next() {
		if err := rows.Scan(&got); err != nil {
			return 0, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if n != 1 {
		return 0, fmt.Errorf("load: %d rows", n)
	}
	return got, nil
}

// TestTwoHundredClients runs the load through the proxy, then directly
// (while the proxy's idle connections expire), and fails on any error or
// wrong result through the proxy that the direct run does not also show,
// and on a leak: client connections, connections to Trino and goroutines
// not back near their baseline once the clients are gone. Latencies and
// the process figures are reported, never judged.
func TestTwoHundredClients(t *testing.T) {
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	d := phase(t)
	began := time.Now()
	port := e2e.FreePort(t)
	du, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	trinoPort, _ := strconv.Atoi(du.Port())
	// Admission is off (every budget 0, the default), so 200 queries are
	// admitted at once; upstream_max_conns (1024) exceeds the 200 polls in
	// flight plus the EXPLAINs.
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
clusters:
  - {name: default, url: %q}
upstream_max_conns: 1024
admission:
  max_queries: 0
  user_max_queries: 0
routing:
  estimate_timeout: 2s
`, port, direct)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := e2e.ServeBinary(t, bin, port, "--config", path)
	pp, _ := strconv.Atoi(port)
	s := &sampler{pid: cmd.Process.Pid, proxyPort: pp, trinoPort: trinoPort, metrics: base + "/metrics",
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}}

	// Warm up: a few queries through the proxy (the estimator loaded, the
	// history and caches in use) and directly, then the baseline.
	warm := e2e.OpenDB(t, base, "")
	for k := range 5 {
		if _, err := countOf(warm, fmt.Sprintf("SELECT count(*) FROM tpch.tiny.nation WHERE nationkey < %d", k)); err != nil {
			t.Fatalf("warm-up query through the proxy: %v", err)
		}
	}
	warm.Close()
	time.Sleep(time.Second)
	before, err := s.sample()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("proxy before: %s", before)

	// Through the proxy, sampling the process every 250 ms.
	peak := before
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if u, err := s.sample(); err == nil {
					peak = peak.max(u)
				}
			}
		}
	}()
	decided, err := s.sum("prestroid_decisions_total")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("load average %s", loadavg())
	proxied := load(t, "proxy", base, d)
	close(done)
	<-sampled
	t.Logf("through the proxy: %s; load average %s", proxied, loadavg())
	t.Logf("the proxy's decisions:\n  %s", strings.Join(s.counters("prestroid_decisions_total", "prestroid_fail_open_total",
		"prestroid_estimates_total", "prestroid_explains_total"), "\n  "))
	t.Logf("proxy at the peak: %s", peak)
	// Every query was placed by the proxy once (estimated or failed open):
	// none went by without a decision, none was submitted twice.
	if n, err := s.sum("prestroid_decisions_total"); err != nil || int(n-decided) != proxied.queries {
		t.Errorf("the proxy made %v placement decisions (%v) for %d queries", n-decided, err, proxied.queries)
	}
	ended := time.Now()
	if u, err := s.sample(); err == nil {
		t.Logf("proxy as the last client closed: %s", u)
	}

	// Directly, while the proxy idles.
	straight := load(t, "direct", direct, d)
	t.Logf("directly: %s; load average %s", straight, loadavg())

	// The proxy settles: client connections go as the clients close them,
	// its pooled connections to Trino expire (30 s idle; the EXPLAIN
	// client's, 90 s, unless Trino closes them first), and their
	// goroutines go with them. Slack: a connection or two of the test's
	// own (its /metrics client, the harness's readiness check).
	var after usage
	leaks := func(u usage) []string {
		var l []string
		if u.Clients > before.Clients+1 {
			l = append(l, fmt.Sprintf("client connections: %d before, %d after", before.Clients, u.Clients))
		}
		if u.Upstream > before.Upstream+2 {
			l = append(l, fmt.Sprintf("connections to Trino: %d before, %d after", before.Upstream, u.Upstream))
		}
		if u.FDs > before.FDs+3 {
			l = append(l, fmt.Sprintf("file descriptors: %d before, %d after", before.FDs, u.FDs))
		}
		if u.Goroutines > before.Goroutines+10 {
			l = append(l, fmt.Sprintf("goroutines: %d before, %d after", before.Goroutines, u.Goroutines))
		}
		return l
	}
	deadline := ended.Add(100 * time.Second)
	for {
		after, err = s.sample()
		if err != nil {
			t.Fatal(err)
		}
		if len(leaks(after)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("proxy after (%s after the last client closed): %s", time.Since(ended).Round(time.Second), after)

	for _, r := range []struct {
		name string
		r    *run
	}{{"through the proxy", proxied}, {"directly", straight}} {
		msgs := make([]string, 0, len(r.r.errors))
		for m, n := range r.r.errors {
			msgs = append(msgs, fmt.Sprintf("%d× %s", n, m))
		}
		sort.Strings(msgs)
		if len(msgs) > 0 {
			t.Logf("errors %s:\n  %s", r.name, strings.Join(msgs, "\n  "))
		}
	}
	for m, n := range proxied.errors {
		if straight.errors[m] == 0 {
			t.Errorf("%d queries through the proxy failed with an error the direct run never had: %s", n, m)
		}
	}
	if len(proxied.wrong) > 0 {
		t.Errorf("%d wrong results through the proxy, e.g. %s", len(proxied.wrong), proxied.wrong[0])
	}
	if len(straight.wrong) > 0 {
		t.Errorf("%d wrong results directly, e.g. %s", len(straight.wrong), straight.wrong[0])
	}
	if proxied.queries < clients || len(proxied.latencies) == 0 {
		t.Errorf("through the proxy only %d queries ran: the load never reached %d clients", proxied.queries, clients)
	}
	if peak.Clients < clients/2 {
		t.Errorf("at most %d client connections open at once: the proxy never saw the load", peak.Clients)
	}
	for _, l := range leaks(after) {
		t.Errorf("leak, %s after the last client closed: %s", time.Since(ended).Round(time.Second), l)
	}
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the proxy process is gone: %v", err)
	}
	t.Logf("package time: %s", time.Since(began).Round(time.Second))
}
