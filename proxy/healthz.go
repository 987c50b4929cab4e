package proxy

import (
	"sync/atomic"

	"github.com/prestroid/prestroid/proxy/health"
	"github.com/valyala/fasthttp"
)

// The probes' answers are package health's; the server tells it what it
// sees (readiness).

// healthState is what the readiness check reads besides the clusters.
type healthState struct {
	serving  atomic.Bool // Serve was called: the client listener accepts
	stopping atomic.Bool // Shutdown was called
}

func (s *Server) serveHealth(ctx *fasthttp.RequestCtx) { health.Serve(ctx, s.readiness) }

// readiness is the server's state as package health decides from it.
func (s *Server) readiness() health.Readiness {
	st := health.State{Clusters: len(s.clusters), Estimator: s.opts.Estimator != nil,
		Serving: s.health.serving.Load(), Stopping: s.health.stopping.Load()}
	for _, c := range s.clusters {
		switch {
		case c.State() == nil && s.opts.MonitorInterval > 0:
			st.Unchecked = append(st.Unchecked, c.name)
		case c.Healthy():
			st.Healthy = append(st.Healthy, c.name)
		}
	}
	if s.admit != nil && s.admit.Kind() == "redis" {
		st.Store, st.StoreDown = "redis", s.admit.Down()
	}
	return health.Ready(st)
}
