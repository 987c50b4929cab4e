package proxy

import (
	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/usage"
)

// newUsage makes the cost accounting o asks for (none when o.Usage is
// nil) and registers its metrics.
func (s *Server) newUsage(o Options) error {
	if o.Usage == nil {
		return nil
	}
	uo := *o.Usage
	uo.Logger = s.log
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

// usageAPI is GET /prestroid/api/usage for the console; nil when
// accounting is off.
func (s *Server) usageAPI() fasthttp.RequestHandler {
	if s.usage == nil {
		return nil
	}
	return s.usage.ServeAPI
}

// recordUsage accounts a query this replica placed and saw end: what
// Trino's final statistics say it spent, whatever its state (a failed
// query spent CPU too). A final page whose statistics are not rolled up
// (protocol.PageStats.RolledUp) is counted as it reads and marked
// incomplete; the estimator's own EXPLAINs never pass here.
func (s *Server) recordUsage(c *Completed) {
	if s.usage == nil {
		return
	}
	st := &c.Stats
	q := usage.Query{User: c.User, Group: c.Group, Source: c.Source, State: c.State, Finished: c.Finished,
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
