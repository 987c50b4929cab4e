package proxy

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/valyala/fasthttp"
)

// Health endpoints for probes (Kubernetes, load balancers):
//
//   - GET /healthz (liveness): 200 whenever the process answers HTTP. It
//     checks nothing else on purpose: a liveness failure restarts the
//     process, and no dependency (a cluster, Redis) is fixed by that.
//   - GET /readyz (readiness): 200 when this replica should receive
//     traffic, else 503; the JSON body names each check. Ready means: the
//     configuration and the estimator's model were loaded (the server
//     exists only then: serve wires both before it listens), the client
//     listener serves, the server is not shutting down, and at least one
//     cluster is healthy as the monitor checked it (its first round runs
//     at start, so a new replica turns ready once it has seen a cluster
//     answer /v1/info; with the monitor off, a cluster counts as healthy
//     unless a connection to it just failed). With every cluster down
//     every replica turns unready: a rolling deploy then waits rather
//     than swap working replicas for ones that cannot route, and a load
//     balancer in front can fail over to another site. The shared
//     admission store (Redis) is reported, not required: with it down a
//     replica still admits (admission.redis_down).
//
// Both answer on the client listener and on the admin listener, before
// the Host check and the admin token (a kubelet sends neither), and are
// never forwarded to a cluster. HEAD works as GET without the body.

// healthState is what the readiness check reads besides the clusters.
type healthState struct {
	serving  atomic.Bool // Serve was called: the client listener accepts
	stopping atomic.Bool // Shutdown was called
}

// isHealth reports whether method and path name a health endpoint.
func isHealth(method, path string) bool {
	return (path == "/healthz" || path == "/readyz") &&
		(method == fasthttp.MethodGet || method == fasthttp.MethodHead)
}

// healthCheck is one line of /readyz's answer.
type healthCheck struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// readiness is /readyz's answer.
type readiness struct {
	Status string        `json:"status"` // "ready" or "not ready"
	Checks []healthCheck `json:"checks"`
}

// serveHealth answers /healthz and /readyz.
func (s *Server) serveHealth(ctx *fasthttp.RequestCtx) {
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if string(ctx.Path()) == "/healthz" {
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBodyString("ok\n")
		return
	}
	r := s.readiness()
	status := fasthttp.StatusOK
	if r.Status != "ready" {
		status = fasthttp.StatusServiceUnavailable
	}
	body, _ := json.Marshal(r)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(append(body, '\n'))
}

// readiness runs the readiness checks (see the comment at the top).
func (s *Server) readiness() readiness {
	var checks []healthCheck
	add := func(name string, ok bool, detail string) {
		checks = append(checks, healthCheck{Name: name, OK: ok, Detail: detail})
	}
	add("config", true, strconv.Itoa(len(s.clusters))+" clusters")
	if s.opts.Estimator != nil {
		add("estimator", true, "model loaded")
	} else {
		add("estimator", true, "none: queries are not estimated")
	}
	if s.health.serving.Load() {
		add("listener", true, "serving")
	} else {
		add("listener", false, "the client listener is not serving yet")
	}
	if s.health.stopping.Load() {
		add("shutdown", false, "shutting down")
	}
	var up, unchecked []string
	for _, c := range s.clusters {
		st := c.State()
		switch {
		case st == nil && s.opts.MonitorInterval > 0:
			unchecked = append(unchecked, c.name)
		case c.Healthy():
			up = append(up, c.name)
		}
	}
	switch {
	case len(up) > 0:
		add("clusters", true, strconv.Itoa(len(up))+" of "+strconv.Itoa(len(s.clusters))+" healthy: "+strings.Join(up, ","))
	case len(unchecked) > 0:
		add("clusters", false, "not checked yet: "+strings.Join(unchecked, ","))
	default:
		add("clusters", false, "no healthy cluster")
	}
	if s.admit != nil && s.admit.Kind() == "redis" {
		if s.admit.Down() {
			add("admission_store", true, "redis unreachable: each replica admits on its own (admission.redis_down)")
		} else {
			add("admission_store", true, "redis")
		}
	}
	r := readiness{Status: "ready", Checks: checks}
	for _, c := range checks {
		if !c.OK {
			r.Status = "not ready"
		}
	}
	return r
}
