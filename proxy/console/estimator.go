package console

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimate"
)

// The estimator view: what the estimator reports of itself
// (Options.EstimatorStats) and what the ring says of its estimates: the
// q-error of finished queries over time and by source, predicted against
// actual CPU, and the share of scanned tables the model never saw.

type estimatorView struct {
	Estimator       bool           `json:"estimator"` // an estimator is wired
	Model           *modelView     `json:"model"`     // null: none loaded
	Caches          []cacheView    `json:"caches"`
	BatchQueueDepth int            `json:"batch_queue_depth"`
	History         *historyView   `json:"history"` // null: no history
	Drift           driftView      `json:"drift"`
	Sources         []sourceView   `json:"sources"`
	QErrorSeries    []qerrorMinute `json:"qerror_series"` // per minute of finishing
	Points          []point        `json:"points"`        // finished estimated queries, oldest first
}

type modelView struct {
	ID        string    `json:"id"`
	Source    string    `json:"source"`
	Created   string    `json:"created,omitempty"`
	Loaded    time.Time `json:"loaded"`
	Untrained bool      `json:"untrained"`
}

type cacheView struct {
	Name      string   `json:"name"`
	Hits      uint64   `json:"hits"`
	Misses    uint64   `json:"misses"`
	Evictions uint64   `json:"evictions"`
	HitRate   *float64 `json:"hit_rate"` // null before the first lookup
}

type historyView struct {
	Entries  int    `json:"entries"`
	Observed uint64 `json:"observed"`
	Dropped  uint64 `json:"dropped"`
}

// driftView is the share of scanned tables the model never saw in
// training: since the process started (the metric
// prestroid_unseen_table_share_ratio) and over the ring's queries.
type driftView struct {
	Tables             uint64   `json:"tables"`
	UnseenShare        *float64 `json:"unseen_share"` // null before a table was scanned
	RecentTables       int      `json:"recent_tables"`
	RecentUnseenShare  *float64 `json:"recent_unseen_share"`
	RecentUnseenTables int      `json:"recent_unseen_tables"`
}

type sourceView struct {
	Source    string   `json:"source"`
	Estimates int      `json:"estimates"` // placed queries estimated by it (in the ring)
	Finished  int      `json:"finished"`  // of which finished with a q-error
	QErrorP50 *float64 `json:"qerror_p50"`
	QErrorP90 *float64 `json:"qerror_p90"`
}

type qerrorMinute struct {
	Minute time.Time `json:"minute"`
	N      int       `json:"n"`
	P50    float64   `json:"p50"`
	P90    float64   `json:"p90"`
}

type point struct {
	QueryID   string    `json:"query_id"`
	Finished  time.Time `json:"finished"`
	Predicted float64   `json:"predicted_cpu_seconds"`
	Lo        float64   `json:"lo_seconds"`
	Hi        float64   `json:"hi_seconds"`
	Actual    float64   `json:"actual_cpu_seconds"`
	QError    float64   `json:"qerror"`
	Source    string    `json:"source"`
}

// estimator builds the view from recs (newest first).
func (h *Handler) estimator(recs []Record) estimatorView {
	v := estimatorView{Estimator: h.opts.Estimator, Caches: []cacheView{}, Sources: []sourceView{},
		QErrorSeries: []qerrorMinute{}, Points: []point{}}
	if h.opts.EstimatorStats != nil {
		st := h.opts.EstimatorStats()
		v.BatchQueueDepth = st.BatchQueueDepth
		if m := st.Model; m != nil {
			v.Model = &modelView{ID: m.ID, Source: m.Source, Created: m.Created, Loaded: m.Loaded, Untrained: m.Untrained}
		}
		if h := st.History; h != nil {
			v.History = &historyView{Entries: h.Entries, Observed: h.Observed, Dropped: h.Dropped}
		}
		for _, c := range st.Caches {
			cc := cacheView{Name: c.Name, Hits: c.Hits, Misses: c.Misses, Evictions: c.Evictions}
			if n := c.Hits + c.Misses; n > 0 {
				r := float64(c.Hits) / float64(n)
				cc.HitRate = &r
			}
			v.Caches = append(v.Caches, cc)
		}
	}
	known, unknown := h.opts.Proxy.TablesScanned()
	v.Drift.Tables = known + unknown
	if v.Drift.Tables > 0 {
		r := float64(unknown) / float64(v.Drift.Tables)
		v.Drift.UnseenShare = &r
	}

	bySource := map[estimate.Source]*sourceView{}
	qs := map[estimate.Source][]float64{}
	minutes := map[int64][]float64{}
	for i := len(recs) - 1; i >= 0; i-- { // oldest first
		r := &recs[i]
		if !r.Estimated {
			continue
		}
		e := &r.Estimate
		v.Drift.RecentTables += e.Tables
		v.Drift.RecentUnseenTables += e.UnknownTables
		src := bySource[e.Source]
		if src == nil {
			src = &sourceView{Source: e.Source.String()}
			bySource[e.Source] = src
		}
		src.Estimates++
		q, ok := r.qError()
		if !ok {
			continue
		}
		src.Finished++
		qs[e.Source] = append(qs[e.Source], q)
		m := r.Finished.Unix() / 60
		minutes[m] = append(minutes[m], q)
		lo, hi := e.Interval()
		v.Points = append(v.Points, point{QueryID: r.QueryID, Finished: r.Finished, Predicted: finite(e.CPUSeconds),
			Lo: finite(lo), Hi: finite(hi), Actual: r.CPUSeconds, QError: finite(q), Source: e.Source.String()})
	}
	if v.Drift.RecentTables > 0 {
		r := float64(v.Drift.RecentUnseenTables) / float64(v.Drift.RecentTables)
		v.Drift.RecentUnseenShare = &r
	}
	for src, c := range bySource {
		if q := qs[src]; len(q) > 0 {
			p50, p90 := quantile(q, 0.5), quantile(q, 0.9)
			c.QErrorP50, c.QErrorP90 = &p50, &p90
		}
		v.Sources = append(v.Sources, *c)
	}
	slices.SortFunc(v.Sources, func(a, b sourceView) int {
		if a.Estimates != b.Estimates {
			return b.Estimates - a.Estimates
		}
		return strings.Compare(a.Source, b.Source)
	})
	for m, q := range minutes {
		v.QErrorSeries = append(v.QErrorSeries, qerrorMinute{Minute: time.Unix(m*60, 0).UTC(), N: len(q),
			P50: finite(quantile(q, 0.5)), P90: finite(quantile(q, 0.9))})
	}
	slices.SortFunc(v.QErrorSeries, func(a, b qerrorMinute) int { return a.Minute.Compare(b.Minute) })
	return v
}

// quantile is the nearest-rank q-quantile of xs (sorted in place).
func quantile(xs []float64, q float64) float64 {
	slices.Sort(xs)
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}
