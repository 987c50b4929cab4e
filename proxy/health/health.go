// Package health answers the proxy's probes: GET /healthz (liveness) and
// GET /readyz (readiness), from a State the server fills at each probe.
//
// The endpoints (Kubernetes, load balancers):
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
package health

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// Is reports whether method and path are a probe's.
func Is(method, path string) bool {
	return (path == "/healthz" || path == "/readyz") &&
		(method == fasthttp.MethodGet || method == fasthttp.MethodHead)
}

// Check is one line of the readiness answer.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Readiness is /readyz's body.
type Readiness struct {
	Status string  `json:"status"` // "ready" or "not ready"
	Checks []Check `json:"checks"`
}

// State is what readiness is decided from.
type State struct {
	Clusters  int      // configured clusters
	Estimator bool     // an estimator is wired
	Serving   bool     // the client listener serves
	Stopping  bool     // shutting down
	Healthy   []string // clusters the monitor (or the last connection) found up
	Unchecked []string // clusters the monitor has not checked yet (monitor on)
	// Store is the admission store's kind when it is shared ("redis"),
	// "" otherwise; StoreDown says it is unreachable.
	Store     string
	StoreDown bool
}

// Ready decides readiness from st.
func Ready(st State) Readiness {
	var checks []Check
	add := func(name string, ok bool, detail string) {
		checks = append(checks, Check{Name: name, OK: ok, Detail: detail})
	}
	add("config", true, strconv.Itoa(st.Clusters)+" clusters")
	if st.Estimator {
		add("estimator", true, "model loaded")
	} else {
		add("estimator", true, "none: queries are not estimated")
	}
	if st.Serving {
		add("listener", true, "serving")
	} else {
		add("listener", false, "the client listener is not serving yet")
	}
	if st.Stopping {
		add("shutdown", false, "shutting down")
	}
	switch {
	case len(st.Healthy) > 0:
		add("clusters", true, strconv.Itoa(len(st.Healthy))+" of "+strconv.Itoa(st.Clusters)+" healthy: "+strings.Join(st.Healthy, ","))
	case len(st.Unchecked) > 0:
		add("clusters", false, "not checked yet: "+strings.Join(st.Unchecked, ","))
	default:
		add("clusters", false, "no healthy cluster")
	}
	if st.Store == "redis" {
		if st.StoreDown {
			add("admission_store", true, "redis unreachable: each replica admits on its own (admission.redis_down)")
		} else {
			add("admission_store", true, "redis")
		}
	}
	r := Readiness{Status: "ready", Checks: checks}
	for _, c := range checks {
		if !c.OK {
			r.Status = "not ready"
		}
	}
	return r
}

// Serve answers a probe (Is): /healthz with "ok", /readyz with ready()
// as JSON, 503 when not ready.
func Serve(ctx *fasthttp.RequestCtx, ready func() Readiness) {
	ctx.Response.Header.Set("Cache-Control", "no-store")
	if string(ctx.Path()) == "/healthz" {
		ctx.SetContentType("text/plain; charset=utf-8")
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetBodyString("ok\n")
		return
	}
	r := ready()
	status := fasthttp.StatusOK
	if r.Status != "ready" {
		status = fasthttp.StatusServiceUnavailable
	}
	body, _ := json.Marshal(r)
	ctx.SetContentType("application/json")
	ctx.SetStatusCode(status)
	ctx.SetBody(append(body, '\n'))
}
