package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/usage"
)

// newUsage makes the cost accounting o asks for (none when o.Usage is
// nil) and registers its metrics.
func (s *Server) newUsage(o Options) error {
	if o.Usage == nil {
		return nil
	}
	uo := *o.Usage
	uo.Logger, uo.Fetch = s.log, s.fetchQueryInfo
	uo.GroupOf = func(user string) string { return s.opts.Admission.GroupOf(user, noHeader{}) }
	r, err := usage.New(uo)
	if err != nil {
		return err
	}
	for _, c := range r.Collectors() {
		if err := s.registry.Register(c); err != nil {
			return err
		}
	}
	s.usage = r
	return nil
}

// fetchQueryInfo is GET /v1/query/{id} on cluster, through the
// monitor's client and as its user (routing.monitor_user), for settling
// a failed query's account (usage/settle.go).
func (s *Server) fetchQueryInfo(ctx context.Context, cluster, queryID string) ([]byte, error) {
	c := s.byName[cluster]
	if c == nil || !protocol.ValidQueryID(queryID) {
		return nil, fmt.Errorf("proxy: no query %q on cluster %q", queryID, cluster)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	status, body, err := prober{c, s.opts.MonitorUser}.Probe("/v1/query/"+queryID, deadline)
	if err != nil {
		return nil, err
	}
	if status != fasthttp.StatusOK {
		return nil, fmt.Errorf("proxy: GET /v1/query/%s on %s: status %d", queryID, cluster, status)
	}
	return body, nil
}

// usageAPI is GET /prestroid/api/usage for the console; nil when
// accounting is off.
func (s *Server) usageAPI() fasthttp.RequestHandler {
	if s.usage == nil {
		return nil
	}
	return s.usage.ServeAPI
}

// noHeader is the request headers of a query another replica placed:
// none (a group header is not known here).
type noHeader struct{}

func (noHeader) Peek(string) []byte { return nil }

// recordUsage accounts a query whose last page passed here: what
// Trino's final statistics say it spent, whatever its state (a failed
// query spent CPU too). c.Untracked is set when another replica placed it
// (its identity is not known here); the usage package then reads it,
// and the final figures of a failed query, from the cluster (usage/settle.go),
// and accounts each query once. The estimator's own EXPLAINs never pass
// here.
func (s *Server) recordUsage(c *Completed) {
	if s.usage == nil {
		return
	}
	st := &c.Stats
	q := usage.Query{Cluster: c.Cluster, QueryID: c.QueryID, Untracked: c.Untracked, User: c.User, Group: c.Group, Source: c.Source, State: c.State, Finished: c.Finished,
		RolledUp: st.RolledUp(), CPUSeconds: float64(st.CPUTimeMillis) / 1000, WallSeconds: float64(st.WallTimeMillis) / 1000,
		ElapsedSeconds: float64(st.ElapsedTimeMillis) / 1000, PeakMemoryBytes: st.PeakMemoryBytes}
	if e := &c.Estimate; c.Estimated && e.Estimated {
		q.Predicted, q.PredictedCPUSeconds = true, e.CPUSeconds
		mem, el := e.Of(estimate.TargetMemory), e.Of(estimate.TargetElapsed)
		q.PredictedElapsedSeconds = el.Median
		if mem.Median > 0 && el.Median > 0 {
			q.PredictedMemoryGBSeconds = mem.Median / 1e9 * el.Median
		}
	}
	s.usage.Record(q)
}
