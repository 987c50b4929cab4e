package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/testnet"
)

func TestGaugeReadsTrinosOpenMetricsLines(t *testing.T) {
	body := []byte("# TYPE trino_execution_name_QueryManager_RunningQueries gauge\n" +
		"trino_execution_name_QueryManager_RunningQueries 7.0\n" +
		"trino_execution_name_QueryManager_RunningQueriesX 99.0\n" +
		"# TYPE trino_execution_name_QueryManager_QueuedQueries gauge\n" +
		"trino_execution_name_QueryManager_QueuedQueries\t2.0E0\n# EOF\n")
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{
		{gaugeRunning, 7, true},
		{gaugeQueued, 2, true},
		{"trino_missing", 0, false},
	} {
		got, ok := gauge(body, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("gauge(%s) = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{"NaN", "-1", "1e12", "x"} {
		if _, ok := gauge([]byte(gaugeQueued+" "+bad+"\n"), gaugeQueued); ok {
			t.Errorf("gauge accepted %q", bad)
		}
	}
}

// fakeProber answers each path from a table (path without its query)
// and records the paths asked.
type fakeProber struct {
	answers map[string]answer
	asked   []string
}

type answer struct {
	status int
	body   string
	err    error
}

func (f *fakeProber) Probe(path string, _ time.Time) (int, []byte, error) {
	f.asked = append(f.asked, path)
	a, ok := f.answers[strings.SplitN(path, "?", 2)[0]]
	if !ok {
		return 404, nil, nil
	}
	return a.status, []byte(a.body), a.err
}

// TestMonitorTypes: each monitor type reads load from its own endpoint
// (and only it); a cluster that fails /v1/info is down and its load is not
// read; an unreadable load leaves the load unknown without marking the
// cluster down.
func TestMonitorTypes(t *testing.T) {
	info := answer{200, `{"starting":false}`, nil}
	metrics := answer{200, fmt.Sprintf("# TYPE %s gauge\n%s 3.0\n# TYPE %s gauge\n%s 4.0\n# EOF\n",
		gaugeRunning, gaugeRunning, gaugeQueued, gaugeQueued), nil}
	list := answer{200, `[{"state":"RUNNING"},{"state":"PLANNING"},{"state":"QUEUED"},{"state":"FINISHED"}]`, nil}
	for _, tc := range []struct {
		name     string
		typ      string
		answers  map[string]answer
		healthy  bool
		running  int
		queued   int
		loadErr  string
		lastPath string
	}{
		{"metrics reads the two gauges", MonitorMetrics, map[string]answer{"/v1/info": info, "/metrics": metrics}, true, 3, 4, "", metricsLoadPath},
		{"an empty type reads metrics", "", map[string]answer{"/v1/info": info, "/metrics": metrics}, true, 3, 4, "", metricsLoadPath},
		{"query_list counts the states", MonitorQueryList, map[string]answer{"/v1/info": info, "/v1/query": list}, true, 2, 1, "", "/v1/query"},
		{"info reads no load", MonitorInfo, map[string]answer{"/v1/info": info, "/metrics": metrics}, true, 0, 0, "", "/v1/info"},
		{"a starting cluster is down", MonitorMetrics, map[string]answer{"/v1/info": {200, `{"starting":true}`, nil}, "/metrics": metrics}, false, 0, 0, "", "/v1/info"},
		{"an unreachable cluster is down", MonitorMetrics, map[string]answer{"/v1/info": {0, "", errors.New("refused")}}, false, 0, 0, "", "/v1/info"},
		{"metrics without the gauges leave the load unknown", MonitorMetrics, map[string]answer{"/v1/info": info, "/metrics": {200, "# EOF\n", nil}},
			true, 0, 0, "/metrics lacks the query-manager gauges", metricsLoadPath},
		{"an HTTP error leaves the load unknown", MonitorMetrics, map[string]answer{"/v1/info": info, "/metrics": {500, "", nil}},
			true, 0, 0, "/metrics answered HTTP 500", metricsLoadPath},
		{"a bad query list leaves the load unknown", MonitorQueryList, map[string]answer{"/v1/info": info, "/v1/query": {200, "{", nil}},
			true, 0, 0, "bad /v1/query answer: unexpected end of JSON input", "/v1/query"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeProber{answers: tc.answers}
			var h Health
			h.CountSent()
			m := &Monitor{Type: tc.typ, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			m.check(Target{Name: "c", Health: &h, Prober: f})
			st := h.State()
			if st == nil || st.Healthy != tc.healthy || st.Running != tc.running || st.Queued != tc.queued || st.LoadErr != tc.loadErr {
				t.Errorf("state %+v; want healthy %v, running %d, queued %d, load error %q", st, tc.healthy, tc.running, tc.queued, tc.loadErr)
			}
			if got := f.asked[len(f.asked)-1]; got != tc.lastPath {
				t.Errorf("last asked %q (all %v), want %q", got, f.asked, tc.lastPath)
			}
			if h.Load() != int64(tc.running+tc.queued) {
				t.Errorf("load %d after the check, want running + queued %d (the sent count reset)", h.Load(), tc.running+tc.queued)
			}
		})
	}
}

// TestHealth: a cluster never checked is healthy and idle; one marked
// down is not, and counts its sent queries until the next check.
func TestHealth(t *testing.T) {
	var h Health
	if !h.Healthy() || h.Load() != 0 || h.State() != nil {
		t.Fatalf("zero Health: healthy %v, load %d, state %+v", h.Healthy(), h.Load(), h.State())
	}
	h.CountSent()
	h.CountSent()
	h.MarkDown(errors.New("connection refused"))
	if h.Healthy() {
		t.Error("healthy right after MarkDown")
	}
	if st := h.State(); st == nil || st.Err != "connection refused" || st.Until.Sub(st.Checked) != markDownFor {
		t.Errorf("state after MarkDown %+v", st)
	}
	if h.Load() != 2 {
		t.Errorf("load %d, want the 2 sent", h.Load())
	}
}

// hangingProber dials a cluster that never answers, through the monitor's
// Track, and waits for an answer.
type hangingProber struct {
	m    *Monitor
	addr string
}

func (p hangingProber) Probe(string, time.Time) (int, []byte, error) {
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		return 0, nil, err
	}
	tc, err := p.m.Track(conn)
	if err != nil {
		return 0, nil, err
	}
	defer tc.Close()
	_, err = tc.Read(make([]byte, 1)) // until the monitor closes it
	return 0, nil, err
}

// TestRunStopsWithoutWaitingForAHangingProbe: ending Run's context closes
// the tracked connections, so Run returns at once rather than after the
// probe's deadline; the stopping monitor's failed probe leaves the state
// alone, and Track refuses connections afterwards.
func TestRunStopsWithoutWaitingForAHangingProbe(t *testing.T) {
	m := &Monitor{Type: MonitorInfo, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	var h Health
	m.Targets = []Target{{Name: "hang", Health: &h, Prober: hangingProber{m, strings.TrimPrefix(testnet.Hanging(t), "http://")}}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx, time.Hour) }()
	for !h.Probing() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the probe block on its read
	start := time.Now()
	cancel()
	select {
	case <-done:
	case <-time.After(ProbeTimeout):
		t.Fatal("Run did not return after its context ended")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if h.Probing() || h.State() != nil {
		t.Errorf("after Run: probing %v, state %+v; want no check running and no state", h.Probing(), h.State())
	}
	c1, c2 := net.Pipe()
	defer c2.Close()
	if _, err := m.Track(c1); !errors.Is(err, ErrMonitorStopped) {
		t.Errorf("Track after stopping: %v, want ErrMonitorStopped", err)
	}
}

func TestParseUptime(t *testing.T) {
	for _, tc := range []struct {
		in       string
		up, prec time.Duration
		ok       bool
	}{
		{"12.34s", 12340 * time.Millisecond, 5 * time.Millisecond, true},
		{"5.00m", 5 * time.Minute, 300 * time.Millisecond, true},
		{"1.50d", 36 * time.Hour, 432 * time.Second, true},
		{"250.00ms", 250 * time.Millisecond, 5 * time.Millisecond / 1000, true},
		{"", 0, 0, false},
		{"12.34", 0, 0, false},
		{"m", 0, 0, false},
		{"-1.00s", 0, 0, false},
		{"1.00y", 0, 0, false},
	} {
		up, prec, ok := parseUptime(tc.in)
		if up != tc.up || prec != tc.prec || ok != tc.ok {
			t.Errorf("parseUptime(%q) = %v, %v, %v; want %v, %v, %v", tc.in, up, prec, ok, tc.up, tc.prec, tc.ok)
		}
	}
}

// TestMonitorSeesARestart: a check whose uptime puts the coordinator's
// start later than an earlier check's calls Restarted once, with a time
// before the new start; an uptime that only grows, an outage in between
// (no uptime) and the first check do not.
func TestMonitorSeesARestart(t *testing.T) {
	var h Health
	var calls []time.Time
	m := &Monitor{Type: MonitorInfo, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	check := func(a answer) {
		m.check(Target{Name: "c", Health: &h, Prober: &fakeProber{answers: map[string]answer{"/v1/info": a}},
			Restarted: func(before time.Time) { calls = append(calls, before) }})
	}
	up := func(s string) answer { return answer{200, `{"starting":false,"uptime":"` + s + `"}`, nil} }
	check(up("3.00h"))
	check(up("3.01h")) // a start 36 s earlier: the rounding, not a restart
	check(answer{0, "", errors.New("refused")})
	if len(calls) != 0 {
		t.Fatalf("Restarted called %d times before any restart", len(calls))
	}
	started := time.Now().Add(-12 * time.Second)
	check(up("12.00s"))
	if len(calls) != 1 {
		t.Fatalf("Restarted called %d times after a restart, want 1", len(calls))
	}
	if d := started.Sub(calls[0]); d < 0 || d > time.Second {
		t.Errorf("Restarted(%v), want within a second before the new start %v", calls[0], started)
	}
	check(up("13.00s"))
	check(up("1.00m"))
	if len(calls) != 1 {
		t.Errorf("Restarted called %d times as the new coordinator's uptime grew, want 1", len(calls))
	}
}

// TestMonitorBehindTwoCoordinators: an address that reaches two
// coordinators in turn (started an hour apart) is not a cluster that
// restarts at every other check: only the first sight of the later one
// counts, and its start is before anything placed since.
func TestMonitorBehindTwoCoordinators(t *testing.T) {
	var h Health
	var calls []time.Time
	m := &Monitor{Type: MonitorInfo, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for i := range 6 {
		up := []string{"2.00h", "1.00h"}[i%2]
		m.check(Target{Name: "c", Health: &h, Prober: &fakeProber{answers: map[string]answer{"/v1/info": {200, `{"uptime":"` + up + `"}`, nil}}},
			Restarted: func(before time.Time) { calls = append(calls, before) }})
	}
	if len(calls) != 1 || time.Since(calls[0]) < 59*time.Minute {
		t.Errorf("Restarted calls %v; want one, with a time an hour ago (the later coordinator's start)", calls)
	}
}
