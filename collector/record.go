// Package collector runs SQL workloads against Trino or PrestoDB and
// records, per query, the EXPLAIN plan and the measured execution
// statistics: the training data of the cost model. The record format
// (RECORD.md) is shared with the proxy's feedback log, which writes the same
// records for live traffic.
//
// Files are gzip-compressed JSON Lines (".jsonl.gz"). Every record is written
// as its own gzip member, so a file is valid after every record and a killed
// writer leaves at most one truncated member at the end, which OpenWriter
// cuts off before appending (see writer.go).
package collector

import (
	"encoding/json"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
)

// RecordVersion is the value of Record.Version written by this package.
// Readers accept every version up to this one; a change that removes or
// re-types a field bumps it (adding an optional field does not).
const RecordVersion = 1

// Sources of a record.
const (
	SourceCollector = "collector" // written by `prestroid collect`
	SourceProxy     = "proxy"     // written by the proxy's feedback log
)

// Outcome of a record (Record.Status).
const (
	StatusFinished      = "FINISHED"       // the query ran to completion; Stats are final
	StatusFailed        = "FAILED"         // Trino failed the query; Error says why
	StatusTimeout       = "TIMEOUT"        // the collector's timeout cancelled it; Stats are partial
	StatusExplainFailed = "EXPLAIN_FAILED" // EXPLAIN failed; the query was not run
	StatusClientError   = "CLIENT_ERROR"   // the client failed (network, protocol); Stats may be missing
)

// Record is one query: what was sent, its plan, what it cost, and (for the
// proxy) what was predicted and where it went. Fields that a writer does not
// know stay at their zero value and are omitted from the JSON.
type Record struct {
	Version int    `json:"v"`
	Source  string `json:"source"`
	// Key identifies the planned query (collector: a stable hash of template,
	// parameters, scale, session and repetition, see Item.Key; proxy: the
	// query id). A file holds each key at most once.
	Key    string `json:"key"`
	Status string `json:"status"`

	QueryID string `json:"query_id,omitempty"`
	// TrinoVersion is a Trino coordinator's version (/v1/info); Engine and
	// EngineVersion name any other engine and its version ("presto",
	// "0.296-8661b73"). A Trino record leaves Engine empty, as every record
	// did before the field existed: read them with EngineName and
	// ServerVersion.
	TrinoVersion  string `json:"trino_version,omitempty"`
	Engine        string `json:"engine,omitempty"`
	EngineVersion string `json:"engine_version,omitempty"`
	Server        string `json:"server,omitempty"`
	User          string `json:"user,omitempty"`
	ClientSource  string `json:"client_source,omitempty"` // X-Trino-Source (X-Presto-Source) of the query
	Catalog       string `json:"catalog,omitempty"`
	Schema        string `json:"schema,omitempty"`
	// SessionProperties are the session properties the query ran with (only
	// those set explicitly; Trino's defaults apply to the rest).
	SessionProperties map[string]string `json:"session_properties,omitempty"`
	SQL               string            `json:"sql"`

	Workload *Workload `json:"workload,omitempty"`
	Plan     *Plan     `json:"plan,omitempty"`
	Stats    *Stats    `json:"stats,omitempty"`
	Error    *Error    `json:"error,omitempty"`

	// Estimate and Route are written by the proxy; the collector leaves them
	// empty.
	Estimate *Estimate `json:"estimate,omitempty"`
	Route    *Route    `json:"route,omitempty"`

	SubmittedAt time.Time `json:"submitted_at"`
	FinishedAt  time.Time `json:"finished_at"`
	// ResultRows is the number of rows the client drained.
	ResultRows int64 `json:"result_rows,omitempty"`
	// Collector describes the run that wrote the record.
	Collector *RunInfo `json:"collector,omitempty"`
	// Load is the collecting host's load average around the execution
	// (collector only; absent where /proc/loadavg is not readable).
	Load *Load `json:"load,omitempty"`
	// Warmth says whether the Trino JVM had run the query's shape before
	// (collector only; absent when the server's identity was unknown).
	Warmth *Warmth `json:"warmth,omitempty"`
}

// EngineName is the engine that ran the query: Engine, or "trino" when the
// record does not say (Trino's records, and all written before the field).
func (r *Record) EngineName() string {
	if r.Engine == "" {
		return string(dialect.Trino)
	}
	return r.Engine
}

// ServerVersion is the coordinator's version: EngineVersion, or
// TrinoVersion for Trino's records.
func (r *Record) ServerVersion() string {
	if r.EngineVersion != "" {
		return r.EngineVersion
	}
	return r.TrinoVersion
}

// Load is the 1-, 5- and 15-minute load average of the collecting host
// (/proc/loadavg), read just before the query was submitted and just after
// it ended. The harness runs Trino on that host, so a load well above the
// query's own parallelism means something else competed for the CPU.
type Load struct {
	Before [3]float64 `json:"before"`
	After  [3]float64 `json:"after"`
}

// Warmth is the query's shape and whether the Trino JVM that ran it had
// run that shape before. Trino compiles bytecode per expression and
// operator shape, so a shape's first run on a fresh JVM pays compilation
// (and JIT warm-up) in its CPU time; a long-running coordinator has
// mostly warm shapes.
type Warmth struct {
	// Shape is the first 16 hex of SHA-256 over catalog, schema, sorted
	// session properties and the SQL fingerprint (literals replaced:
	// sqllex.Fingerprint).
	Shape string `json:"shape"`
	// Warm: a query of this shape ran on this JVM before, as far as the
	// record file knows (its earlier records with the same JVM included).
	Warm bool `json:"warm"`
	// Node and StartedAt identify the JVM: Trino's node id and its start
	// time (now minus /v1/status's uptime, to the second; uptime has three
	// significant digits, so restarts are told apart by more than 1% of
	// the uptime).
	Node      string    `json:"node"`
	StartedAt time.Time `json:"started_at"`
}

// Workload says where a collector query came from.
type Workload struct {
	Family   string `json:"family"`   // "tpcds", "tpch" or "gen" (generated large queries)
	Template string `json:"template"` // e.g. "tpcds/q03", "gen/union"; the unit of the train/val/test split
	Variant  int    `json:"variant"`  // 0 = the file's own qualification values
	Scale    string `json:"scale"`    // connector scale: "tiny", "sf1", ...
	// Storage is the catalog of the materialized Parquet copies the query
	// ran on (schema SchemaName(family, scale)); empty: the connector.
	Storage string            `json:"storage,omitempty"`
	Params  map[string]string `json:"params,omitempty"`
	Seed    int64             `json:"seed"`
	Rep     int               `json:"rep,omitempty"` // repetition index (noise measurement); 0 for the first run
}

// Plan is the EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) of the query, taken by
// estimator.ExplainClient with the query's own session just before it ran.
type Plan struct {
	// JSON is the plan as Trino returned it, compacted (whitespace removed).
	JSON           json.RawMessage `json:"json,omitempty"`
	QueryID        string          `json:"query_id,omitempty"` // id of the EXPLAIN query
	ElapsedMillis  int64           `json:"elapsed_ms,omitempty"`
	AnalysisMillis int64           `json:"analysis_ms,omitempty"`
	PlanningMillis int64           `json:"planning_ms,omitempty"`
	WallMillis     int64           `json:"wall_ms,omitempty"` // client-side round trip of the EXPLAIN
	// OTP summarises the O-T-P tree built from JSON by estimator.BuildOTP.
	OTP   *OTPSummary `json:"otp,omitempty"`
	Error string      `json:"error,omitempty"` // featurizer error, if the plan did not convert
}

// OTPSummary is estimator.Stats of the plan's O-T-P tree.
type OTPSummary struct {
	Nodes    int      `json:"nodes"`
	MaxDepth int      `json:"max_depth"`
	Preds    int      `json:"preds"`
	Tables   []string `json:"tables,omitempty"`
}

// Stats are the engine's final statistics of the execution. Times are
// milliseconds; -1 means unknown. PrestoDB's protocol has no physical input
// bytes: its records take them from /v1/query's rawInputDataSize (the bytes
// the connectors read, Trino's physicalInputDataSize under its older name).
type Stats struct {
	State              string `json:"state"`
	CPUMillis          int64  `json:"cpu_ms"`          // the label: total CPU time over all tasks
	WallMillis         int64  `json:"wall_ms"`         // total scheduled time summed over drivers (not wall clock)
	ElapsedMillis      int64  `json:"elapsed_ms"`      // wall clock from creation to end, server side
	QueuedMillis       int64  `json:"queued_ms"`       //
	AnalysisMillis     int64  `json:"analysis_ms"`     // from /v1/query/{id}; -1 if unavailable
	PlanningMillis     int64  `json:"planning_ms"`     // from /v1/query/{id}; -1 if unavailable
	PlanningCPUMillis  int64  `json:"planning_cpu_ms"` // from /v1/query/{id}; -1 if unavailable
	ClientMillis       int64  `json:"client_ms"`       // wall clock measured by the client, submit to last row
	PeakMemoryBytes    int64  `json:"peak_memory_bytes"`
	ProcessedRows      int64  `json:"processed_rows"`
	ProcessedBytes     int64  `json:"processed_bytes"`
	PhysicalInputBytes int64  `json:"physical_input_bytes"`
	SpilledBytes       int64  `json:"spilled_bytes"`
	Splits             int    `json:"splits"`
	Nodes              int    `json:"nodes"`
	// OperatorCPUMillis is the CPU time per operator type (e.g.
	// "ScanFilterAndProjectOperator", "LookupJoinOperator") from
	// /v1/query/{id}'s operator summaries, summed over input, output and
	// finish; only with collect --operator-stats.
	OperatorCPUMillis map[string]float64 `json:"operator_cpu_ms,omitempty"`
	// PeakTotalMemoryBytes is PrestoDB's peak total (user and system)
	// memory (its protocol's peakTotalMemoryBytes); Trino's records omit it.
	PeakTotalMemoryBytes int64 `json:"peak_total_memory_bytes,omitempty"`
}

// Error is why a query did not finish.
type Error struct {
	Name    string `json:"name,omitempty"` // Trino errorName, e.g. EXCEEDED_TIME_LIMIT, or a collector name (TIMEOUT, CLIENT)
	Type    string `json:"type,omitempty"` // Trino errorType: USER_ERROR, INTERNAL_ERROR, INSUFFICIENT_RESOURCES, EXTERNAL
	Code    int    `json:"code,omitempty"`
	Message string `json:"message"`
}

// Estimate is the proxy's prediction for the query.
type Estimate struct {
	ModelID   string  `json:"model_id,omitempty"`
	CPUMillis float64 `json:"cpu_ms"`
	Millis    float64 `json:"latency_ms,omitempty"` // time spent estimating
	FailOpen  string  `json:"fail_open,omitempty"`  // why no estimate was made, if none
	// Source is the estimate cascade's stage (history, model+residual,
	// model, optimizer, cheap); LoCPUMillis and HiCPUMillis its central
	// 80% interval; ModelCPUMillis the model's own number before the
	// cascade's corrections (0 when the model did not run).
	Source         string  `json:"source,omitempty"`
	LoCPUMillis    float64 `json:"lo_cpu_ms,omitempty"`
	HiCPUMillis    float64 `json:"hi_cpu_ms,omitempty"`
	ModelCPUMillis float64 `json:"model_cpu_ms,omitempty"`
	// PeakMemoryBytes and ElapsedMillis are the predicted peak memory and
	// elapsed time (medians), 0 when the stage that answered predicts
	// neither; the Lo/Hi fields their central 80% intervals.
	PeakMemoryBytes   float64 `json:"peak_memory_bytes,omitempty"`
	LoPeakMemoryBytes float64 `json:"lo_peak_memory_bytes,omitempty"`
	HiPeakMemoryBytes float64 `json:"hi_peak_memory_bytes,omitempty"`
	ElapsedMillis     float64 `json:"elapsed_ms,omitempty"`
	LoElapsedMillis   float64 `json:"lo_elapsed_ms,omitempty"`
	HiElapsedMillis   float64 `json:"hi_elapsed_ms,omitempty"`
}

// Route is the proxy's decision for the query.
type Route struct {
	Cluster  string `json:"cluster,omitempty"`
	Decision string `json:"decision,omitempty"` // e.g. "route", "queue", "reject"
	QueuedMs int64  `json:"queued_ms,omitempty"`
}

// RunInfo describes the collection run that produced a record.
type RunInfo struct {
	Host        string `json:"host,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	TimeoutMs   int64  `json:"timeout_ms,omitempty"`
	Run         string `json:"run,omitempty"` // run id (start time), to tell runs apart
}
