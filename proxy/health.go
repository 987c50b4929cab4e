package proxy

import (
	"context"
	"encoding/json"
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
	// Until, when set, ends a failed connection's verdict (markDown): the
	// cluster counts as healthy again after it unless the monitor says
	// otherwise first, so it is retried even with the monitor off.
	Until time.Time
}

// monitor polls every cluster's /v1/info (health) and /v1/query (running
// and queued queries, from the cluster's own bookkeeping) every interval.
// It recovers from errors, logs state changes, and stops on ctx.
func (s *Server) monitor(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for _, c := range s.clusters {
			s.checkCluster(c)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Server) checkCluster(c *cluster) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("health check panicked", "cluster", c.name, "panic", r)
		}
	}()
	st := &clusterState{Checked: time.Now()}
	var info struct {
		Starting bool `json:"starting"`
	}
	if status, body, err := s.probe(c, "/v1/info"); err != nil {
		st.Err = err.Error()
	} else if status != 200 || json.Unmarshal(body, &info) != nil {
		st.Err = "bad /v1/info answer"
	} else if info.Starting {
		st.Err = "starting"
	} else {
		st.Healthy = true
	}
	if st.Healthy {
		if status, body, err := s.probe(c, "/v1/query"); err == nil && status == 200 {
			var qs []struct {
				State string `json:"state"`
			}
			if json.Unmarshal(body, &qs) == nil {
				for _, q := range qs {
					switch q.State {
					case "QUEUED", "WAITING_FOR_RESOURCES", "DISPATCHING":
						st.Queued++
					case "PLANNING", "STARTING", "RUNNING", "FINISHING":
						st.Running++
					}
				}
			}
		}
	}
	old := c.state.Swap(st)
	if old == nil || old.Healthy != st.Healthy {
		s.log.Info("cluster health", "cluster", c.name, "healthy", st.Healthy, "reason", st.Err)
	}
	c.sent.Store(0)
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

// probe GETs path on c with the monitor's identity.
func (s *Server) probe(c *cluster, path string) (int, []byte, error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.url + path)
	req.Header.SetHost(c.host)
	req.Header.Set("X-Trino-User", s.opts.MonitorUser)
	resp.StreamBody = false
	if err := c.probeClient.DoTimeout(req, resp, 5*time.Second); err != nil {
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
	state atomic.Pointer[clusterState]
	sent  atomic.Int64
}
