package proxy

import (
	"math"
	"sync"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/routing"
)

// The web console's memory (console_http.go serves it): a bounded ring of
// the most recent placed queries, no database. A query is written once,
// when its first page gives it a Trino id (respond, server.go), and
// completed once, when its last page passes with Trino's final statistics
// (complete, feedback.go). A replica's ring holds the queries it placed;
// one whose last page passed through another replica stays unfinished
// here.

// decisionRecord is one placed query as the console shows it. Strings are
// shared with the tracked query (nothing is copied); the estimate's plan
// and learning bytes are dropped so the ring never holds a plan.
type decisionRecord struct {
	Seq       uint64
	Routed    time.Time // when its first page came back
	QueryID   string
	User      string // the decision's identity (Identity.User)
	Source    string // X-Trino-Source
	Cluster   string
	Class     string
	Decision  string // X-Prestroid-Decision
	Kind      routing.DecisionKind
	Queued    bool // it waited for admission
	Estimated bool
	Estimate  estimate.Estimate
	Took      time.Duration // deciding, estimate included

	// Set when the last page passed (zero Finished until then).
	Finished   time.Time
	State      string // Trino's final state
	ErrorName  string
	CPUSeconds float64 // Trino's cpuTimeMillis, in seconds
}

// qError is max(pred/actual, actual/pred), the estimate's error on a
// query that finished; ok is false when there is none to compare.
func (d *decisionRecord) qError() (q float64, ok bool) {
	if d.Finished.IsZero() || !d.Estimated || d.State != "FINISHED" {
		return 0, false
	}
	return qError(d.Estimate.CPUSeconds, d.CPUSeconds)
}

// qError is max(pred/actual, actual/pred) of two CPU times; ok is false
// when either is not positive.
func qError(pred, actual float64) (float64, bool) {
	if !(pred > 0) || !(actual > 0) {
		return 0, false
	}
	return math.Max(pred/actual, actual/pred), true
}

// routedMinutes is how many minutes of per-cluster routing counts the ring
// keeps (the console's "queries routed in the last N minutes", N ≤ it).
const routedMinutes = 60

// minuteCount is the number of queries routed to a cluster in one minute
// (minute: Unix minutes).
type minuteCount struct {
	minute int64
	n      int64
}

// decisionRing is a fixed-size ring of decisionRecords plus per-cluster
// counts of queries routed per minute. Safe for concurrent use; add and
// finish take one short lock and allocate nothing.
type decisionRing struct {
	mu     sync.Mutex
	recs   []decisionRecord
	seq    uint64                                 // of the last record written; 0: none yet
	routed map[string]*[routedMinutes]minuteCount // by cluster name, fixed at creation
}

// newDecisionRing keeps the last n decisions (n ≥ 1) of the named
// clusters.
func newDecisionRing(n int, clusters []string) *decisionRing {
	r := &decisionRing{recs: make([]decisionRecord, max(n, 1)), routed: make(map[string]*[routedMinutes]minuteCount, len(clusters))}
	for _, c := range clusters {
		r.routed[c] = new([routedMinutes]minuteCount)
	}
	return r
}

// add writes the query placed by d, known from its first page as id and
// tracked as c, over the oldest record; it returns the record's sequence
// number for finish.
func (r *decisionRing) add(id string, c *Completed, d *decision, now time.Time) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	rec := &r.recs[(r.seq-1)%uint64(len(r.recs))]
	*rec = decisionRecord{Seq: r.seq, Routed: now, QueryID: id, User: c.User, Source: c.Source, Cluster: c.Cluster,
		Class: c.Class, Decision: c.Decision, Kind: c.Kind, Queued: d.Queued, Estimated: c.Estimated,
		Estimate: c.Estimate, Took: d.took}
	rec.Estimate.Plan, rec.Estimate.Learn = nil, nil
	if m := r.routed[c.Cluster]; m != nil {
		minute := now.Unix() / 60
		b := &m[minute%routedMinutes]
		if b.minute != minute {
			b.minute, b.n = minute, 0
		}
		b.n++
	}
	return r.seq
}

// finish completes record seq with the query's final page, unless newer
// queries have overwritten it.
func (r *decisionRing) finish(seq uint64, c *Completed) {
	if seq == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &r.recs[(seq-1)%uint64(len(r.recs))]
	if rec.Seq != seq {
		return
	}
	rec.Finished, rec.State, rec.ErrorName = c.Finished, c.State, c.ErrorName
	rec.CPUSeconds = float64(c.Stats.CPUTimeMillis) / 1000
}

// snapshot copies up to n records, newest first.
func (r *decisionRing) snapshot(n int) []decisionRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := int(min(r.seq, uint64(len(r.recs))))
	n = min(n, held)
	out := make([]decisionRecord, 0, max(n, 0))
	for s := r.seq; len(out) < n; s-- {
		out = append(out, r.recs[(s-1)%uint64(len(r.recs))])
	}
	return out
}

// routedSince is the number of queries routed to cluster in the current
// minute and the minutes-1 before it (minutes is clamped to
// [1, routedMinutes]).
func (r *decisionRing) routedSince(cluster string, now time.Time, minutes int) int64 {
	minutes = min(max(minutes, 1), routedMinutes)
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.routed[cluster]
	if m == nil {
		return 0
	}
	cur := now.Unix() / 60
	var n int64
	for _, b := range m {
		if b.minute > cur-int64(minutes) && b.minute <= cur {
			n += b.n
		}
	}
	return n
}

// capacity is the number of records the ring holds.
func (r *decisionRing) capacity() int { return len(r.recs) }
