package routing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
)

// State is what the monitor knows of a cluster at one check; a new check
// replaces it whole, and a State is never changed once published.
type State struct {
	Healthy bool
	Running int
	Queued  int
	Checked time.Time
	Err     string
	// LoadErr says why Running and Queued could not be read (they are 0
	// then); empty when they were, or when the monitor reads no load.
	LoadErr string
	// Version is the coordinator's nodeVersion.version from /v1/info
	// ("476", "0.296-8661b73"); empty when it did not answer.
	Version string
	// Started is when the coordinator started (the check's time less
	// /v1/info's uptime), within Precision; zero when it did not say.
	Started   time.Time
	Precision time.Duration
	// Until, when set, ends a failed connection's verdict (MarkDown): the
	// cluster counts as healthy again after it unless the monitor says
	// otherwise first, so it is retried even with the monitor off.
	Until time.Time
}

// ProbeTimeout bounds one cluster's check (both of its requests); the
// core's probe clients use it for their dial, read and write timeouts.
const ProbeTimeout = 5 * time.Second

// Monitor types: where the monitor reads a cluster's load.
const (
	// MonitorMetrics reads the coordinator's query-manager gauges
	// (RunningQueries, QueuedQueries) from Trino's OpenMetrics endpoint,
	// asking for just those two (name[] filter): ~230 bytes whatever the
	// query history, where /v1/query serializes every query it remembers.
	MonitorMetrics = "metrics"
	// MonitorQueryList counts the states in the whole /v1/query list.
	MonitorQueryList = "query_list"
	// MonitorInfo reads no load: health from /v1/info only.
	MonitorInfo = "info"
)

// metricsLoadPath asks Trino's /metrics for the two gauges only. PrestoDB
// has no such endpoint; its /v1/cluster is as small and carries the same
// two figures (runningQueries, queuedQueries).
const metricsLoadPath = "/metrics?name[]=" + gaugeRunning + "&name[]=" + gaugeQueued

const (
	prestoLoadPath = "/v1/cluster"
	gaugeRunning   = "trino_execution_name_QueryManager_RunningQueries"
	gaugeQueued    = "trino_execution_name_QueryManager_QueuedQueries"
)

// Prober reads one cluster for the monitor: the core implements it over
// its own HTTP client (the monitor's identity, body size bound and TLS are
// the core's).
type Prober interface {
	// Probe GETs path (which may carry a query) on the cluster by
	// deadline and returns the status and the body, which the monitor
	// keeps: it must not be a buffer the prober reuses.
	Probe(path string, deadline time.Time) (status int, body []byte, err error)
}

// Target is one cluster the monitor checks.
type Target struct {
	Name   string  // for logs
	Health *Health // the state the monitor keeps current
	Prober Prober
	// Engine is the cluster's configured engine. Unknown means it is
	// detected from /v1/info's version (dialect.FromVersion) at every
	// check and kept in Health (Health.Engine).
	Engine dialect.Engine
	// Restarted, when set, is called (on the monitor's goroutine: it must
	// not block) when a check finds the coordinator started after the one
	// an earlier check saw: every query the old one ran is gone. before is
	// the new start less its uncertainty: what was submitted before it ran
	// on the old coordinator.
	Restarted func(before time.Time)
}

// Monitor polls every target's /v1/info (health) and its load (running
// and queued queries, from the cluster's own bookkeeping: see Type). Set
// its fields before Run; it must not be copied after first use.
type Monitor struct {
	Targets []Target
	// Type is where load is read: MonitorMetrics (also when empty),
	// MonitorQueryList or MonitorInfo.
	Type string
	// Log receives health changes and the loop's panics. Nil means
	// slog.Default().
	Log *slog.Logger
	// conns are the probes' open connections (Track), closed when Run
	// stops so that it does not wait out a hanging probe.
	conns connSet
}

// Run checks every target every interval until ctx ends.
// Targets are checked concurrently, each within ProbeTimeout, and a round
// skips a target whose previous check is still running: a cluster that
// hangs delays no other cluster's state. The loop recovers from panics
// (logged), stops on ctx, and returns only when every check it started has
// ended, so the core's Shutdown waits for them.
func (m *Monitor) Run(ctx context.Context, interval time.Duration) {
	var checks sync.WaitGroup
	defer checks.Wait()
	// Once the loop has seen ctx end, a pending probe fails at once. (Not
	// context.AfterFunc with a deferred stop: the loop can see ctx.Done
	// before the context runs its after-funcs, and stop then wins and
	// the probe is left to its deadline.)
	defer m.conns.closeAll()
	for ctx.Err() == nil {
		m.loop(ctx, interval, &checks)
	}
}

// Track adds conn, dialled by a Prober's client, to the connections that
// Run closes when it stops, so that stopping ends a probe that waits on a
// cluster that never answers (fasthttp's client takes no context). Once
// Run's context has ended, Track closes conn and fails with
// ErrMonitorStopped. The returned connection replaces conn.
func (m *Monitor) Track(conn net.Conn) (net.Conn, error) {
	return m.conns.track(conn)
}

func (m *Monitor) log() *slog.Logger {
	if m.Log == nil {
		return slog.Default()
	}
	return m.Log
}

// loop is Run's loop; a panic ends it (logged) and Run starts it again.
func (m *Monitor) loop(ctx context.Context, interval time.Duration, checks *sync.WaitGroup) {
	defer func() {
		if r := recover(); r != nil {
			m.log().Error("health monitor panicked; restarting it", "panic", r)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.round(checks)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// round starts a check of every target that has none running.
func (m *Monitor) round(checks *sync.WaitGroup) {
	for _, t := range m.Targets {
		if !t.Health.probing.CompareAndSwap(false, true) {
			continue // still waiting for the last answer
		}
		checks.Add(1)
		go func() {
			defer checks.Done()
			defer t.Health.probing.Store(false)
			m.check(t)
		}()
	}
}

func (m *Monitor) check(t Target) {
	defer func() {
		if r := recover(); r != nil {
			m.log().Error("health check panicked", "cluster", t.Name, "panic", r)
		}
	}()
	st := &State{Checked: time.Now()}
	deadline := st.Checked.Add(ProbeTimeout)
	var info struct {
		Starting    bool   `json:"starting"`
		Uptime      string `json:"uptime"`
		NodeVersion struct {
			Version string `json:"version"`
		} `json:"nodeVersion"`
	}
	if status, body, err := t.Prober.Probe("/v1/info", deadline); err != nil {
		st.Err = err.Error()
	} else if status != 200 || json.Unmarshal(body, &info) != nil {
		st.Err = "bad /v1/info answer"
	} else if info.Starting {
		st.Err = "starting"
	} else {
		st.Healthy = true
	}
	st.Version = info.NodeVersion.Version
	if up, prec, ok := parseUptime(info.Uptime); ok {
		// The uptime was read within the probe's round trip after Checked.
		st.Started, st.Precision = st.Checked.Add(-up), prec+time.Since(st.Checked)
	}
	engine := t.Engine
	if engine == dialect.Unknown {
		engine = dialect.FromVersion(st.Version)
	}
	if engine != dialect.Unknown && !m.conns.isClosed() {
		if old := t.Health.setEngine(engine); old != engine {
			m.log().Info("cluster engine", "cluster", t.Name, "engine", engine.String(), "version", st.Version, "configured", t.Engine != dialect.Unknown)
		}
	}
	if st.Healthy {
		m.readLoad(t, st, deadline, engine)
	}
	if m.conns.isClosed() {
		return // the monitor is stopping: its failed probes say nothing
	}
	old := t.Health.state.Swap(st)
	if t.Health.restarted(st) {
		m.log().Warn("cluster restarted: the queries it ran before are gone", "cluster", t.Name, "started", st.Started.Format(time.RFC3339))
		if t.Restarted != nil {
			t.Restarted(st.Started.Add(-st.Precision))
		}
	}
	if old == nil || old.Healthy != st.Healthy {
		m.log().Info("cluster health", "cluster", t.Name, "healthy", st.Healthy, "reason", st.Err)
	}
	if st.LoadErr != "" && (old == nil || old.LoadErr != st.LoadErr) && !m.conns.isClosed() {
		m.log().Warn("cluster load unknown; counting only what this proxy sent", "cluster", t.Name, "monitor_type", m.Type, "reason", st.LoadErr)
	}
	t.Health.sent.Store(0)
}

// readLoad fills st.Running and st.Queued from the cluster of engine e,
// as m.Type says, or st.LoadErr.
func (m *Monitor) readLoad(t Target, st *State, deadline time.Time, e dialect.Engine) {
	var path string
	switch {
	case m.Type == MonitorInfo:
		return
	case m.Type == MonitorQueryList:
		path = "/v1/query"
	case e == dialect.Presto:
		path = prestoLoadPath
	default:
		path = metricsLoadPath
	}
	status, body, err := t.Prober.Probe(path, deadline)
	switch {
	case err != nil:
		st.LoadErr = err.Error()
		return
	case status != 200:
		st.LoadErr = fmt.Sprintf("%s answered HTTP %d", strings.SplitN(path, "?", 2)[0], status)
		return
	}
	if m.Type == MonitorQueryList {
		var qs []struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(body, &qs); err != nil {
			st.LoadErr = "bad /v1/query answer: " + err.Error()
			return
		}
		for _, q := range qs {
			switch q.State {
			case "QUEUED", "WAITING_FOR_RESOURCES", "DISPATCHING":
				st.Queued++
			case "PLANNING", "STARTING", "RUNNING", "FINISHING":
				st.Running++
			}
		}
		return
	}
	if path == prestoLoadPath {
		var c struct {
			Running *int `json:"runningQueries"`
			Queued  *int `json:"queuedQueries"`
		}
		if err := json.Unmarshal(body, &c); err != nil || c.Running == nil || c.Queued == nil || *c.Running < 0 || *c.Queued < 0 {
			st.LoadErr = "bad /v1/cluster answer"
			return
		}
		st.Running, st.Queued = *c.Running, *c.Queued
		return
	}
	running, okR := gauge(body, gaugeRunning)
	queued, okQ := gauge(body, gaugeQueued)
	if !okR || !okQ {
		st.LoadErr = "/metrics lacks the query-manager gauges"
		return
	}
	st.Running, st.Queued = running, queued
}

// gauge finds the sample "name value" in an OpenMetrics/Prometheus text
// exposition (a gauge without labels, as Trino's JMX-derived ones are).
func gauge(body []byte, name string) (int, bool) {
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		rest, ok := bytes.CutPrefix(line, []byte(name))
		if !ok || len(rest) == 0 || (rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		f := bytes.Fields(rest)
		v, err := strconv.ParseFloat(string(f[0]), 64)
		if err != nil || v < 0 || math.IsNaN(v) || v > math.MaxInt32 {
			return 0, false
		}
		return int(v), true
	}
	return 0, false
}

// markDownFor is how long a failed connection keeps a cluster out of
// routing when the monitor does not check it sooner.
const markDownFor = 10 * time.Second

// Health is the mutable state routing reads of one cluster: its last
// check, and the queries sent to it since. The core embeds one in each
// cluster; a Monitor and MarkDown write it. The zero value is a cluster
// never checked: healthy and idle. It is safe for concurrent use and must
// not be copied.
type Health struct {
	state   atomic.Pointer[State]
	start   atomic.Pointer[State] // the last check that read a start (restarted)
	sent    atomic.Int64
	probing atomic.Bool                    // a health check is running
	engine  atomic.Pointer[dialect.Engine] // the last engine a check found
}

// Engine is the cluster's engine as the monitor last found it (the
// configured one, else detected from /v1/info); Unknown before any check
// told it. A failed check (MarkDown included) keeps what was found.
func (h *Health) Engine() dialect.Engine {
	if e := h.engine.Load(); e != nil {
		return *e
	}
	return dialect.Unknown
}

// setEngine records e and returns the engine recorded before.
func (h *Health) setEngine(e dialect.Engine) dialect.Engine {
	old := h.engine.Swap(&e)
	if old == nil {
		return dialect.Unknown
	}
	return *old
}

// restartSlack is how much later than the last known start a new start
// must be to count as a restart, beyond both readings' precision: the
// probe's clock and the coordinator's uptime are read apart.
const restartSlack = 2 * time.Second

// restarted records st's start and reports whether it is a later
// coordinator than the latest start any check read before (false for the
// first). The latest, not the last: behind an address that reaches more
// than one coordinator in turn, checks alternate between their starts, and
// only a start later than all of them is a restart. Only the monitor's
// goroutine calls it for a cluster.
func (h *Health) restarted(st *State) bool {
	if st.Started.IsZero() {
		return false
	}
	old := h.start.Load()
	if old == nil {
		h.start.Store(st)
		return false
	}
	if st.Started.Sub(old.Started) <= old.Precision+st.Precision+restartSlack {
		return false
	}
	h.start.Store(st)
	return true
}

// parseUptime reads /v1/info's uptime, an airlift Duration ("12.34m",
// "1.50d": the most succinct unit, two decimals), and its precision
// (half the last digit).
func parseUptime(s string) (time.Duration, time.Duration, bool) {
	i := strings.LastIndexFunc(s, func(r rune) bool { return r >= '0' && r <= '9' || r == '.' }) + 1
	if i == 0 {
		return 0, 0, false
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil || v < 0 {
		return 0, 0, false
	}
	unit, ok := map[string]time.Duration{"ns": time.Nanosecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[strings.TrimSpace(s[i:])]
	if !ok || v*float64(unit) > float64(math.MaxInt64) {
		return 0, 0, false
	}
	return time.Duration(v * float64(unit)), unit / 200, true
}

// MarkDown records that a connection to the cluster failed, so routing
// avoids it until the monitor finds it up again or markDownFor has passed.
func (h *Health) MarkDown(err error) {
	now := time.Now()
	h.state.Store(&State{Checked: now, Err: err.Error(), Until: now.Add(markDownFor)})
}

// Healthy reports the last known health; a cluster never checked counts as
// healthy (the monitor may be off).
func (h *Health) Healthy() bool {
	st := h.state.Load()
	return st == nil || st.Healthy || (!st.Until.IsZero() && time.Now().After(st.Until))
}

// Load is the cluster's running + queued queries at the last check plus the
// queries this proxy sent since (CountSent), so a burst does not all land
// on one cluster between two checks.
func (h *Health) Load() int64 {
	n := h.sent.Load()
	if st := h.state.Load(); st != nil {
		n += int64(st.Running + st.Queued)
	}
	return n
}

// CountSent counts one query sent to the cluster; the next check resets
// the count.
func (h *Health) CountSent() { h.sent.Add(1) }

// State is the last check's (or MarkDown's) state; nil when the cluster
// was never checked.
func (h *Health) State() *State { return h.state.Load() }

// Probing reports whether a check of the cluster is running.
func (h *Health) Probing() bool { return h.probing.Load() }

// ErrMonitorStopped fails the probes of a monitor that is stopping
// (Track).
var ErrMonitorStopped = errors.New("routing: health monitor stopped")

// connSet tracks the monitor's connections so that stopping the monitor
// can end a probe that waits on a cluster that never answers.
type connSet struct {
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	closed bool
}

type trackedConn struct {
	net.Conn
	set *connSet
}

func (c *trackedConn) Close() error {
	c.set.mu.Lock()
	delete(c.set.conns, c)
	c.set.mu.Unlock()
	return c.Conn.Close()
}

// track adds conn to the set (Monitor.Track).
func (cs *connSet) track(conn net.Conn) (net.Conn, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		conn.Close()
		return nil, ErrMonitorStopped
	}
	if cs.conns == nil {
		cs.conns = map[*trackedConn]struct{}{}
	}
	tc := &trackedConn{Conn: conn, set: cs}
	cs.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes every tracked connection and refuses new ones.
func (cs *connSet) closeAll() {
	cs.mu.Lock()
	conns := cs.conns
	cs.conns, cs.closed = nil, true
	cs.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// isClosed reports whether closeAll ran (the monitor is stopping).
func (cs *connSet) isClosed() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.closed
}
