package console

import (
	"sync"
	"time"

	"github.com/prestroid/prestroid/estimate"
)

// The console's memory: a bounded ring of the most recent placed queries,
// no database. The proxy writes a query once, when its first page gives it
// a Trino id (Ring.Add), and completes it once, when its last page passes
// with Trino's final statistics (Ring.Finish). A replica's ring holds the
// queries it placed; one whose last page passed through another replica
// stays unfinished here.

// Record is one placed query as the console shows it. The proxy fills it
// from the query it tracks; strings are shared with it (nothing is
// copied), and Add drops the estimate's plan and learning bytes so the
// ring never holds a plan.
type Record struct {
	Routed    time.Time // when its first page came back
	QueryID   string
	User      string // the decision's identity (the user admission counts)
	Source    string // X-Trino-Source
	Cluster   string
	Class     string
	Decision  string // X-Prestroid-Decision
	Kind      string // the decision's kind, as the metrics label it
	Queued    bool   // it waited for admission
	Estimated bool
	Estimate  estimate.Estimate
	Took      time.Duration // deciding, estimate included

	// Final is zero until the last page passed (Ring.Finish).
	Final

	seq uint64
}

// Final is how a placed query ended, from its last page.
type Final struct {
	Finished   time.Time
	State      string // Trino's final state
	ErrorName  string
	CPUSeconds float64 // Trino's cpuTimeMillis, in seconds
	// PeakMemoryBytes and ElapsedSeconds are Trino's peakMemoryBytes and
	// elapsedTimeMillis (in seconds).
	PeakMemoryBytes float64
	ElapsedSeconds  float64
}

// qError is the estimate's error on a query that finished
// (estimate.QError); ok is false when there is none to compare.
func (d *Record) qError() (q float64, ok bool) {
	if d.Finished.IsZero() || !d.Estimated || d.State != "FINISHED" {
		return 0, false
	}
	return estimate.QError(d.Estimate.CPUSeconds, d.CPUSeconds)
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

// Ring is a fixed-size ring of Records plus per-cluster counts of queries
// routed per minute. Safe for concurrent use; Add and Finish take one
// short lock and allocate nothing.
type Ring struct {
	mu     sync.Mutex
	recs   []Record
	seq    uint64                                 // of the last record written; 0: none yet
	routed map[string]*[routedMinutes]minuteCount // by cluster name, fixed at creation
}

// NewRing keeps the last n placed queries (at least one) and counts those
// routed to the named clusters.
func NewRing(n int, clusters []string) *Ring {
	r := &Ring{recs: make([]Record, max(n, 1)), routed: make(map[string]*[routedMinutes]minuteCount, len(clusters))}
	for _, c := range clusters {
		r.routed[c] = new([routedMinutes]minuteCount)
	}
	return r
}

// Add writes rec over the oldest record and counts it for its cluster in
// the minute rec.Routed; it returns the record's sequence number for
// Finish (never 0).
func (r *Ring) Add(rec Record) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq++
	p := &r.recs[(r.seq-1)%uint64(len(r.recs))]
	*p = rec
	p.seq, p.Final = r.seq, Final{}
	p.Estimate.Plan, p.Estimate.Learn = nil, nil
	if m := r.routed[rec.Cluster]; m != nil {
		minute := rec.Routed.Unix() / 60
		b := &m[minute%routedMinutes]
		if b.minute != minute {
			b.minute, b.n = minute, 0
		}
		b.n++
	}
	return r.seq
}

// Finish completes record seq with how its query ended, unless newer
// queries have overwritten it (seq 0: no record, nothing to do).
func (r *Ring) Finish(seq uint64, f Final) {
	if seq == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := &r.recs[(seq-1)%uint64(len(r.recs))]
	if rec.seq != seq {
		return
	}
	rec.Final = f
}

// snapshot copies up to n records, newest first.
func (r *Ring) snapshot(n int) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := int(min(r.seq, uint64(len(r.recs))))
	n = min(n, held)
	out := make([]Record, 0, max(n, 0))
	for s := r.seq; len(out) < n; s-- {
		out = append(out, r.recs[(s-1)%uint64(len(r.recs))])
	}
	return out
}

// routedSince is the number of queries routed to cluster in the current
// minute and the minutes-1 before it (minutes is clamped to
// [1, routedMinutes]).
func (r *Ring) routedSince(cluster string, now time.Time, minutes int) int64 {
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
func (r *Ring) capacity() int { return len(r.recs) }
