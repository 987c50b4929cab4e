package config

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Routing configures what the proxy does with cost estimates (docs/design.md §5).
// The zero value estimates nothing more than the estimator is asked to and
// routes every query to the first cluster.
type Routing struct {
	// Classes are cost classes in increasing order of their bounds; the
	// last may leave a bound 0 (unbounded). A query belongs to the first
	// class that holds each of its predictions (CPU seconds, and peak
	// memory and elapsed time where the class bounds them and the
	// estimate predicts them); clusters name the class they serve. Empty
	// means no routing by cost.
	Classes []CostClass `yaml:"classes"`
	// Rules route queries by who sent them before cost (rules.go): the
	// first rule whose conditions all hold fixes the query's class, then
	// the cost policy picks the cluster within it (and its fallback and
	// shadow mode apply). Empty means routing by cost alone.
	Rules []RoutingRule `yaml:"rules"`
	// Fallback when a class has no healthy cluster: "larger" (the next
	// larger class; the default), "default" (the first cluster) or "any"
	// (the least loaded healthy cluster).
	Fallback string `yaml:"fallback"`
	// Shadow estimates and reports the decision (X-Prestroid-Decision,
	// logs) without acting on it: no routing, no annotation, no queueing.
	Shadow bool `yaml:"shadow"`
	// EstimateTimeout is the time budget of one estimate (EXPLAIN plus
	// model); past it the query fails open to the first cluster. Zero
	// means 2s.
	EstimateTimeout Duration `yaml:"estimate_timeout"`
	// KeepClientEstimate keeps an X-Trino-Resource-Estimate the client
	// sent; false replaces it with the model's.
	KeepClientEstimate bool `yaml:"keep_client_estimate"`
	// ClassTag, when non-empty, adds the client tag ClassTag+class (e.g.
	// "cost:" gives "cost:large") so resource groups can select on it.
	ClassTag string `yaml:"class_tag"`
	// MonitorInterval is how often cluster health and load are refreshed.
	// Zero means 3s; a negative value turns the monitor off (clusters then
	// count as healthy until a connection to one fails).
	MonitorInterval Duration `yaml:"monitor_interval"`
	// MonitorUser is the X-Trino-User of health and load requests. Empty
	// means "prestroid".
	MonitorUser string `yaml:"monitor_user"`
	// MonitorType is where the monitor reads a cluster's load: "metrics"
	// (the default: two query-manager gauges from Trino's OpenMetrics
	// /metrics, filtered server-side with name[], a few hundred bytes),
	// "query_list" (counts the states in the whole /v1/query list: heavy
	// on a busy coordinator, for Trinos without /metrics) or "info"
	// (health from /v1/info only; load then counts only what this proxy
	// sent since the last check). Empty means "metrics".
	MonitorType string `yaml:"monitor_type"`
	// MonitorMaxBytes bounds each monitor response read; a larger one is
	// dropped (load unknown, counted as 0, the cluster stays healthy).
	// Zero means 1 MiB.
	MonitorMaxBytes int `yaml:"monitor_max_bytes"`
	// ClassQuantile is the quantile of each estimate (a log-normal around
	// the point estimate, its spread from the estimate's source) that picks
	// the query's class: 0.5 routes on the point estimate; higher values
	// send uncertain estimates (new shapes, the optimizer's) to larger
	// classes while confident ones (a statement's own history) stay put.
	// Zero (absent) means DefaultClassQuantile (0.9): FillDefaults sets it,
	// so no 0 reaches the proxy or the estimator, where a zero class
	// quantile would mean the median (package estimate). Must lie in (0, 1).
	ClassQuantile float64 `yaml:"class_quantile"`
	// Planners names the clusters that may run the estimator's EXPLAINs
	// (a planning group); the healthy ones share them, the least busy
	// first. Empty means every healthy cluster, the default one first.
	Planners []string `yaml:"planners"`
	// DeprecatedExplain is the old home of estimator.explain (only the
	// estimator reads it), still read from routing.explain. FillDefaults
	// copies it to Estimator.Explain when that is empty; setting both to
	// different values is refused; Deprecations reports it.
	//
	// Deprecated: set estimator.explain and read Estimator.Explain.
	DeprecatedExplain string `yaml:"explain"`
}

// CostClass is one band of predicted cost: CPU time, and optionally peak
// memory and elapsed time. A query fits a class when the class quantile
// (ClassQuantile) of each target it bounds is within the bound; a target
// the estimate does not predict does not constrain.
type CostClass struct {
	// Name is referenced by clusters[].class. Required, unique.
	Name string `yaml:"name"`
	// MaxCPUSeconds is the band's upper bound; 0 means unbounded (only the
	// last class may use it).
	MaxCPUSeconds float64 `yaml:"max_cpu_seconds"`
	// MaxPeakMemory bounds the predicted peak user memory ("4GB"): what
	// the class's clusters can hold, e.g. near their query.max-memory.
	// Zero means unbounded. Bounded classes must be in increasing order;
	// a query predicted over every class's bound goes to the last class
	// and its decision says so ("; over every class's peak_memory").
	MaxPeakMemory DataSize `yaml:"max_peak_memory"`
	// MaxElapsed bounds the predicted elapsed time ("10m"), as
	// MaxPeakMemory bounds memory. Zero means unbounded.
	MaxElapsed Duration `yaml:"max_elapsed"`
	// RoutingGroup is the Trino Gateway routing group of the class (for
	// the external routing endpoint). Empty means the class name.
	RoutingGroup string `yaml:"routing_group"`
}

// Admission holds the budgets of in-flight queries: per proxy replica, or
// shared by every replica through Redis when Redis is set. Every zero limit
// means unlimited; all zero means no admission control (rate limits apply
// either way).
type Admission struct {
	MaxQueries         int     `yaml:"max_queries"`
	MaxCPUSeconds      float64 `yaml:"max_cpu_seconds"`
	UserMaxQueries     int     `yaml:"user_max_queries"`
	UserMaxCPUSeconds  float64 `yaml:"user_max_cpu_seconds"`
	GroupMaxQueries    int     `yaml:"group_max_queries"`
	GroupMaxCPUSeconds float64 `yaml:"group_max_cpu_seconds"`
	// MaxPeakMemory, UserMaxPeakMemory and GroupMaxPeakMemory bound the
	// predicted peak memory ("64GB") of the queries in flight, all users,
	// per user and per group, beside the CPU budgets. A query whose
	// estimate predicts no memory counts as none. Zero means unlimited.
	MaxPeakMemory      DataSize `yaml:"max_peak_memory"`
	UserMaxPeakMemory  DataSize `yaml:"user_max_peak_memory"`
	GroupMaxPeakMemory DataSize `yaml:"group_max_peak_memory"`
	// ClassMaxPeakMemory bounds, per cost class (a name in
	// routing.classes), the predicted peak memory of the queries in flight
	// on the class's clusters ("large: 200GB"): what they hold together.
	// A query counts against the class of the cluster chosen for it when
	// it is admitted; one whose cluster serves no class counts against
	// none. A class absent or at zero is unlimited.
	ClassMaxPeakMemory map[string]DataSize `yaml:"class_max_peak_memory"`
	// UserGroups maps users to groups; GroupHeader, when set and present
	// on a request, names the group instead. Unmapped users are their own
	// group.
	UserGroups  map[string]string `yaml:"user_groups"`
	GroupHeader string            `yaml:"group_header"`
	// QueueSize bounds the waiting queries (zero: 1000); MaxWait how long
	// one may wait (zero: 10m). Past either, the client gets a Trino error.
	QueueSize int      `yaml:"queue_size"`
	MaxWait   Duration `yaml:"max_wait"`
	// MaxQueuedQueryBytes bounds the request (headers and SQL) one waiting
	// query holds in memory (zero: 4 MiB); MaxQueueBytes all waiting
	// queries together (zero: 256 MiB). A query that would have to wait
	// past either fails at once with a Trino error.
	MaxQueuedQueryBytes int   `yaml:"max_queued_query_bytes"`
	MaxQueueBytes       int64 `yaml:"max_queue_bytes"`
	// IdleRelease frees the budget of an admitted query not seen on any
	// page for this long (a client that went away). Zero means 6m (Trino
	// abandons a query after 5 minutes without polls).
	IdleRelease Duration `yaml:"idle_release"`

	// Redis is the URL of the Redis that holds the budgets, the queue and
	// the rate limits' buckets for every replica configured with it:
	// redis://[[user]:password@]host:port[/db] (rediss:// for TLS). It may
	// hold a password, so it is never logged; PRESTROID_ADMISSION_REDIS
	// sets it from the environment. Empty means this process's memory.
	// A standalone Redis (or one behind Sentinel), not Redis Cluster.
	Redis string `yaml:"redis"`
	// RedisPrefix starts every key the proxy writes (zero: "prestroid:");
	// replicas sharing budgets share the prefix.
	RedisPrefix string `yaml:"redis_prefix"`
	// Lease is how long an admitted query's slot is held in Redis without
	// renewal (zero: 30s). The replicas that see the query's pages renew
	// it every Lease/3 for as long as the query is polled; a crashed
	// replica's slots come back within Lease.
	Lease Duration `yaml:"lease"`
	// RedisDown is what a replica does while Redis is unreachable: "local"
	// (the default) admits against this replica's share of the budgets
	// (each divided by Replicas, rounded up), "open" admits every query.
	RedisDown string `yaml:"redis_down"`
	// Replicas is the number of proxy replicas, to divide the budgets by
	// when Redis is unreachable (zero: 1).
	Replicas int `yaml:"replicas"`

	// UserRate and GroupRate limit new queries (POST /v1/statement) per
	// user and per group, in queries per second (token buckets); zero means
	// no limit. UserBurst and GroupBurst are the buckets' sizes (zero: the
	// rate rounded up, at least 1). Over the limit a query is refused with
	// HTTP 503 and Retry-After before anything reaches Trino, which every
	// Trino client retries.
	UserRate   float64 `yaml:"user_rate"`
	UserBurst  int     `yaml:"user_burst"`
	GroupRate  float64 `yaml:"group_rate"`
	GroupBurst int     `yaml:"group_burst"`
}

// Feedback configures the feedback log: every query whose last page passes
// through the proxy is recorded (estimate, route, plan, final statistics) in
// the collector's record format, so `prestroid train` can retrain on live
// traffic.
type Feedback struct {
	// Dir is where feedback-<time>.jsonl.gz files go. Empty means no log.
	Dir string `yaml:"dir"`
	// RotateRecords starts a new file after this many records; zero means
	// 10000.
	RotateRecords int `yaml:"rotate_records"`
	// RotateEvery starts a new file after this long; zero means 1h.
	RotateEvery Duration `yaml:"rotate_every"`
}

func (c *Config) validateRouting() error {
	bad := func(key string, val any, why string) error {
		return fmt.Errorf("%w: %s=%v: %s", ErrInvalid, key, val, why)
	}
	r := &c.Routing
	names := map[string]bool{}
	prev := 0.0
	for i, cl := range r.Classes {
		key := fmt.Sprintf("routing.classes[%d]", i)
		if cl.Name == "" || names[cl.Name] {
			return bad(key+".name", strconv.Quote(cl.Name), "want a unique non-empty name")
		}
		names[cl.Name] = true
		switch {
		case math.IsNaN(cl.MaxCPUSeconds) || cl.MaxCPUSeconds < 0:
			return bad(key+".max_cpu_seconds", cl.MaxCPUSeconds, "must not be negative")
		case cl.MaxCPUSeconds == 0 && i != len(r.Classes)-1:
			return bad(key+".max_cpu_seconds", 0, "only the last class may be unbounded")
		case cl.MaxCPUSeconds != 0 && cl.MaxCPUSeconds <= prev:
			return bad(key+".max_cpu_seconds", cl.MaxCPUSeconds, "classes must be in increasing order")
		}
		prev = cl.MaxCPUSeconds
	}
	if err := validateClassBounds(r.Classes); err != nil {
		return err
	}
	for i, cl := range c.Clusters {
		if cl.Class != "" && !names[cl.Class] {
			return bad(fmt.Sprintf("clusters[%d].class", i), strconv.Quote(cl.Class), "not a name in routing.classes")
		}
		if strings.Contains(cl.Name, "~") {
			return bad(fmt.Sprintf("clusters[%d].name", i), strconv.Quote(cl.Name), "must not contain ~")
		}
	}
	if err := validateRules(r.Rules, names); err != nil {
		return err
	}
	for class, v := range c.Admission.ClassMaxPeakMemory {
		key := "admission.class_max_peak_memory." + class
		if !names[class] {
			return bad(key, strconv.Quote(class), "not a name in routing.classes")
		}
		if v < 0 || math.IsNaN(float64(v)) {
			return bad(key, v, "must not be negative")
		}
	}
	switch r.Fallback {
	case "", "larger", "default", "any":
	default:
		return bad("routing.fallback", strconv.Quote(r.Fallback), "want larger, default or any")
	}
	switch r.MonitorType {
	case "", "metrics", "query_list", "info":
	default:
		return bad("routing.monitor_type", strconv.Quote(r.MonitorType), "want metrics, query_list or info")
	}
	if r.MonitorMaxBytes < 0 {
		return bad("routing.monitor_max_bytes", r.MonitorMaxBytes, "must not be negative")
	}
	if r.EstimateTimeout < 0 {
		return bad("routing.estimate_timeout", r.EstimateTimeout, "must not be negative")
	}
	clusterNames := map[string]bool{}
	for _, cl := range c.Clusters {
		clusterNames[cl.Name] = true
	}
	for i, p := range r.Planners {
		if !clusterNames[p] {
			return bad(fmt.Sprintf("routing.planners[%d]", i), strconv.Quote(p), "not a name in clusters")
		}
	}
	if r.ClassQuantile != 0 && !(r.ClassQuantile > 0 && r.ClassQuantile < 1) {
		return bad("routing.class_quantile", r.ClassQuantile, "want a value in (0, 1): 0.5 is the point estimate")
	}
	if c.Feedback.RotateRecords < 0 {
		return bad("feedback.rotate_records", c.Feedback.RotateRecords, "must not be negative")
	}
	if c.Feedback.RotateEvery < 0 {
		return bad("feedback.rotate_every", c.Feedback.RotateEvery, "must not be negative")
	}
	a := &c.Admission
	for key, v := range map[string]float64{
		"admission.max_queries": float64(a.MaxQueries), "admission.max_cpu_seconds": a.MaxCPUSeconds,
		"admission.user_max_queries": float64(a.UserMaxQueries), "admission.user_max_cpu_seconds": a.UserMaxCPUSeconds,
		"admission.group_max_queries": float64(a.GroupMaxQueries), "admission.group_max_cpu_seconds": a.GroupMaxCPUSeconds,
		"admission.queue_size": float64(a.QueueSize), "admission.max_wait": float64(a.MaxWait),
		"admission.max_queued_query_bytes": float64(a.MaxQueuedQueryBytes), "admission.max_queue_bytes": float64(a.MaxQueueBytes),
		"admission.lease": float64(a.Lease), "admission.replicas": float64(a.Replicas), "admission.idle_release": float64(a.IdleRelease),
		"admission.user_rate": a.UserRate, "admission.user_burst": float64(a.UserBurst),
		"admission.group_rate": a.GroupRate, "admission.group_burst": float64(a.GroupBurst),
		"admission.max_peak_memory": float64(a.MaxPeakMemory), "admission.user_max_peak_memory": float64(a.UserMaxPeakMemory),
		"admission.group_max_peak_memory": float64(a.GroupMaxPeakMemory),
	} {
		if v < 0 || math.IsNaN(v) {
			return bad(key, v, "must not be negative")
		}
	}
	switch a.RedisDown {
	case "", "local", "open":
	default:
		return bad("admission.redis_down", strconv.Quote(a.RedisDown), "want local or open")
	}
	if a.Redis != "" {
		if why := badRedisURL(a.Redis); why != "" {
			// The value may hold a password: name the key, not the value.
			return bad("admission.redis", "(not shown)", why)
		}
	}
	if a.Lease != 0 && time.Duration(a.Lease) < time.Second {
		return bad("admission.lease", a.Lease, "must be at least 1s")
	}
	return nil
}

// validateClassBounds checks the memory and time bounds of the classes:
// not negative, and increasing over the classes that set them (a class
// may leave either unbounded, and a smaller class may bound what a larger
// one does not).
func validateClassBounds(classes []CostClass) error {
	var prevMem, prevTime float64
	for i, cl := range classes {
		key := fmt.Sprintf("routing.classes[%d]", i)
		mem, el := float64(cl.MaxPeakMemory), float64(cl.MaxElapsed)
		switch {
		case mem < 0 || math.IsNaN(mem):
			return fmt.Errorf("%w: %s.max_peak_memory=%v: must not be negative", ErrInvalid, key, cl.MaxPeakMemory)
		case mem > 0 && mem <= prevMem:
			return fmt.Errorf("%w: %s.max_peak_memory=%v: classes must be in increasing order", ErrInvalid, key, cl.MaxPeakMemory)
		case el < 0:
			return fmt.Errorf("%w: %s.max_elapsed=%v: must not be negative", ErrInvalid, key, cl.MaxElapsed)
		case el > 0 && el <= prevTime:
			return fmt.Errorf("%w: %s.max_elapsed=%v: classes must be in increasing order", ErrInvalid, key, cl.MaxElapsed)
		}
		prevMem, prevTime = max(prevMem, mem), max(prevTime, el)
	}
	return nil
}

// badRedisURL says what is wrong with the Redis URL v, or "" when it is a
// redis:// or rediss:// URL with a host that the Redis client accepts
// (database number, options): the proxy and the history store connect
// with it without checking it again. The answer never quotes v, which
// may hold a password.
func badRedisURL(v string) string {
	const want = "want redis://[[user]:password@]host:port[/db] or rediss://…"
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") || u.Host == "" {
		return want
	}
	// After url.Parse succeeded, the client's errors name the part that
	// is wrong (the database number, an option), not the URL.
	if _, err := redis.ParseURL(v); err != nil {
		return want + ": " + err.Error()
	}
	return ""
}

func (a *Admission) applyEnv(lookup func(string) (string, bool)) {
	if v, ok := lookup("PRESTROID_ADMISSION_REDIS"); ok && v != "" {
		a.Redis = v
	}
}
