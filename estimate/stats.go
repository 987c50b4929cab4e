package estimate

import (
	"math"
	"time"
)

// Stats is what the estimator reports of itself: its caches, its inference
// batcher, its history and the model it serves. Counters are totals since
// the estimator started. cmd/prestroid fills it from the estimator; the
// proxy exports it on /metrics (prestroid_estimator_*, prestroid_history_*)
// and the web console shows it.
type Stats struct {
	Caches []CacheStats
	// BatchQueueDepth is the number of inferences waiting for a batch.
	BatchQueueDepth int
	// History is the estimate history's state; nil when there is none.
	History *HistoryStats
	// Model is the model being served (the web console shows it); nil
	// when the estimator runs without one.
	Model *ModelStats
	// Background counts the EXPLAINs run off the hot path (the text stage
	// answered: estimator.explain); nil when the estimator runs none.
	Background *BackgroundStats
	// Explains counts the EXPLAINs by reason; nil when the estimator
	// reports none.
	Explains *ExplainStats
	// Intervals are the factors each stage's intervals are served with,
	// per target, learned from the deployment's outcomes; nil without a
	// history.
	Intervals []IntervalStats
}

// IntervalStats is one stage's interval factor of one target on one
// engine's statements: its 80% interval of the Target (Target.String) is
// served with its σ times Factor (1: as the stage computes it), learned
// from whether the Outcomes intervals it served held what the statement
// took.
type IntervalStats struct {
	Engine, Target, Source string
	Factor                 float64
	Outcomes               uint64
}

// ExplainStats count the estimator's EXPLAIN round trips by why they ran
// (Hot: on the hot path, the plan could change the decision; Learn: in the
// background, a shape the model does not know well yet; Drift: the sampled
// fraction of well-known shapes), and those not sent: SkippedCeiling (over
// a cluster's estimator.explain_rate) and SkippedKnown (a background
// EXPLAIN of a well-known shape, or of a statement another user's EXPLAIN
// is planning). A cached estimate runs none.
type ExplainStats struct {
	Hot, Learn, Drift, SkippedCeiling, SkippedKnown uint64
}

// BackgroundStats count the estimator's background EXPLAINs (each with the
// model): Done, Failed, and Skipped (no EXPLAIN slot free).
type BackgroundStats struct {
	Done, Failed, Skipped uint64
}

// ModelStats describe the model the estimator serves.
type ModelStats struct {
	ID      string    // the bundle's model_id
	Source  string    // where it was loaded from (a directory, or the embedded bundle)
	Created string    // the bundle's own creation time, as its manifest says
	Loaded  time.Time // when this process loaded it
	// Untrained is set for a bundle of random weights (tests).
	Untrained bool
}

// HistoryStats describe the estimator's history store.
type HistoryStats struct {
	Entries int // keys held
	// Observed completed queries learned from; Dropped those lost to a
	// full write queue.
	Observed, Dropped uint64
	// Store is the shared store's state (Redis); nil for a store that
	// cannot be unreachable (memory, a file).
	Store *HistoryStoreStats
}

// HistoryStoreStats describe a history store that can be unreachable.
type HistoryStoreStats struct {
	// Errors counts failed calls; Dropped the updates (one key of one
	// completed query each) lost to them.
	Errors, Dropped uint64
	// Down is true while the store is treated as unreachable.
	Down bool
	// HandoffsLeft, Refreshed, Taken and Missed count the queries whose
	// learning record this replica left for the replica that sees their
	// last page, wrote again with its background model's numbers, took
	// from another replica (and learned from), and looked for in vain.
	HandoffsLeft, HandoffsRefreshed, HandoffsTaken, HandoffsMissed uint64
}

// CacheStats are one named cache's counters and size.
type CacheStats struct {
	Name                    string // e.g. "estimate", "predicate"
	Hits, Misses, Evictions uint64
	// Entries and Bytes are what the cache holds now; Bytes is about
	// what they take in memory (each cache says how it counts).
	Entries, Bytes int64
}

// QError is max(pred/actual, actual/pred) of a predicted and an actual
// CPU time, the estimate's error on a query that finished; ok is false
// when either is not positive.
func QError(pred, actual float64) (q float64, ok bool) {
	if !(pred > 0) || !(actual > 0) {
		return 0, false
	}
	return math.Max(pred/actual, actual/pred), true
}
