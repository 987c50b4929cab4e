package capacity

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Scenario is a fleet to model: a rate of new statements, the share of
// each decision path, the features in Redis and how the fleet is laid out.
type Scenario struct {
	// Rate is new statements per second, the whole fleet.
	Rate float64
	// Mix is the share of each decision path (Path*; normalized to sum
	// to 1). PathPassthrough is no estimate at all.
	Mix map[string]float64
	// Features are the shared features in Redis (Feature*;
	// FeatureHistory stands for the history's first-sight and repeat
	// costs, taken by path).
	Features []string
	// CoresPerReplica and TargetUtil size the replicas: a replica is
	// given CoresPerReplica × TargetUtil cores of work. Zero: 2 and 0.6.
	CoresPerReplica, TargetUtil float64
	// RedisTargetUtil is the share of one Redis' ceiling planned for (its
	// single command thread). Zero: 0.7.
	RedisTargetUtil float64
	// Redises lays the features out on Redis instances: each entry is the
	// features ("+"-joined) of one instance ("history", "usage",
	// "admission+rate_limit"); the features no entry names share one more,
	// "redis". Empty: every feature on one Redis.
	Redises []string
	// ExplainWall, when set, is one EXPLAIN's wall time on the
	// coordinators instead of the measured one (the measuring Trino may
	// have been busier, or idler, than yours).
	ExplainWall float64
	// ExplainConcurrency is estimator.explain_concurrency (EXPLAINs in
	// flight per cluster) and Clusters the clusters planning them. Zero:
	// 16 and 1.
	ExplainConcurrency, Clusters int
}

// FeatureHistory in Scenario.Features: the history in Redis.
const FeatureHistory = "history"

// RedisLoad is one Redis instance's load.
type RedisLoad struct {
	Name     string
	Features []string
	// OpsPerSec are the commands the replicas send (round trips,
	// pipelined ones each), RoundTripsPerSec the writes; Commands those
	// Redis executes, inside scripts included.
	OpsPerSec, RoundTripsPerSec, CommandsPerSec float64
	BytesInPerSec, BytesOutPerSec               float64
	// Util is the share of the instance's single command thread used:
	// Σ over commands of rate / that command's measured ceiling.
	Util float64
	// CPUUtil is the same from Redis' main-thread CPU measured per
	// statement in the replica runs: at their low rates each command
	// pays an idle event loop's wake-up, so this is an upper bound far
	// above Util, kept for comparison, not planned with.
	CPUUtil float64
	// SaturatesAt is the fleet rate (statements/s, this mix) at which
	// Util reaches 1.
	SaturatesAt float64
}

// Answer is the model's answer for a Scenario.
type Answer struct {
	Scenario Scenario
	// CPUCores is the proxies' CPU in use; Replicas how many replicas
	// carry it at the target utilisation.
	CPUCores float64
	Replicas int
	// Redis is each Redis instance's load.
	Redis []RedisLoad
	// ExplainsPerSec go to the coordinators; ExplainsInFlight is how many
	// run at once (Little's law: rate × each one's measured wall time),
	// ExplainUtil that against ExplainConcurrency × Clusters.
	ExplainsPerSec, ExplainsInFlight, ExplainUtil float64
	// ExplainSaturatesAt is the rate at which ExplainUtil reaches 1
	// (beyond it statements are decided without their EXPLAIN).
	ExplainSaturatesAt float64
	// FirstBottleneck names the shared component that saturates first
	// (at the lowest rate) for this mix: a Redis instance or the
	// coordinators' EXPLAIN slots; BottleneckAt is that rate.
	FirstBottleneck string
	BottleneckAt    float64
}

func (s Scenario) withDefaults() Scenario {
	def := func(v *float64, d float64) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&s.CoresPerReplica, 2)
	def(&s.TargetUtil, 0.6)
	def(&s.RedisTargetUtil, 0.7)
	if s.ExplainConcurrency <= 0 {
		s.ExplainConcurrency = 16
	}
	if s.Clusters <= 0 {
		s.Clusters = 1
	}
	return s
}

// shares returns the mix normalized to sum to 1, in a fixed order.
func (s Scenario) shares() ([]string, []float64, error) {
	var total float64
	paths := make([]string, 0, len(s.Mix))
	for p, v := range s.Mix {
		if v < 0 {
			return nil, nil, fmt.Errorf("capacity: mix: negative share of %s", p)
		}
		total += v
		paths = append(paths, p)
	}
	if total <= 0 {
		return nil, nil, fmt.Errorf("capacity: mix: no path has a share")
	}
	sort.Strings(paths)
	out := make([]float64, len(paths))
	for i, p := range paths {
		out[i] = s.Mix[p] / total
	}
	return paths, out, nil
}

// historyCost is the history's Redis cost of one statement on path p: a
// repeat the history answers reads what it knows and writes on
// completion; every other path reads, misses and writes (a cache hit
// counted as a repeat: an upper bound, its read is skipped); the text
// stage's first sight has its own figure when measured.
func (f Figures) historyCost(p string) RedisCost {
	if p == PathHistory || p == PathCache {
		return f.Redis[FeatureHistoryRepeat]
	}
	if c, ok := f.Redis[FeatureHistoryText]; ok && (p == PathText || p == PathTextLearn) {
		return c
	}
	return f.Redis[FeatureHistoryFirst]
}

// explainSeconds is a path's EXPLAIN wall time per statement; a
// background EXPLAIN's is not measured (the proxy times the hot path's),
// so a path with EXPLAINs and no time takes the hot path's time per
// EXPLAIN: the coordinator plans it the same way.
func (f Figures) explainSeconds(c PathCost) float64 {
	if c.ExplainSeconds > 0 || c.Explains == 0 {
		return c.ExplainSeconds
	}
	if e := f.Paths[PathExplain]; e.Explains > 0 {
		return c.Explains * e.ExplainSeconds / e.Explains
	}
	return 0
}

// perStatement is the fleet's mean cost of one statement.
type perStatement struct {
	cpu, explains, explainSec float64
	redis                     map[string]*RedisCost // by instance name
	redisFeatures             map[string][]string
}

// instanceOf names the Redis a feature lives on.
func (s Scenario) instanceOf(feature string) string {
	for _, r := range s.Redises {
		for _, f := range strings.Split(r, "+") {
			if f == feature {
				return "redis[" + r + "]"
			}
		}
	}
	return "redis"
}

func (f Figures) perStatement(s Scenario) (perStatement, error) {
	paths, shares, err := s.shares()
	if err != nil {
		return perStatement{}, err
	}
	ps := perStatement{redis: map[string]*RedisCost{}, redisFeatures: map[string][]string{}}
	base := f.Paths[PathPassthrough].CPUSeconds
	for i, p := range paths {
		c, ok := f.Paths[p]
		if !ok {
			return perStatement{}, fmt.Errorf("capacity: no measured figures for path %q", p)
		}
		ps.cpu += shares[i] * c.CPUSeconds
		ps.explains += shares[i] * c.Explains
		ps.explainSec += shares[i] * f.explainSeconds(c)
	}
	for _, feat := range s.Features {
		inst := s.instanceOf(feat)
		if ps.redis[inst] == nil {
			ps.redis[inst] = &RedisCost{Ops: map[string]float64{}}
		}
		ps.redisFeatures[inst] = append(ps.redisFeatures[inst], feat)
		var costs []RedisCost
		var weights []float64
		if feat == FeatureHistory {
			for i, p := range paths {
				costs, weights = append(costs, f.historyCost(p)), append(weights, shares[i])
			}
		} else {
			c, ok := f.Redis[feat]
			if !ok {
				return perStatement{}, fmt.Errorf("capacity: no measured figures for feature %q", feat)
			}
			costs, weights = []RedisCost{c}, []float64{1}
			// The proxy's own CPU for the feature: beyond the path its
			// measurement ran on (the pass-through floor unless said).
			b := base
			if c.BasePath != "" {
				b = f.Paths[c.BasePath].CPUSeconds
			}
			ps.cpu += max(0, c.ProxyCPUSeconds-b)
		}
		for j, c := range costs {
			ps.redis[inst].add(c, weights[j])
		}
	}
	return ps, nil
}

// add adds w × c.
func (r *RedisCost) add(c RedisCost, w float64) {
	for k, v := range c.Ops {
		r.Ops[k] += w * v
	}
	r.RoundTrips += w * c.RoundTrips
	r.Commands += w * c.Commands
	r.BytesIn += w * c.BytesIn
	r.BytesOut += w * c.BytesOut
	r.CPUSeconds += w * c.CPUSeconds
	r.ProxyCPUSeconds += w * c.ProxyCPUSeconds
}

// inTransaction are the commands the usage accounting sends inside its
// MULTI/EXEC, whose cost the "EXEC" ceiling (the whole transaction,
// measured as one) holds.
var inTransaction = map[string]bool{"MULTI": true, "HINCRBY": true, "HINCRBYFLOAT": true, "EXPIRE": true}

// ExecBenchCommands are the commands inside the usage transaction whose
// cost RedisCeiling["EXEC"] measures (bench capacity: 3 hashes × (1
// HINCRBY, 4 HINCRBYFLOAT, 1 EXPIRE)).
const ExecBenchCommands = 18

// threadSeconds is the Redis command-thread time of the ops c holds,
// from the measured ceilings: an op with a ceiling of its own ("EVALSHA
// enter.lua") costs 1/ceiling; one without (the other admission
// scripts, HINCRBYFLOAT inside a usage transaction, HELLO) is costed as
// the heaviest script measured for scripts and as GET for plain
// commands, which overstates the pipelined ones.
func (f Figures) threadSeconds(ops map[string]float64) float64 {
	heaviest := math.Inf(1)
	for k, v := range f.RedisCeiling {
		if strings.HasPrefix(k, "EVAL") && v > 0 {
			heaviest = min(heaviest, v)
		}
	}
	plain := f.RedisCeiling["GET"]
	tx := f.RedisCeiling["EXEC"] > 0
	var t, inner float64
	if tx {
		for op, n := range ops {
			if inTransaction[op] && op != "MULTI" {
				inner += n
			}
		}
		// The measured transaction held ExecBenchCommands commands; a
		// larger one costs in proportion.
		t += max(ops["EXEC"], inner/ExecBenchCommands) / f.RedisCeiling["EXEC"]
	}
	for op, n := range ops {
		if tx && (inTransaction[op] || op == "EXEC") {
			continue // in the EXEC's measured cost
		}
		c := f.RedisCeiling[op]
		if c <= 0 {
			c = plain
			if strings.HasPrefix(op, "EVAL") {
				c = heaviest
			}
		}
		if c > 0 && !math.IsInf(c, 0) {
			t += n / c
		}
	}
	return t
}

// Model answers for a scenario from the figures.
func (f Figures) Model(s Scenario) (Answer, error) {
	s = s.withDefaults()
	ps, err := f.perStatement(s)
	if err != nil {
		return Answer{}, err
	}
	a := Answer{Scenario: s}
	a.CPUCores = s.Rate * ps.cpu
	a.Replicas = max(1, int(math.Ceil(a.CPUCores/(s.CoresPerReplica*s.TargetUtil)-1e-9)))
	a.ExplainsPerSec = s.Rate * ps.explains
	if s.ExplainWall > 0 {
		ps.explainSec = ps.explains * s.ExplainWall
	}
	a.ExplainsInFlight = s.Rate * ps.explainSec
	slots := float64(s.ExplainConcurrency * s.Clusters)
	a.ExplainUtil = a.ExplainsInFlight / slots
	if ps.explainSec > 0 {
		a.ExplainSaturatesAt = slots / ps.explainSec
	} else {
		a.ExplainSaturatesAt = math.Inf(1)
	}
	a.FirstBottleneck, a.BottleneckAt = "coordinators' EXPLAIN slots", a.ExplainSaturatesAt
	names := make([]string, 0, len(ps.redis))
	for n := range ps.redis {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		c := ps.redis[n]
		l := RedisLoad{Name: n, Features: ps.redisFeatures[n],
			OpsPerSec: s.Rate*c.TotalOps() + float64(a.Replicas)*f.RedisIdle.TotalOps(), RoundTripsPerSec: s.Rate*c.RoundTrips + float64(a.Replicas)*f.RedisIdle.RoundTrips,
			CommandsPerSec: s.Rate * c.Commands, BytesInPerSec: s.Rate * c.BytesIn, BytesOutPerSec: s.Rate * c.BytesOut,
			CPUUtil: s.Rate * c.CPUSeconds}
		perStmt := f.threadSeconds(c.Ops)
		idle := f.threadSeconds(f.RedisIdle.Ops) // per replica per second
		l.Util = s.Rate*perStmt + float64(a.Replicas)*idle
		l.SaturatesAt = saturation(func(rate float64) float64 {
			replicas := math.Ceil(rate * ps.cpu / (s.CoresPerReplica * s.TargetUtil))
			return rate*perStmt + replicas*idle
		})
		if l.SaturatesAt < a.BottleneckAt {
			a.FirstBottleneck, a.BottleneckAt = n, l.SaturatesAt
		}
		a.Redis = append(a.Redis, l)
	}
	if math.IsInf(a.BottleneckAt, 1) {
		a.FirstBottleneck = "none" // nothing shared: only replicas, which scale out
	}
	return a, nil
}

// saturation returns the rate at which util(rate), non-decreasing,
// reaches 1 (+Inf when it never does below 10^9 statements/s).
func saturation(util func(float64) float64) float64 {
	lo, hi := 0.0, 1.0
	for util(hi) < 1 {
		if hi > 1e9 {
			return math.Inf(1)
		}
		lo, hi = hi, hi*2
	}
	for range 100 {
		mid := (lo + hi) / 2
		if util(mid) < 1 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}
