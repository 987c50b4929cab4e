package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
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
	took     time.Duration // deciding, estimate included (Server-Timing)
}

// leastLoaded returns the healthy cluster of class (all clusters when class
// is "") with the least load, or nil.
func (s *Server) leastLoaded(class string) *cluster {
	var best *cluster
	for _, c := range s.clusters {
		if (class != "" && c.class != class) || !c.Healthy() {
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
	for _, c := range s.clusters {
		if c.Healthy() {
			return c
		}
	}
	return s.clusters[0]
}

// failover picks another cluster for a new query after a dial to failed
// did not connect: a healthy one of the decision's class, else the default
// cluster; nil when only failed itself is left. failed must already be
// marked down.
func (s *Server) failover(d *decision, failed *cluster) *cluster {
	if d.Class != "" {
		if c := s.leastLoaded(d.Class); c != nil && c != failed {
			return c
		}
	}
	if c := s.defaultCluster(); c != failed && c.Healthy() {
		return c
	}
	return nil
}

// decide places a new query. It is the glue between fasthttp and the
// policy (Options.Selector): transactions stick to their cluster without
// asking the policy; otherwise the query is estimated as the caller within
// the budget (an estimator failure is an Outcome, which the policy turns
// into fail-open) and the policy chooses from plain values.
func (s *Server) decide(ctx *fasthttp.RequestCtx) (*decision, error) {
	if name, ok := protocol.TransactionCluster(&ctx.Request.Header); ok {
		c, found := s.byName[name]
		if !found {
			return nil, fmt.Errorf("%w: transaction of unknown cluster %q", ErrBadRequest, name)
		}
		// Not estimated (the EXPLAIN would run outside the transaction),
		// but it counts against the budgets as its identity.
		id, err := s.identityOf(ctx, c, estimate.Estimate{}, nil)
		if err != nil {
			return nil, err
		}
		return &decision{Decision: routing.Decision{Kind: routing.KindTransaction, Cluster: name}, cluster: c, identity: id}, nil
	}
	def := s.defaultCluster()
	in := s.policyInput(&ctx.Request.Header, def)
	var est estimate.Estimate
	var estErr error
	if s.opts.Estimator != nil {
		est, estErr = s.estimate(ctx, def)
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
	return &decision{Decision: pd, cluster: c, est: in.Estimate, estimate: in.Outcome == routing.Estimated, identity: id}, nil
}

// policyInput is the plain value the policy sees; the request header is
// read here and nothing of it is kept.
func (s *Server) policyInput(h *fasthttp.RequestHeader, def *cluster) routing.Input {
	in := routing.Input{
		User:     string(h.Peek("X-Trino-User")),
		Source:   string(h.Peek("X-Trino-Source")),
		Clusters: make([]routing.ClusterState, len(s.clusters)),
	}
	in.Group = s.opts.Admission.GroupOf(in.User, h)
	for _, v := range h.PeekAll("X-Trino-Client-Tags") {
		for _, t := range strings.Split(string(v), ",") {
			if t = strings.TrimSpace(t); t != "" {
				in.ClientTags = append(in.ClientTags, t)
			}
		}
	}
	for i, c := range s.clusters {
		in.Clusters[i] = routing.ClusterState{Name: c.name, Class: c.class, Healthy: c.Healthy(), Load: c.Load(), Default: c == def}
	}
	return in
}

// estimate asks the estimator as the calling user, within the budget,
// planning on def or another healthy cluster (the estimator spreads and
// bounds its EXPLAINs over Query.Planners).
func (s *Server) estimate(ctx *fasthttp.RequestCtx, def *cluster) (estimate.Estimate, error) {
	c, cancel := context.WithTimeout(context.Background(), s.opts.EstimateTimeout)
	defer cancel()
	return s.opts.Estimator.Estimate(c, Query{SQL: string(ctx.Request.Body()), Header: protocol.CallerHeaders(&ctx.Request.Header),
		Server: def.url, Planners: s.planners(def)})
}

// planners are the base URLs of the healthy clusters that may plan
// (Options.Planners; all when empty), def first when it is one; def alone
// when none of them is healthy (its EXPLAIN then fails as it would have).
func (s *Server) planners(def *cluster) []string {
	may := func(c *cluster) bool { return len(s.opts.Planners) == 0 || slices.Contains(s.opts.Planners, c.name) }
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

// annotate adds the estimate to the upstream request: Trino's own
// X-Trino-Resource-Estimate (CPU_TIME, for resource-group selectors) unless
// the client sent one and KeepClientEstimate is set, and optionally a client
// tag naming the class.
func (s *Server) annotate(req *fasthttp.Request, d *decision) {
	if !d.estimate {
		return
	}
	if !(s.opts.KeepClientEstimate && len(req.Header.Peek("X-Trino-Resource-Estimate")) > 0) {
		req.Header.Del("X-Trino-Resource-Estimate")
		req.Header.Set("X-Trino-Resource-Estimate", "CPU_TIME="+estimate.TrinoDuration(d.est.CPUSeconds))
	}
	if s.opts.ClassTag != "" && d.Class != "" {
		tags := string(req.Header.Peek("X-Trino-Client-Tags"))
		tag := s.opts.ClassTag + d.Class
		if tags != "" {
			tags += "," + tag
		} else {
			tags = tag
		}
		req.Header.Set("X-Trino-Client-Tags", tags)
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
