package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// decision is how one query was placed: the policy's Decision and what
// the glue around it needs.
type decision struct {
	routing.Decision
	cluster  *cluster
	est      estimate.Estimate
	estimate bool   // est holds a model estimate
	admitID  string // the admission id, when admission control admitted it
	// identity is who the query counts against (identity.go): admission,
	// rules and metrics key on identity.User.
	identity frontdoor.Identity
	// dialect is the client's (protocol.Dialect): the query goes only to
	// a cluster that serves it.
	dialect dialect.Engine
	took    time.Duration // deciding, estimate included (Server-Timing)
}

// leastLoaded returns the healthy cluster of class (all clusters when class
// is "") that serves dialect e with the least load, or nil.
func (s *Server) leastLoaded(class string, e dialect.Engine) *cluster {
	var best *cluster
	for _, c := range s.clusters {
		if (class != "" && c.class != class) || !c.Healthy() || !c.serves(e) {
			continue
		}
		if best == nil || c.Load() < best.Load() {
			best = c
		}
	}
	return best
}

// defaultCluster is the first configured cluster, or when the monitor saw
// it down, the first healthy one in configuration order (all clusters serve
// the same catalogs): it plans queries (EXPLAIN) and serves those that are
// not routed by cost, so a dead default cluster does not stop the proxy.
func (s *Server) defaultCluster() *cluster {
	return s.defaultFor(dialect.Unknown)
}

// defaultFor is defaultCluster among the clusters that serve dialect e:
// each engine has its own default, the first of its clusters. It is nil
// when no cluster serves e (ErrEngineMismatch).
func (s *Server) defaultFor(e dialect.Engine) *cluster {
	var first *cluster
	for _, c := range s.clusters {
		if !c.serves(e) {
			continue
		}
		if c.Healthy() {
			return c
		}
		if first == nil {
			first = c
		}
	}
	return first
}

// failover picks another cluster for a new query after a dial to failed
// did not connect: a healthy one of the decision's class, else the default
// cluster; nil when only failed itself is left. failed must already be
// marked down.
// Only a cluster that serves the query's dialect is another.
func (s *Server) failover(d *decision, failed *cluster) *cluster {
	if d.Class != "" {
		if c := s.leastLoaded(d.Class, d.dialect); c != nil && c != failed {
			return c
		}
	}
	if c := s.defaultFor(d.dialect); c != nil && c != failed && c.Healthy() {
		return c
	}
	return nil
}

// decide places a new query. It is the glue between fasthttp and the
// policy (Options.Selector): transactions stick to their cluster without
// asking the policy; otherwise the query is estimated as the caller within
// the budget (an estimator failure is an Outcome, which the policy turns
// into fail-open) and the policy chooses from plain values.
//
// A query goes only to a cluster that serves the client's dialect
// (cluster.serves): the policy chooses among those clusters, with that
// engine's default, and a client no cluster serves is refused
// (ErrEngineMismatch); nothing is ever translated between dialects.
func (s *Server) decide(ctx *fasthttp.RequestCtx) (*decision, error) {
	e := protocol.Dialect(&ctx.Request.Header)
	if name, ok := protocol.TransactionCluster(&ctx.Request.Header); ok {
		c, found := s.byName[name]
		if !found {
			return nil, fmt.Errorf("%w: transaction of unknown cluster %q", ErrBadRequest, name)
		}
		if !c.serves(e) {
			return nil, &mismatchError{client: e, cluster: c.name, engine: c.Engine()}
		}
		// Not estimated (the EXPLAIN would run outside the transaction),
		// but it counts against the budgets as its identity.
		id, err := s.identityOf(ctx, c, estimate.Estimate{}, nil)
		if err != nil {
			return nil, err
		}
		return &decision{Decision: routing.Decision{Kind: routing.KindTransaction, Cluster: name}, cluster: c, identity: id, dialect: e}, nil
	}
	def := s.defaultFor(e)
	if def == nil {
		return nil, &mismatchError{client: e}
	}
	in := s.policyInput(&ctx.Request.Header, def, e)
	var est estimate.Estimate
	var estErr error
	if s.opts.Estimator != nil {
		est, estErr = s.estimate(ctx, def, e)
		err := estErr
		var ae *frontdoor.AuthError
		switch {
		case errors.As(err, &ae):
			// The cluster refused the caller's credentials: identityOf
			// ends the request with Trino's answer.
		case err != nil && errors.Is(err, context.DeadlineExceeded):
			in.Outcome = routing.EstimateTimedOut
			s.metrics.FailOpen.WithLabelValues("timeout").Inc()
		case err != nil && errors.Is(err, ErrEstimatorBusy):
			in.Outcome = routing.EstimateBusy
			s.metrics.FailOpen.WithLabelValues("busy").Inc()
			s.metrics.ExplainSkipped.Inc()
		case err != nil:
			in.Outcome = routing.EstimateFailed
			s.metrics.FailOpen.WithLabelValues("error").Inc()
		case !est.Estimated:
			in.Outcome, in.Estimate = routing.NotEstimated, est
		default:
			in.Outcome, in.Estimate = routing.Estimated, est
		}
		if err != nil && ae == nil {
			s.log.Warn("estimate failed; failing open", "error", err)
			// Only what the estimator wants back with the outcome
			// (Estimate.Learn) survives a failure.
			in.Estimate = estimate.Estimate{Learn: est.Learn}
		}
	}
	id, err := s.identityOf(ctx, def, est, estErr)
	if err != nil {
		return nil, err
	}
	in.User = id.User
	in.Group = s.opts.Admission.GroupOf(id.User, &ctx.Request.Header)
	pd := s.selector.Select(in)
	c, ok := s.byName[pd.Cluster]
	if !ok {
		return nil, fmt.Errorf("proxy: routing policy chose unknown cluster %q", pd.Cluster)
	}
	return &decision{Decision: pd, cluster: c, est: in.Estimate, estimate: in.Outcome == routing.Estimated, identity: id, dialect: e}, nil
}

// clientTags are the request's client tags under dialect e's header name,
// split and trimmed.
func clientTags(h *fasthttp.RequestHeader, e dialect.Engine) []string {
	var out []string
	for _, v := range protocol.PeekAll(h, e, "Client-Tags") {
		for _, t := range strings.Split(string(v), ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, t)
			}
		}
	}
	return out
}

// policyInput is the plain value the policy sees: the clusters that serve
// dialect e, in configuration order, def marked the default. The request
// header is read under e's names here and nothing of it is kept.
func (s *Server) policyInput(h *fasthttp.RequestHeader, def *cluster, e dialect.Engine) routing.Input {
	in := routing.Input{
		User:     string(protocol.Peek(h, e, "User")),
		Source:   string(protocol.Peek(h, e, "Source")),
		Clusters: make([]routing.ClusterState, 0, len(s.clusters)),
	}
	in.Group = s.opts.Admission.GroupOf(in.User, h)
	in.ClientTags = clientTags(h, e)
	for _, c := range s.clusters {
		if c.serves(e) {
			in.Clusters = append(in.Clusters, routing.ClusterState{Name: c.name, Class: c.class, Healthy: c.Healthy(), Load: c.Load(), Default: c == def})
		}
	}
	return in
}

// estimate asks the estimator as the calling user, within the budget,
// planning on def or another healthy cluster of the client's dialect e
// (the estimator spreads and bounds its EXPLAINs over Query.Planners).
func (s *Server) estimate(ctx *fasthttp.RequestCtx, def *cluster, e dialect.Engine) (estimate.Estimate, error) {
	c, cancel := context.WithTimeout(context.Background(), s.opts.EstimateTimeout)
	defer cancel()
	return s.opts.Estimator.Estimate(c, s.query(string(ctx.Request.Body()), protocol.CallerHeaders(&ctx.Request.Header), def, e))
}

// query is the estimator's Query for sql as the caller whose (canonical)
// headers are h, a client of dialect e planned on def and the clusters of
// def's engine.
func (s *Server) query(sql string, h http.Header, def *cluster, e dialect.Engine) Query {
	if e == dialect.Unknown {
		e = def.Engine()
	}
	return Query{SQL: sql, Header: h, Engine: e, Server: def.url, Planners: s.plannersFor(def, e)}
}

// planners are the base URLs of the healthy clusters that may plan
// (Options.Planners; all when empty) and run def's engine, def first when
// it is one; def alone when none of them is healthy (its EXPLAIN then
// fails as it would have).
func (s *Server) planners(def *cluster) []string { return s.plannersFor(def, def.Engine()) }

// plannersFor is planners among the clusters that serve dialect e.
func (s *Server) plannersFor(def *cluster, e dialect.Engine) []string {
	may := func(c *cluster) bool {
		return c.serves(e) && (len(s.opts.Planners) == 0 || slices.Contains(s.opts.Planners, c.name))
	}
	out := make([]string, 0, len(s.clusters))
	if may(def) {
		out = append(out, def.url)
	}
	for _, c := range s.clusters {
		if c != def && c.Healthy() && may(c) {
			out = append(out, c.url)
		}
	}
	if len(out) == 0 {
		out = append(out, def.url)
	}
	return out
}

// clusterByURL names the cluster whose base URL is u ("" when none).
func (s *Server) clusterByURL(u string) string {
	for _, c := range s.clusters {
		if c.url == u {
			return c.name
		}
	}
	return ""
}

// annotate adds the estimate to the upstream request: the engine's own
// X-Trino-Resource-Estimate (X-Presto-Resource-Estimate on a PrestoDB
// cluster; CPU_TIME, for resource-group selectors) unless the client sent
// one and KeepClientEstimate is set, and optionally a client tag naming
// the class. The names are those of the cluster's engine, else of the
// client's dialect (the two match: decide sends no client elsewhere).
func (s *Server) annotate(req *fasthttp.Request, d *decision) {
	if !d.estimate {
		return
	}
	e := d.cluster.Engine()
	if e == dialect.Unknown {
		e = d.dialect
	}
	est, tagsKey := e.Header("Resource-Estimate"), e.Header("Client-Tags")
	if !(s.opts.KeepClientEstimate && len(req.Header.Peek(est)) > 0) {
		req.Header.Del(est)
		req.Header.Set(est, d.est.ResourceEstimate())
	}
	if s.opts.ClassTag != "" && d.Class != "" {
		tags := string(req.Header.Peek(tagsKey))
		tag := s.opts.ClassTag + d.Class
		if tags != "" {
			tags += "," + tag
		} else {
			tags = tag
		}
		req.Header.Set(tagsKey, tags)
	}
}

// decisionHeaders tells the client what the proxy did.
func decisionHeaders(h *fasthttp.ResponseHeader, d *decision) {
	h.Set("X-Prestroid-Cluster", d.cluster.name)
	h.Set("X-Prestroid-Decision", d.String())
	// Server-Timing (W3C): where the proxy spent the submission's time.
	st := make([]byte, 0, 128)
	st = appendTiming(st, "prestroid", d.took)
	if d.estimate {
		h.Set("X-Prestroid-Cpu-Estimate", strconv.FormatFloat(d.est.CPUSeconds, 'g', 6, 64))
		if d.est.Model != "" {
			h.Set("X-Prestroid-Model", d.est.Model)
		}
		h.SetBytesV("X-Prestroid-Estimate", d.est.AppendHeader(nil))
		switch {
		case d.est.Cached:
			st = append(st, ", estimate-cache;desc=hit"...)
		case !d.est.Explained(): // no EXPLAIN: cheap, history or text
			st = append(st, ", estimate;desc="...)
			st = append(st, d.est.Source.String()...)
		default:
			st = appendTiming(st, ", explain", d.est.Explain)
			st = appendTiming(st, ", featurize", d.est.Featurize)
			st = appendTiming(st, ", infer", d.est.Infer)
		}
	}
	h.SetBytesV("Server-Timing", st)
}

// appendTiming appends a Server-Timing metric: name;dur=<milliseconds>.
func appendTiming(b []byte, name string, d time.Duration) []byte {
	b = append(b, name...)
	b = append(b, ";dur="...)
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 3, 64)
}
