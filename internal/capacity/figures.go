// Package capacity models a fleet of Prestroid replicas from one replica's
// measured costs: the proxy's CPU per statement on each decision path, the
// Redis round trips, bytes and Redis CPU per statement of each shared
// feature (admission, rate limits, history), the EXPLAINs each path sends
// to the coordinator, and the ceiling of one Redis measured with
// redis-benchmark. `prestroid bench capacity` measures the figures (the
// real binary on a real Trino and a real redis-server) and writes them in
// this package's format; measured.json holds the committed ones, and
// `prestroid bench capacity-model` answers for a rate and a mix.
package capacity

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
)

// Paths of a statement's decision, as Server-Timing reports them.
const (
	// PathPassthrough: no estimator (estimator.disabled): the proxy's
	// forwarding alone, the floor under every other path.
	PathPassthrough = "passthrough"
	// PathText: the text stage answers from the SQL text (first sight,
	// no EXPLAIN on the hot path, no background EXPLAIN either: the
	// explain_rate ceiling took them).
	PathText = "text"
	// PathTextLearn: the text stage answers and the EXPLAIN and the model
	// run in the background (a shape with too few explained runs).
	PathTextLearn = "text_learn"
	// PathExplain: EXPLAIN, featurize and the model on the hot path.
	PathExplain = "explain"
	// PathHistory: an exact repeat answered by the history, no EXPLAIN.
	PathHistory = "history"
	// PathCache: an estimate-cache hit.
	PathCache = "cache"
)

// Features of the shared state in Redis.
const (
	FeatureAdmission = "admission"  // admission.redis with budgets
	FeatureRateLimit = "rate_limit" // admission.user_rate/group_rate in Redis
	FeatureUsage     = "usage"      // usage accounting summed in Redis (usage.redis, or admission.redis)
	// FeatureHistoryFirst is the history in Redis for a statement it
	// cannot answer (a GET that misses, the learner's write on completion);
	// FeatureHistoryRepeat for an exact repeat it answers;
	// FeatureHistoryText for a first sight the text stage answers
	// (FeatureHistoryFirst stands in where it was not measured).
	FeatureHistoryFirst  = "history_first"
	FeatureHistoryRepeat = "history_repeat"
	FeatureHistoryText   = "history_text"
)

// Figures are the measured inputs of the model, with their provenance.
type Figures struct {
	// Provenance says when, where and how they were measured.
	Provenance Provenance `json:"provenance"`
	// Paths is the proxy's cost per statement by decision path (Path*).
	Paths map[string]PathCost `json:"paths"`
	// Redis is the Redis cost per statement by feature (Feature*).
	Redis map[string]RedisCost `json:"redis"`
	// RedisIdle is what one replica sends Redis per second with no
	// statement (sweeps, lease renewals, subscriptions), all features on.
	RedisIdle RedisCost `json:"redis_idle_per_second"`
	// Check is the run with every feature on.
	Check *Check `json:"check,omitempty"`
	// RedisCeiling is one redis-server's throughput (ops/s) by command as
	// our clients send it ("GET", "EVALSHA ratelimit.lua", ...): the
	// inverse of its main thread's CPU per op under redis-benchmark (50
	// clients, no pipelining), so one dedicated core's ceiling, not this
	// shared machine's wall rate. "EXEC" is the usage accounting's whole
	// MULTI/EXEC transaction of ExecBenchCommands commands.
	RedisCeiling map[string]float64 `json:"redis_ceiling"`
}

// Provenance of measured figures.
type Provenance struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Command string `json:"command"`
	Notes   string `json:"notes,omitempty"`
}

// PathCost is one decision path's measured cost per statement, whole
// statements (POST and every poll to the last page) through the real
// binary.
type PathCost struct {
	// Statements is how many were measured.
	Statements int `json:"statements"`
	// CPUSeconds is the proxy process's CPU (user + system, every thread,
	// ONNX Runtime's included) per statement.
	CPUSeconds float64 `json:"cpu_seconds"`
	// Explains is the EXPLAINs sent to the coordinator per statement (hot
	// path and background); ExplainSeconds their wall time per statement
	// (the coordinator's round trip, not the proxy's CPU).
	Explains       float64 `json:"explains"`
	ExplainSeconds float64 `json:"explain_seconds"`
	// DecideSeconds is the mean decision time the proxy reported
	// (Server-Timing prestroid), EXPLAIN included.
	DecideSeconds float64 `json:"decide_seconds"`
	// Share is the share of the statements that took the path meant
	// (Server-Timing), a check on the measurement.
	Share float64 `json:"share"`
}

// RedisCost is one feature's Redis cost per statement (or per second, for
// RedisIdle).
type RedisCost struct {
	Statements int `json:"statements,omitempty"`
	// Ops are the commands the proxy sent (round trips, pipelined ones
	// counted each), by command ("EVALSHA enter.lua", "GET", ...).
	Ops map[string]float64 `json:"ops"`
	// RoundTrips are the writes the proxy made (a pipeline or a
	// MULTI/EXEC transaction is one).
	RoundTrips float64 `json:"round_trips"`
	// Commands is every command Redis executed, those inside scripts
	// included (INFO commandstats).
	Commands float64 `json:"commands"`
	// BytesIn and BytesOut are the bytes the proxy sent to Redis and
	// received from it.
	BytesIn  float64 `json:"bytes_in"`
	BytesOut float64 `json:"bytes_out"`
	// CPUSeconds is Redis' main-thread CPU (INFO cpu).
	CPUSeconds float64 `json:"cpu_seconds"`
	// ProxyCPUSeconds is the proxy's CPU per statement in the feature's
	// measurement (for the features but the history, run without an
	// estimator: the pass-through floor plus the feature's own cost).
	ProxyCPUSeconds float64 `json:"proxy_cpu_seconds,omitempty"`
	// BasePath is the decision path the feature's measurement ran on
	// (its proxy CPU less that path's is the feature's own). Empty means
	// PathPassthrough.
	BasePath string `json:"base_path,omitempty"`
}

// Check is a measurement with every feature on at once, to hold the
// model's sum of separately measured costs against.
type Check struct {
	// Mix and Features as a Scenario takes them.
	Mix      map[string]float64 `json:"mix"`
	Features []string           `json:"features"`
	// Statements measured; CPUSeconds the proxy's CPU per statement.
	Statements int     `json:"statements"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// Redis is the Redis cost per statement.
	Redis RedisCost `json:"redis"`
}

// TotalOps is the sum of Ops.
func (r RedisCost) TotalOps() float64 {
	var n float64
	for _, v := range r.Ops {
		n += v
	}
	return n
}

//go:embed measured.json
var measuredJSON []byte

// Measured returns the committed figures (measured.json).
func Measured() (Figures, error) { return parseFigures(measuredJSON) }

// Load reads figures from a file written by `prestroid bench capacity`.
func Load(path string) (Figures, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Figures{}, err
	}
	return parseFigures(b)
}

func parseFigures(b []byte) (Figures, error) {
	var f Figures
	if err := json.Unmarshal(b, &f); err != nil {
		return Figures{}, fmt.Errorf("capacity: figures: %w", err)
	}
	return f, nil
}
