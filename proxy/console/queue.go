package console

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/fasthttp"
)

// The queue view: the admission queue's waiting queries, the budgets
// holding each, and the operator's cancel.

type queueView struct {
	Enabled  bool               `json:"enabled"` // admission control is on
	Store    string             `json:"store,omitempty"`
	Queued   int                `json:"queued"`
	InFlight int                `json:"in_flight"`
	Limits   map[string]float64 `json:"limits,omitempty"` // the budgets set, by configuration key
	Queries  []queuedView       `json:"queries"`
	Error    string             `json:"error,omitempty"` // the store did not (fully) answer
}

type queuedView struct {
	ID            string    `json:"id"`
	User          string    `json:"user"`
	Group         string    `json:"group"`
	CPUSeconds    float64   `json:"cpu_seconds"` // its estimate (0: not estimated)
	Enqueued      time.Time `json:"enqueued"`
	WaitedSeconds float64   `json:"waited_seconds"`
	Position      int       `json:"position"` // earlier queries of the same user ahead of it
	HeldBy        []hold    `json:"held_by"`  // the budgets it does not fit; empty: it is next to go
}

// hold is one budget a waiting query does not fit.
type hold struct {
	Budget   string  `json:"budget"`    // its configuration key, e.g. admission.user_max_queries
	Scope    string  `json:"scope"`     // global, user NAME or group NAME
	InFlight float64 `json:"in_flight"` // queries, or predicted CPU seconds, in flight in the scope
	Limit    float64 `json:"limit"`
	Needs    float64 `json:"needs"` // what the query would add: 1 query, or its CPU seconds
}

// queueMax bounds the queries the queue view lists.
const queueMax = 500

func (h *Handler) queue(now time.Time) queueView {
	out := queueView{Queries: []queuedView{}}
	st := h.opts.Store
	if st == nil {
		return out
	}
	o := h.opts.Budgets
	out.Enabled, out.Store = true, st.Kind()
	out.Limits = map[string]float64{}
	for key, v := range map[string]float64{"admission.max_queries": float64(o.MaxQueries), "admission.max_cpu_seconds": o.MaxCPUSeconds,
		"admission.user_max_queries": float64(o.UserMaxQueries), "admission.user_max_cpu_seconds": o.UserMaxCPUSeconds,
		"admission.group_max_queries": float64(o.GroupMaxQueries), "admission.group_max_cpu_seconds": o.GroupMaxCPUSeconds} {
		if v > 0 {
			out.Limits[key] = v
		}
	}
	c, cancel := admission.StoreCtx()
	defer cancel()
	var errs []string
	q, in, err := st.Lengths(c)
	if err != nil {
		errs = append(errs, err.Error())
	}
	out.Queued, out.InFlight = q, in
	list, err := st.Queue(c, queueMax)
	if err != nil {
		errs = append(errs, err.Error())
	}
	out.Error = strings.Join(errs, "; ")
	slices.SortStableFunc(list, func(a, b admission.Queued) int { return a.Enqueued.Compare(b.Enqueued) })
	for _, w := range list {
		out.Queries = append(out.Queries, queuedView{ID: w.ID, User: w.User, Group: w.Group, CPUSeconds: finite(w.CPU),
			Enqueued: w.Enqueued, WaitedSeconds: max(now.Sub(w.Enqueued).Seconds(), 0), Position: w.Position, HeldBy: heldBy(o, w)})
	}
	return out
}

// heldBy lists the budgets q does not fit now, by the stores' own rule
// (memStore.fits, fits in lua/admission.lua): a scope with nothing in
// flight admits one query whatever its size.
func heldBy(o *admission.Options, q admission.Queued) []hold {
	scopes := [3]struct {
		scope, key string
		n          int
		cpu        float64
	}{
		{"global", "admission.", o.MaxQueries, o.MaxCPUSeconds},
		{"user " + q.User, "admission.user_", o.UserMaxQueries, o.UserMaxCPUSeconds},
		{"group " + q.Group, "admission.group_", o.GroupMaxQueries, o.GroupMaxCPUSeconds},
	}
	out := []hold{}
	for i, sc := range scopes {
		u := q.Use[i]
		if u.Queries == 0 {
			continue
		}
		if sc.n > 0 && u.Queries+1 > sc.n {
			out = append(out, hold{Budget: sc.key + "max_queries", Scope: sc.scope, InFlight: float64(u.Queries), Limit: float64(sc.n), Needs: 1})
		}
		if sc.cpu > 0 && u.CPU+q.CPU > sc.cpu {
			out = append(out, hold{Budget: sc.key + "max_cpu_seconds", Scope: sc.scope, InFlight: finite(u.CPU), Limit: sc.cpu, Needs: finite(q.CPU)})
		}
	}
	return out
}

// cancelReason is why a query the console removed was cancelled
// (admission.Store.Cancel), as its client reads it.
const cancelReason = "canceled by an operator (prestroid console)"

// cancel removes a waiting query: POST {"id": ID} as JSON (a form cannot
// send that content type across origins without a preflight this proxy
// never answers).
func (h *Handler) cancel(ctx *fasthttp.RequestCtx) {
	if ct := string(ctx.Request.Header.ContentType()); !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		h.error(ctx, fasthttp.StatusUnsupportedMediaType, "send the id as application/json")
		return
	}
	var req struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(ctx.Request.Body(), &req); err != nil || !protocol.ValidQueryID(req.ID) {
		h.error(ctx, fasthttp.StatusBadRequest, `want {"id": QUEUED_QUERY_ID}`)
		return
	}
	if h.opts.Store == nil {
		h.error(ctx, fasthttp.StatusNotFound, "admission control is off: nothing waits")
		return
	}
	c, cancel := admission.StoreCtx()
	ok, err := h.opts.Store.Cancel(c, req.ID, cancelReason)
	cancel()
	switch {
	case err != nil:
		h.log.Warn("console: cancelling a queued query failed", "query", req.ID, "error", err)
		h.error(ctx, fasthttp.StatusServiceUnavailable, "the admission store did not answer: "+err.Error())
	case !ok:
		h.error(ctx, fasthttp.StatusNotFound, "query "+strconv.Quote(req.ID)+" is not waiting (admitted, finished or unknown)")
	default:
		h.log.Info("console: queued query cancelled by an operator", "query", req.ID)
		h.writeJSON(ctx, map[string]any{"id": req.ID, "canceled": true})
	}
}
