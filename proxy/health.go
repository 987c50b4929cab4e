package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
)

// clusterState is what the monitor knows of a cluster, swapped atomically.
type clusterState struct {
	Healthy bool
	Running int
	Queued  int
	Checked time.Time
	Err     string
	// LoadErr says why Running and Queued could not be read (they are 0
	// then); empty when they were, or when the monitor reads no load.
	LoadErr string
	// Until, when set, ends a failed connection's verdict (markDown): the
	// cluster counts as healthy again after it unless the monitor says
	// otherwise first, so it is retried even with the monitor off.
	Until time.Time
}

// probeTimeout bounds one cluster's check (both of its requests).
const probeTimeout = 5 * time.Second

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

// metricsLoadPath asks Trino's /metrics for the two gauges only.
const metricsLoadPath = "/metrics?name[]=" + gaugeRunning + "&name[]=" + gaugeQueued

const (
	gaugeRunning = "trino_execution_name_QueryManager_RunningQueries"
	gaugeQueued  = "trino_execution_name_QueryManager_QueuedQueries"
)

// monitor polls every cluster's /v1/info (health) and its load (running
// and queued queries, from the cluster's own bookkeeping: see MonitorType)
// every interval.
// Clusters are checked concurrently, each within probeTimeout, and a round
// skips a cluster whose previous check is still running: a cluster that
// hangs delays no other cluster's state. The loop recovers from panics
// (logged), stops on ctx, and returns only when every check it started has
// ended, so Shutdown waits for them.
func (s *Server) monitor(ctx context.Context, interval time.Duration) {
	var checks sync.WaitGroup
	defer checks.Wait()
	stop := context.AfterFunc(ctx, s.probeConns.closeAll) // a pending probe fails at once
	defer stop()
	for ctx.Err() == nil {
		s.monitorLoop(ctx, interval, &checks)
	}
}

// monitorLoop is monitor's loop; a panic ends it (logged) and monitor
// starts it again.
func (s *Server) monitorLoop(ctx context.Context, interval time.Duration, checks *sync.WaitGroup) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("health monitor panicked; restarting it", "panic", r)
			select {
			case <-ctx.Done():
			case <-time.After(interval):
			}
		}
	}()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.probeRound(checks)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeRound starts a check of every cluster that has none running.
func (s *Server) probeRound(checks *sync.WaitGroup) {
	for _, c := range s.clusters {
		if !c.probing.CompareAndSwap(false, true) {
			continue // still waiting for the last answer
		}
		checks.Add(1)
		go func() {
			defer checks.Done()
			defer c.probing.Store(false)
			s.checkCluster(c)
		}()
	}
}

func (s *Server) checkCluster(c *cluster) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("health check panicked", "cluster", c.name, "panic", r)
		}
	}()
	st := &clusterState{Checked: time.Now()}
	deadline := st.Checked.Add(probeTimeout)
	var info struct {
		Starting bool `json:"starting"`
	}
	if status, body, err := s.probe(c, "/v1/info", deadline); err != nil {
		st.Err = err.Error()
	} else if status != 200 || json.Unmarshal(body, &info) != nil {
		st.Err = "bad /v1/info answer"
	} else if info.Starting {
		st.Err = "starting"
	} else {
		st.Healthy = true
	}
	if st.Healthy {
		s.readLoad(c, st, deadline)
	}
	if s.probeConns.isClosed() {
		return // the monitor is stopping: its failed probes say nothing
	}
	old := c.state.Swap(st)
	if old == nil || old.Healthy != st.Healthy {
		s.log.Info("cluster health", "cluster", c.name, "healthy", st.Healthy, "reason", st.Err)
	}
	if st.LoadErr != "" && (old == nil || old.LoadErr != st.LoadErr) && !s.probeConns.isClosed() {
		s.log.Warn("cluster load unknown; counting only what this proxy sent", "cluster", c.name, "monitor_type", s.opts.MonitorType, "reason", st.LoadErr)
	}
	c.sent.Store(0)
}

// readLoad fills st.Running and st.Queued from the cluster, as
// Options.MonitorType says, or st.LoadErr.
func (s *Server) readLoad(c *cluster, st *clusterState, deadline time.Time) {
	var path string
	switch s.opts.MonitorType {
	case MonitorInfo:
		return
	case MonitorQueryList:
		path = "/v1/query"
	default:
		path = metricsLoadPath
	}
	status, body, err := s.probe(c, path, deadline)
	switch {
	case err != nil:
		st.LoadErr = err.Error()
		return
	case status != fasthttp.StatusOK:
		st.LoadErr = fmt.Sprintf("%s answered HTTP %d", strings.SplitN(path, "?", 2)[0], status)
		return
	}
	if s.opts.MonitorType == MonitorQueryList {
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

// markDown records that a connection to c failed, so routing avoids it
// until the monitor finds it up again or markDownFor has passed.
func (c *cluster) markDown(err error) {
	now := time.Now()
	c.state.Store(&clusterState{Checked: now, Err: err.Error(), Until: now.Add(markDownFor)})
}

// probe GETs path on c with the monitor's identity, by deadline.
func (s *Server) probe(c *cluster, path string, deadline time.Time) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.url + path)
	req.Header.SetHost(c.host)
	req.Header.Set("X-Trino-User", s.opts.MonitorUser)
	resp.StreamBody = false
	if err := c.probeClient.DoDeadline(req, resp, deadline); err != nil {
		return 0, nil, err
	}
	return resp.StatusCode(), append([]byte(nil), resp.Body()...), nil
}

// healthy reports the last known health; a cluster never checked counts as
// healthy (the monitor may be off).
func (c *cluster) healthy() bool {
	st := c.state.Load()
	return st == nil || st.Healthy || (!st.Until.IsZero() && time.Now().After(st.Until))
}

// load is the cluster's running + queued queries at the last check plus the
// queries this proxy sent since, so a burst does not all land on one
// cluster between two checks.
func (c *cluster) load() int64 {
	n := c.sent.Load()
	if st := c.state.Load(); st != nil {
		n += int64(st.Running + st.Queued)
	}
	return n
}

// clusterRuntime is the mutable part of a cluster.
type clusterRuntime struct {
	state   atomic.Pointer[clusterState]
	sent    atomic.Int64
	probing atomic.Bool // a health check is running
}

// errMonitorStopped fails the probes of a monitor that is stopping.
var errMonitorStopped = errors.New("proxy: health monitor stopped")

// connSet tracks the monitor's connections so that stopping the monitor
// can end a probe that waits on a cluster that never answers (fasthttp's
// client takes no context).
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

// dial is the probe clients' fasthttp.DialFunc.
func (cs *connSet) dial(addr string) (net.Conn, error) {
	conn, err := fasthttp.DialTimeout(addr, probeTimeout)
	if err != nil {
		return nil, err
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		conn.Close()
		return nil, errMonitorStopped
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
