package proxy

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/gateway"
	"github.com/prestroid/prestroid/proxy/guardrail"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/prestroid/prestroid/proxy/usage"
	"github.com/prometheus/client_golang/prometheus"
)

// ClusterConfig names one coordinator.
type ClusterConfig struct {
	Name  string
	URL   string // http(s)://host:port
	Class string // cost class served (one of Options.Classes); empty: none
	// Engine is the coordinator's engine (clusters.engine). Unknown means
	// the health monitor detects it; until then the cluster takes a
	// client of either dialect.
	Engine dialect.Engine
}

// Options configure a Server. The settings come from a configuration
// (OptionsFrom: config fills their defaults and validates them, and the
// proxy trusts what it gets); each field names its key. A zero value
// means what the field says, never a default of its own: start from
// Defaults to set a few fields by hand.
type Options struct {
	// Clusters to forward to; the first is the default. Required.
	Clusters []ClusterConfig
	// Signer signs route tokens. Nil means a random per-process key.
	Signer *protocol.Signer
	// PublicURL is the proxy's base URL as clients see it. Empty means
	// derived per request from the Host header, which must then be one the
	// proxy answers to (see AllowedHosts); other requests get 400.
	PublicURL string
	// AllowedHosts are further Host header values (host[:port], any case)
	// that may be written into URIs when PublicURL is empty, besides the
	// address a connection arrived on and localhost on a loopback
	// listener. Empty means only those. Ignored when PublicURL is set.
	AllowedHosts []string
	// UpstreamTLS configures TLS to https clusters (CA bundle, verification;
	// see UpstreamTLSConfig). Nil means Go's defaults: the system roots.
	UpstreamTLS *tls.Config
	// ForwardedHeaders forwards X-Forwarded-* / Forwarded upstream. False
	// (the default) strips them: Trino 451+ answers 406 otherwise.
	ForwardedHeaders bool
	// UpstreamTimeout bounds one upstream exchange (upstream_timeout).
	UpstreamTimeout time.Duration
	// QueryMapSize bounds the query-id → cluster map (query_map_size).
	QueryMapSize int
	// UpstreamMaxConns bounds the open connections to each cluster; a
	// request past it waits up to UpstreamTimeout for a free one, then
	// gets 503 (nothing was sent) without the cluster being marked down.
	// (upstream_max_conns)
	UpstreamMaxConns int
	// PageBufferBytes is how much of a result page is read before it is
	// sent (page.go): a page that fails upstream within it is answered
	// with a well-formed Trino error (page_buffer_bytes).
	PageBufferBytes int
	// GzipLevel is the gzip level of pages sent to clients that accept
	// gzip (1 fastest … 9 smallest; gzip_level). Zero or negative sends
	// pages uncompressed.
	GzipLevel int
	// PageReadAheadBytes bounds the result pages fetched ahead of the
	// client, all queries together (readahead.go; page_read_ahead_bytes).
	// Zero or negative reads nothing ahead.
	PageReadAheadBytes int
	// MaxRequestBodyBytes bounds request bodies (max_request_body_bytes).
	MaxRequestBodyBytes int
	// MaxHeaderBytes bounds a request's header block (max_header_bytes).
	MaxHeaderBytes int
	// Identity is how a new query's identity is established (identity.go):
	// frontdoor.IdentityHeader (X-Trino-User, unauthenticated) or
	// frontdoor.IdentityVerified (the user the cluster accepted the
	// credentials of); identity.
	Identity string
	// IdentityClaim is the JWT claim naming the user of a Bearer token in
	// IdentityVerified mode (Trino's
	// http-server.authentication.jwt.principal-field; identity_claim).
	IdentityClaim string
	// CredentialTTL is how long a credential the cluster accepted is
	// remembered (by its SHA-256) so later statements need no probe
	// (credential_ttl). Zero means not remembered.
	CredentialTTL time.Duration
	// TokenVerifier, when set, checks Bearer tokens locally (a JWT against
	// a JWKS) in IdentityVerified mode; a token it refuses is still offered
	// to the cluster. Nil means the cluster verifies every credential.
	TokenVerifier frontdoor.TokenVerifier
	// Logger receives request errors. Nil means slog.Default().
	Logger *slog.Logger

	// Estimator scores new queries. Nil means no estimation: every query
	// goes to the default cluster unannotated.
	Estimator Estimator
	// RoutingGroups answer Trino Gateway's external routing requests
	// (POST /v1/routing), in increasing order of MaxCPUSeconds. Empty
	// means the answer carries only the estimate header.
	RoutingGroups []gateway.RoutingGroup
	// EstimateTimeout is the time budget of one estimate (EXPLAIN and
	// model); past it the query fails open (routing.estimate_timeout).
	EstimateTimeout time.Duration
	// Classes are the cost classes, in increasing order of MaxCPUSeconds.
	// Empty means no routing by cost (estimates still annotate queries).
	Classes []routing.CostClass
	// Planners names the clusters whose coordinators may run the
	// estimator's EXPLAINs (Query.Planners: the healthy ones, the default
	// cluster first when it is one of them). Empty means every cluster.
	Planners []string
	// ClassQuantile is the quantile of each estimate that picks its class
	// (routing.CostPolicy.Quantile): 0.5 routes on the point estimate,
	// higher values send uncertain estimates to larger classes. Zero means
	// the median, as for every class quantile in code (package estimate);
	// config fills routing.class_quantile's default. Otherwise it must lie
	// in (0, 1).
	ClassQuantile float64
	// Fallback is the policy when a class has no healthy cluster:
	// routing.FallbackLarger, FallbackDefault or FallbackAny
	// (routing.fallback).
	Fallback string
	// Shadow estimates and reports decisions without acting on them:
	// queries go to the default cluster, unannotated.
	Shadow bool
	// KeepClientEstimate keeps an X-Trino-Resource-Estimate the client
	// sent; false (the default) replaces it with the model's.
	KeepClientEstimate bool
	// ClassTag, when set, adds the client tag ClassTag+class (e.g.
	// "cost:large") to routed queries, for resource-group selectors.
	ClassTag string
	// MonitorInterval is how often cluster health (/v1/info) and load
	// (see MonitorType) are refreshed (routing.monitor_interval). Zero or
	// negative disables the monitor (every cluster then counts as healthy
	// and idle).
	MonitorInterval time.Duration
	// MonitorUser is the X-Trino-User of the monitor's requests
	// (routing.monitor_user).
	MonitorUser string
	// MonitorType is where load is read (routing.monitor_type):
	// routing.MonitorMetrics (Trino's OpenMetrics query-manager gauges),
	// MonitorQueryList (the whole /v1/query list) or MonitorInfo (no load
	// read).
	MonitorType string
	// MonitorMaxBytes bounds each monitor response (routing.monitor_max_bytes).
	MonitorMaxBytes int
	// Admission holds the budgets of in-flight queries. Nil, or all limits
	// zero, means no admission control.
	Admission *admission.Options
	// Feedback receives every completed query (the feedback log). Nil
	// means none is recorded.
	Feedback FeedbackSink
	// FeedbackPlans keeps each query's plan (Completed.Estimate.Plan, the
	// EXPLAIN JSON: tens to hundreds of KiB) from its first page to its
	// last, for a Feedback sink that writes plans (the feedback log).
	// False drops it once the first page passes: a query whose last page
	// passes through another replica never completes here, and what the
	// proxy tracks of it stays until 10,000 newer queries push it out.
	FeedbackPlans bool
	// Handoff, when set, passes what a query's estimate was based on
	// (Estimate.Learn) from this replica, which placed the query, to the
	// replica that sees its last page: behind a load balancer a client's
	// polls may go to any replica. Nil: every replica learns only from the
	// queries whose last page it sees and placed itself.
	Handoff Handoff
	// Usage configures cost accounting (package usage: the
	// prestroid_usage_* metrics, GET /prestroid/api/usage, the console's
	// usage view; usage.*). Nil means none.
	Usage *usage.Options

	// Rules route queries by who sent them before cost
	// (routing.RulePolicy): the first matching rule fixes the class. Empty
	// means routing by cost alone (routing.CostPolicy). Ignored when
	// Selector is set.
	Rules []routing.Rule
	// Selector is the routing policy. Nil means a routing.CostPolicy built
	// from Classes, Fallback and Shadow, wrapped in a RulePolicy when
	// Rules are set. Shadow still governs annotation and admission either
	// way.
	Selector routing.Selector
	// Registry receives the proxy's metrics, served at GET /metrics
	// together with every other collector registered on it (see
	// Server.Registry). Nil means the server makes its own; either way
	// the Go runtime and process collectors are on it (added unless
	// already there). One Server per registry: a second one's metrics
	// collide and New fails.
	Registry *prometheus.Registry
	// AdminToken, when set, is required on the admin endpoints (/metrics,
	// /v1/estimate, /v1/routing: admin.go) as "Authorization: Bearer
	// TOKEN" or X-Prestroid-Admin-Token. Empty means they are open.
	AdminToken string
	// AdminSeparate serves the admin endpoints only through ServeAdmin
	// (their own listener): the client listener answers them 404. False
	// serves them on the client listener too.
	AdminSeparate bool
	// EstimatorStats, when set, is called at each scrape for the
	// estimator's cache and batcher figures (prestroid_estimator_*) and by
	// the web console (its model, caches and history). Nil means they are
	// not exported.
	EstimatorStats func() estimate.Stats
	// Guardrails refuse a new query whose estimate is over a limit before
	// it reaches a cluster (package guardrail; guardrails). Empty means
	// none.
	Guardrails []guardrail.Rule
	// ConsoleDecisions is how many recent decisions the web console keeps
	// in memory (package console; served on the admin surface under
	// /prestroid/; console.decisions). Zero or negative turns the
	// console off (404).
	ConsoleDecisions int
}

// OptionsFrom maps a configuration onto the proxy's settings: the one
// place they are built. cfg's defaults must be filled and it must be valid
// (config.Config.FillDefaults, Validate): New trusts them. The
// dependencies (Signer, Logger, Estimator, Feedback, ...) are left for the
// caller.
func OptionsFrom(cfg *config.Config) Options {
	clusters := make([]ClusterConfig, len(cfg.Clusters))
	for i, c := range cfg.Clusters {
		engine, _ := dialect.Parse(c.Engine) // valid: Validate checked it
		clusters[i] = ClusterConfig{Name: c.Name, URL: c.URL, Class: c.Class, Engine: engine}
	}
	classes := make([]routing.CostClass, len(cfg.Routing.Classes))
	for i, c := range cfg.Routing.Classes {
		classes[i] = routing.CostClass{Name: c.Name, MaxCPUSeconds: c.MaxCPUSeconds,
			MaxPeakMemory: c.MaxPeakMemory.Bytes(), MaxElapsed: time.Duration(c.MaxElapsed).Seconds()}
	}
	r := cfg.Routing
	rules := make([]routing.Rule, len(r.Rules))
	for i, ru := range r.Rules {
		rules[i] = routing.Rule{Name: ru.Name, User: ru.User, Group: ru.Group, Source: ru.Source, ClientTags: ru.ClientTags, Class: ru.Class}
	}
	return Options{
		Clusters:            clusters,
		PublicURL:           cfg.PublicURL,
		AllowedHosts:        cfg.AllowedHosts,
		Identity:            cfg.Identity,
		IdentityClaim:       cfg.IdentityClaim,
		CredentialTTL:       time.Duration(cfg.CredentialTTL),
		ForwardedHeaders:    cfg.ForwardedHeaders,
		UpstreamTimeout:     time.Duration(cfg.UpstreamTimeout),
		QueryMapSize:        cfg.QueryMapSize,
		UpstreamMaxConns:    cfg.UpstreamMaxConns,
		PageBufferBytes:     cfg.PageBufferBytes,
		GzipLevel:           cfg.GzipLevel,
		PageReadAheadBytes:  cfg.PageReadAheadBytes,
		MaxRequestBodyBytes: cfg.MaxRequestBodyBytes,
		MaxHeaderBytes:      cfg.MaxHeaderBytes,
		AdminToken:          cfg.AdminToken,
		AdminSeparate:       cfg.AdminListen != "",
		Classes:             classes,
		Fallback:            r.Fallback,
		Rules:               rules,
		Shadow:              r.Shadow,
		EstimateTimeout:     time.Duration(r.EstimateTimeout),
		KeepClientEstimate:  r.KeepClientEstimate,
		ClassTag:            r.ClassTag,
		ClassQuantile:       r.ClassQuantile,
		Planners:            r.Planners,
		MonitorInterval:     time.Duration(r.MonitorInterval),
		MonitorUser:         r.MonitorUser,
		MonitorType:         r.MonitorType,
		MonitorMaxBytes:     r.MonitorMaxBytes,
		ConsoleDecisions:    cfg.Console.Decisions,
		Admission:           admission.OptionsFrom(cfg.Admission),
		Guardrails:          guardrail.FromConfig(cfg.Guardrails),
		Usage:               usageOptions(cfg.Usage),
	}
}

// usageOptions are u's accounting settings; nil when u disables it.
func usageOptions(u config.Usage) *usage.Options {
	if u.Disabled {
		return nil
	}
	return &usage.Options{Bucket: time.Duration(u.Bucket), Retention: time.Duration(u.Retention), Top: max(u.Top, 0),
		RedisURL: u.Redis, RedisPrefix: u.RedisPrefix}
}

// Defaults are the settings of a configuration that sets nothing (with no
// clusters): a base for callers that build Options by hand.
func Defaults() Options {
	var cfg config.Config
	cfg.FillDefaults()
	return OptionsFrom(&cfg)
}
