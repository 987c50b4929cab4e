package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// savedQuery is a waiting query as any replica can submit it: the client's
// request and the routing decision.
type savedQuery struct {
	Header    []byte // the request line and headers, as fasthttp writes them
	Body      []byte
	Decision  routing.Decision
	Cluster   string
	Estimate  estimate.Estimate
	Estimated bool
	TookNanos int64
	Identity  frontdoor.Identity
}

// saveQuery seals the waiting query for the store: it holds the caller's
// credentials (Authorization, cookies) and SQL, and with admission.redis it
// sits in Redis until a replica submits it, so it is encrypted (AES-256-GCM
// under a key derived from the route secret, which every replica shares)
// and bound to its admission id.
func (s *Server) saveQuery(id string, r *fasthttp.Request, d *decision) []byte {
	q := savedQuery{Header: r.Header.Header(), Body: r.Body(), Decision: d.Decision,
		Cluster: d.cluster.name, Estimate: d.est, Estimated: d.estimate, TookNanos: int64(d.took), Identity: d.identity}
	b, err := json.Marshal(q)
	if err != nil {
		// A number JSON cannot hold (NaN, ±Inf) in the estimate: the query
		// still runs, placed as decided, without its estimate's details.
		s.log.Warn("admission: the queued query's estimate cannot be saved; queued without it", "error", err)
		q.Estimate, q.Estimated = estimate.Estimate{}, false
		b, _ = json.Marshal(q)
	}
	return s.signer.Seal(b, []byte(id))
}

// restoreQuery rebuilds a saved query into req; it fails when the payload
// does not open under this replica's route secret, is corrupt, or names a
// cluster this replica does not have.
func (s *Server) restoreQuery(id string, payload []byte, req *fasthttp.Request) (*decision, error) {
	plain, err := s.signer.Open(payload, []byte(id))
	if err != nil {
		return nil, err
	}
	var q savedQuery
	if err := json.Unmarshal(plain, &q); err != nil {
		return nil, fmt.Errorf("proxy: saved query: %w", err)
	}
	c, ok := s.byName[q.Cluster]
	if !ok {
		return nil, fmt.Errorf("%w: saved query for cluster %q", ErrUnknownCluster, q.Cluster)
	}
	req.Reset()
	if err := req.Header.Read(bufio.NewReader(bytes.NewReader(q.Header))); err != nil {
		return nil, fmt.Errorf("proxy: saved query's header: %w", err)
	}
	req.SetBodyRaw(q.Body)
	return &decision{Decision: q.Decision, cluster: c, est: q.Estimate, estimate: q.Estimated,
		took: time.Duration(q.TookNanos), identity: q.Identity}, nil
}

// admissionIdentity is who a query's budgets and rate limits are charged
// to, the one place that says so: the decision's identity (identity.go:
// the verified user with identity: verified, else X-Trino-User) when the
// query has been placed; before that (the rate limits, which run before
// any EXPLAIN) the identity the request claims.
func (s *Server) admissionIdentity(h *fasthttp.RequestHeader, d *decision) (user, group string) {
	if d != nil {
		user = d.identity.User
	} else {
		user = s.ident.Claimed(h).User
	}
	return user, s.opts.Admission.GroupOf(user, h)
}

// cancelByClient is why a queued query its client deleted was cancelled
// (admission.Store.Cancel), as its client reads it; the console's
// operator cancel gives its own reason.
const cancelByClient = "canceled"

// releaseSlot frees an admitted query's slot by the proxy's id (a failed
// submission); a store error leaves it to the lease.
func (s *Server) releaseSlot(id string) {
	c, cancel := admission.StoreCtx()
	_ = s.admit.Release(c, id)
	cancel()
}

// finishQuery frees the slot of an upstream query (its last page, a
// cancel, a lost query); a store error leaves it to the lease.
func (s *Server) finishQuery(upstreamID string) bool {
	c, cancel := admission.StoreCtx()
	defer cancel()
	freed, _ := s.admit.Finish(c, upstreamID)
	return freed
}

// The proxy's own queued-query URIs: routed like any other, under the
// reserved cluster name localCluster, which configured clusters cannot use
// because it is not a valid config name.
const (
	localCluster = "prestroid~local"
	queuedPrefix = "/v1/prestroid/queued/"
)

// admitOrQueue runs admission for a placed query. It returns the admission
// id and true when the query may be forwarded now; otherwise it has
// answered the client.
func (s *Server) admitOrQueue(ctx *fasthttp.RequestCtx, d *decision) (string, bool) {
	user, group := s.admissionIdentity(&ctx.Request.Header, d)
	// The request's size is known before any copy, so an oversized one is
	// refused uncopied, and only when it would have to wait (the store
	// decides).
	e := &admission.Entry{ID: admission.NewID(), User: user, Group: group,
		Bytes: int64(len(ctx.Request.Header.Header()) + len(ctx.Request.Body()))}
	// The class whose clusters hold it: that of the cluster chosen now (a
	// failover at submission does not move its charge).
	e.Class = d.cluster.class
	if d.estimate {
		e.CPU = d.est.CPUSeconds
		if m := d.est.PeakMemory; m.Known() {
			e.Memory = m.Median
		}
	}
	// The request must outlive this handler if the query waits.
	e.Payload = func() []byte {
		d.Queued = true
		return s.saveQuery(e.ID, &ctx.Request, d)
	}
	c, cancel := admission.StoreCtx()
	now, err := s.admit.Enter(c, e)
	cancel()
	var full admission.ErrQueueFull
	var big admission.ErrQueueBytes
	switch {
	case errors.As(err, &full), errors.As(err, &big):
		s.trinoError(ctx, "PRESTROID_QUEUE_FULL", "INSUFFICIENT_RESOURCES", "prestroid: "+err.Error())
		return "", false
	case err != nil:
		// The store failed and had no fallback: fail open, as the
		// estimator does.
		s.log.Warn("admission store failed; query admitted without a budget", "error", err)
		return "", true
	case now:
		d.Queued = false
		return e.ID, true
	}
	s.metrics.Queued.Inc()
	s.queuedPage(ctx, e.ID, time.Now(), 1)
	decisionHeaders(&ctx.Response.Header, d)
	return "", false
}

// queuedPage answers with a QUEUED QueryResults whose nextUri polls the
// proxy.
func (s *Server) queuedPage(ctx *fasthttp.RequestCtx, id string, enqueued time.Time, token int) {
	base := s.publicBase(ctx)
	next := base + s.signer.RoutedPath(localCluster, queuedPrefix+id+"/"+strconv.Itoa(token))
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(protocol.QueuedPage(id, base+"/ui/", next, time.Since(enqueued)))
}

// queuedPoll serves GET/DELETE on the proxy's own queued URIs.
func (s *Server) queuedPoll(ctx *fasthttp.RequestCtx, method, target string) {
	rest := strings.TrimPrefix(target, queuedPrefix)
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		s.fail(ctx, ErrNotFound, false)
		return
	}
	id := rest[:i]
	token, _ := strconv.Atoi(rest[i+1:])
	if s.admit == nil {
		s.lostQueued(ctx)
		return
	}
	if method == fasthttp.MethodDelete {
		c, cancel := admission.StoreCtx()
		_, _ = s.admit.Cancel(c, id, cancelByClient)
		cancel()
		ctx.SetStatusCode(fasthttp.StatusNoContent)
		return
	}
	st, err := s.admit.Wait(context.Background(), id, time.Second)
	if err != nil {
		s.storeUnavailable(ctx, id, token)
		return
	}
	switch st.State {
	case admission.StateUnknown:
		s.lostQueued(ctx)
		return
	case admission.StateQueued:
		s.queuedPage(ctx, id, st.Enqueued, token+1)
		return
	case admission.StateFailed:
		s.metrics.QueueWait.Observe(time.Since(st.Enqueued).Seconds())
		s.trinoError(ctx, "PRESTROID_QUEUE_TIMEOUT", "INSUFFICIENT_RESOURCES", "prestroid: query not run: "+st.Why)
		return
	case admission.StateCanceled:
		// Trino's own name for a query cancelled before it finished.
		s.trinoError(ctx, "USER_CANCELED", "USER_ERROR", "prestroid: query not run: "+st.Why)
		return
	}
	c, cancel := admission.StoreCtx()
	payload, st, err := s.admit.Take(c, id)
	cancel()
	switch {
	case err != nil:
		s.storeUnavailable(ctx, id, token)
		return
	case payload == nil && st.State == admission.StateQueued:
		s.queuedPage(ctx, id, st.Enqueued, token+1)
		return
	case payload == nil:
		// Already submitted by an earlier poll (a retried request): the
		// client holds Trino's URIs by now.
		s.trinoError(ctx, "PRESTROID_QUEUE_STALE", "USER_ERROR", "prestroid: this queued URI was already answered")
		return
	}
	s.metrics.QueueWait.Observe(time.Since(st.Enqueued).Seconds())
	// Submit now: replay the saved POST as this request.
	d, err := s.restoreQuery(id, payload, &ctx.Request)
	if err != nil {
		s.releaseSlot(id)
		s.log.Warn("queued query could not be restored", "error", err)
		s.trinoError(ctx, "PRESTROID_QUEUE_LOST", "EXTERNAL", "prestroid: the queued query could not be restored on this proxy; it never reached Trino; submit it again")
		return
	}
	s.submit(ctx, id, d)
}

// storeUnavailable answers a queued poll while the admission store cannot
// be reached: the query stays queued (the client polls again) until its
// wait runs out.
func (s *Server) storeUnavailable(ctx *fasthttp.RequestCtx, id string, token int) {
	enq := admission.IDTime(id)
	if !enq.IsZero() && time.Since(enq) > s.maxWait() {
		s.trinoError(ctx, "PRESTROID_QUEUE_TIMEOUT", "INSUFFICIENT_RESOURCES",
			fmt.Sprintf("prestroid: query not run: waited more than %s in the proxy's admission queue (the shared queue is unreachable)", s.maxWait()))
		return
	}
	time.Sleep(time.Second) // as a long poll would
	s.queuedPage(ctx, id, enq, token+1)
}

func (s *Server) maxWait() time.Duration {
	if o := s.opts.Admission; o != nil && o.MaxWait > 0 {
		return o.MaxWait
	}
	return 10 * time.Minute
}

// lostQueued answers a poll for a queued query this proxy does not know:
// it was queued in a proxy process that has since restarted, or in
// another replica's own queue while that one could not reach the shared
// Redis (admission.redis_down: local), and this poll came here.
func (s *Server) lostQueued(ctx *fasthttp.RequestCtx) {
	s.trinoError(ctx, "PRESTROID_QUEUE_LOST", "EXTERNAL",
		"prestroid: this query was waiting in a proxy's admission queue that no longer holds it (the proxy restarted, or queued it on its own while Redis was unreachable); it never reached Trino; submit it again")
}

// submit forwards an admitted query.
func (s *Server) submit(ctx *fasthttp.RequestCtx, id string, d *decision) {
	d.cluster.CountSent()
	d.admitID = id
	s.forwardPlaced(ctx, d.cluster, "/v1/statement", modeStatementPOST, d)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		s.releaseSlot(id)
	}
}

// runSweeper runs admission's sweep until ctx ends.
func (s *Server) runSweeper(ctx context.Context) {
	tk := time.NewTicker(5 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tk.C:
			c, cancel := admission.StoreCtx()
			if err := s.admit.Sweep(c, now); err != nil {
				s.log.Debug("admission sweep failed", "error", err)
			}
			cancel()
		}
	}
}
