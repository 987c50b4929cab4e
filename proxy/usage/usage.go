// Package usage is the proxy's cost accounting: what each user, group and
// source spent on the clusters (queries, CPU seconds actual and predicted,
// memory-seconds, wall and elapsed time), from the final statistics Trino
// reports on each query's last page as it passes through the proxy.
//
// A Recorder takes each finished query (Record), counts it in Prometheus
// counters at once (per replica; bounded label sets, see Labels) and
// adds it, off the request path, to a Store of fixed time buckets: one
// process's memory (MemoryStore), or Redis shared by every replica
// (RedisStore), where the replicas' figures add up. Handler serves the
// sums over a window as JSON (GET /prestroid/api/usage). docs/usage.md
// is the operator's guide.
package usage

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Dimension is what usage is grouped by.
type Dimension string

// The dimensions, each recorded for every query.
const (
	ByUser   Dimension = "user"
	BySource Dimension = "source"
	ByGroup  Dimension = "group"
)

// Dimensions are every dimension, in the order they are written.
var Dimensions = []Dimension{ByUser, ByGroup, BySource}

// ParseDimension reads "user", "group" or "source".
func ParseDimension(s string) (Dimension, error) {
	for _, d := range Dimensions {
		if string(d) == s {
			return d, nil
		}
	}
	return "", fmt.Errorf("usage: unknown dimension %q (want user, group or source)", s)
}

// Unknown is the key of a query whose user, group or source is empty
// (no X-Trino-Source, say).
const Unknown = "(none)"

// Query is one finished query's cost, as the proxy saw its last page.
type Query struct {
	User, Group, Source string
	// Cluster and QueryID name the query where it ran (for settling and
	// to account it once).
	Cluster, QueryID string
	// Untracked is set when this replica did not place the query (its
	// last page came through here, its first through another replica):
	// User, Group, Source and the prediction are unknown here. User and
	// Source are then read from the cluster's final info of the query
	// (settle.go), the Group mapped from the User (Options.GroupOf); the
	// query counts as not predicted.
	Untracked bool
	// State is Trino's final state (FINISHED, FAILED); a failed query
	// still spent what its statistics say.
	State string
	// Finished is when its last page passed: it picks the bucket.
	Finished time.Time
	// RolledUp is false when the final page's statistics did not yet
	// include its tasks' (protocol.PageStats.RolledUp): the query is
	// counted (and as incomplete), its figures as reported.
	RolledUp bool
	// Predicted is set when the query had an estimate;
	// PredictedCPUSeconds is its median, PredictedMemoryGBSeconds the
	// predicted peak memory times the predicted elapsed time when both
	// were predicted (else 0), PredictedElapsedSeconds likewise.
	Predicted                bool
	PredictedCPUSeconds      float64
	PredictedMemoryGBSeconds float64
	PredictedElapsedSeconds  float64
	// The actual figures of Trino's final statistics.
	CPUSeconds, WallSeconds, ElapsedSeconds float64
	PeakMemoryBytes                         int64
}

// MemoryGBSeconds is the query's memory-seconds: its peak memory (GB,
// 10^9 bytes) times its elapsed seconds.
func (q *Query) MemoryGBSeconds() float64 {
	return float64(q.PeakMemoryBytes) / 1e9 * q.ElapsedSeconds
}

// Key is the query's key in dimension d (Unknown when empty).
func (q *Query) Key(d Dimension) string {
	var k string
	switch d {
	case ByUser:
		k = q.User
	case ByGroup:
		k = q.Group
	case BySource:
		k = q.Source
	}
	if k == "" {
		return Unknown
	}
	return k
}

// Totals are summed usage: of one key, or of all.
type Totals struct {
	Queries int64 `json:"queries"`
	// Failed counts the queries whose state was not FINISHED.
	Failed int64 `json:"failed"`
	// Incomplete counts the queries whose final statistics were not
	// rolled up (their CPU and wall time may read 0).
	Incomplete int64 `json:"incomplete"`
	// Predicted counts the queries that had an estimate; the predicted_*
	// sums are over those.
	Predicted                int64   `json:"predicted"`
	CPUSeconds               float64 `json:"cpu_seconds"`
	PredictedCPUSeconds      float64 `json:"predicted_cpu_seconds"`
	MemoryGBSeconds          float64 `json:"memory_gb_seconds"`
	PredictedMemoryGBSeconds float64 `json:"predicted_memory_gb_seconds"`
	WallSeconds              float64 `json:"wall_seconds"`
	ElapsedSeconds           float64 `json:"elapsed_seconds"`
	PredictedElapsedSeconds  float64 `json:"predicted_elapsed_seconds"`
}

// fields are Totals' fields by their short names in a store: one place
// that maps one to the other (both stores, both ways).
var fields = []struct {
	name string
	ptr  func(*Totals) any // *int64 or *float64
}{
	{"q", func(t *Totals) any { return &t.Queries }},
	{"f", func(t *Totals) any { return &t.Failed }},
	{"i", func(t *Totals) any { return &t.Incomplete }},
	{"p", func(t *Totals) any { return &t.Predicted }},
	{"cpu", func(t *Totals) any { return &t.CPUSeconds }},
	{"pcpu", func(t *Totals) any { return &t.PredictedCPUSeconds }},
	{"mem", func(t *Totals) any { return &t.MemoryGBSeconds }},
	{"pmem", func(t *Totals) any { return &t.PredictedMemoryGBSeconds }},
	{"wall", func(t *Totals) any { return &t.WallSeconds }},
	{"el", func(t *Totals) any { return &t.ElapsedSeconds }},
	{"pel", func(t *Totals) any { return &t.PredictedElapsedSeconds }},
}

// totalsOf is q's contribution.
func totalsOf(q *Query) Totals {
	t := Totals{Queries: 1, CPUSeconds: q.CPUSeconds, MemoryGBSeconds: q.MemoryGBSeconds(),
		WallSeconds: q.WallSeconds, ElapsedSeconds: q.ElapsedSeconds}
	if q.State != "FINISHED" {
		t.Failed = 1
	}
	if !q.RolledUp {
		t.Incomplete = 1
	}
	if q.Predicted {
		t.Predicted, t.PredictedCPUSeconds = 1, q.PredictedCPUSeconds
		t.PredictedMemoryGBSeconds, t.PredictedElapsedSeconds = q.PredictedMemoryGBSeconds, q.PredictedElapsedSeconds
	}
	return t
}

// Add adds o to t.
func (t *Totals) Add(o *Totals) {
	for _, f := range fields {
		switch p := f.ptr(t).(type) {
		case *int64:
			*p += *f.ptr(o).(*int64)
		case *float64:
			*p += *f.ptr(o).(*float64)
		}
	}
}

// Store holds usage in buckets of time. Implementations are safe for
// concurrent use.
type Store interface {
	// Add adds t to key's totals in dimension d of the bucket that starts
	// at bucket, for every key in keys (one per dimension).
	Add(ctx context.Context, bucket time.Time, keys map[Dimension]string, t *Totals) error
	// Sum is every key's totals in dimension d over the buckets that
	// start in [from, to).
	Sum(ctx context.Context, d Dimension, from, to time.Time) (map[string]*Totals, error)
	// Claim reports whether query id was not claimed before (by any
	// replica sharing the store): the one that claims it accounts it.
	Claim(ctx context.Context, id string) (bool, error)
	// Shared reports whether the store sums every replica's usage.
	Shared() bool
	Close() error
}

// Row is one key's usage in a Report.
type Row struct {
	Key string `json:"key"`
	Totals
}

// Report is usage over a window, by one dimension: the answer of GET
// /prestroid/api/usage.
type Report struct {
	By Dimension `json:"by"`
	// From and To bound the window: whole buckets, From inclusive, To
	// exclusive.
	From          time.Time `json:"from"`
	To            time.Time `json:"to"`
	BucketSeconds float64   `json:"bucket_seconds"`
	// Shared is true when the figures sum every replica that shares the
	// store (Redis); false when they are this replica's alone.
	Shared bool `json:"shared"`
	// Rows are the keys by actual CPU seconds, most first, at most Limit
	// of them; Other sums the rest (absent when there is none).
	Rows   []Row   `json:"rows"`
	Other  *Totals `json:"other,omitempty"`
	Totals Totals  `json:"totals"`
}

// report orders sums into a Report of at most limit rows (0: all).
func report(by Dimension, sums map[string]*Totals, limit int) Report {
	r := Report{By: by, Rows: make([]Row, 0, len(sums))}
	for k, t := range sums {
		r.Rows = append(r.Rows, Row{Key: k, Totals: *t})
		r.Totals.Add(t)
	}
	sort.Slice(r.Rows, func(i, j int) bool {
		a, b := r.Rows[i], r.Rows[j]
		if a.CPUSeconds != b.CPUSeconds {
			return a.CPUSeconds > b.CPUSeconds
		}
		if a.Queries != b.Queries {
			return a.Queries > b.Queries
		}
		return a.Key < b.Key
	})
	if limit > 0 && len(r.Rows) > limit {
		other := &Totals{}
		for i := range r.Rows[limit:] {
			other.Add(&r.Rows[limit+i].Totals)
		}
		r.Rows, r.Other = r.Rows[:limit], other
	}
	return r
}

// cleanFloat is v for JSON: NaN and ±Inf (a broken stat) read as 0.
func cleanFloat(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

// validKey reports whether k can be a key in a store: every store keeps
// keys as they are, but a key is at most 256 bytes (a longer one is cut).
func validKey(k string) string {
	if len(k) > 256 {
		k = k[:256]
	}
	return strings.ToValidUTF8(k, "?")
}
