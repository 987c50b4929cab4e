package proxy

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// A small Prometheus text-format registry: counters by label set and
// fixed-bucket histograms. Served at GET /metrics.

type metrics struct {
	mu         sync.Mutex
	counters   map[string]map[string]float64 // name -> labels -> value
	histograms map[string]*histogram
	help       map[string]string
}

type histogram struct {
	bounds []float64
	counts []uint64 // per bucket, plus +Inf at the end
	sum    float64
	n      uint64
}

func newMetrics() *metrics {
	m := &metrics{counters: map[string]map[string]float64{}, histograms: map[string]*histogram{}, help: map[string]string{}}
	for name, h := range map[string]string{
		"prestroid_decisions_total":          "Placement decisions of new queries, by class, cluster and kind.",
		"prestroid_fail_open_total":          "Queries forwarded unestimated because the estimate failed or was slow.",
		"prestroid_failover_total":           "New queries sent to another cluster because theirs refused the connection, by the unreachable cluster.",
		"prestroid_estimate_cache_total":     "Estimates served from the estimate cache (result=hit) or computed (miss).",
		"prestroid_queued_total":             "Queries that waited in the admission queue.",
		"prestroid_completed_queries_total":  "Queries whose last page passed through the proxy, by final state.",
		"prestroid_scanned_tables_total":     "Tables scanned by estimated queries, by whether the model knows them (the drift signal).",
		"prestroid_queue_wait_seconds":       "Time queries waited in the admission queue.",
		"prestroid_estimate_seconds":         "Time to estimate a query (EXPLAIN, featurize, infer).",
		"prestroid_explain_seconds":          "EXPLAIN latency.",
		"prestroid_qerror":                   "q-error of completed queries: max(pred/actual, actual/pred) of CPU time.",
		"prestroid_queue_length":             "Queries waiting in the admission queue.",
		"prestroid_inflight_queries":         "Admitted queries in flight (admission control).",
		"prestroid_cluster_healthy":          "1 when the cluster's /v1/info says it is up.",
		"prestroid_cluster_queries":          "Running plus queued queries on the cluster at the last check.",
		"prestroid_unseen_table_share_ratio": "Share of scanned tables the model has never seen, over all estimated queries.",
	} {
		m.help[name] = h
	}
	lat := []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5}
	m.histograms["prestroid_estimate_seconds"] = newHistogram(lat)
	m.histograms["prestroid_explain_seconds"] = newHistogram(lat)
	m.histograms["prestroid_queue_wait_seconds"] = newHistogram([]float64{.1, .5, 1, 5, 10, 30, 60, 300, 600})
	m.histograms["prestroid_qerror"] = newHistogram([]float64{1.1, 1.25, 1.5, 2, 3, 5, 10, 30, 100})
	return m
}

func newHistogram(b []float64) *histogram {
	return &histogram{bounds: b, counts: make([]uint64, len(b)+1)}
}

// labels renders alternating key, value pairs.
func labels(kv ...string) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", kv[i], kv[i+1])
	}
	return b.String()
}

func (m *metrics) add(name string, v float64, kv ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.counters[name]
	if c == nil {
		c = map[string]float64{}
		m.counters[name] = c
	}
	c[labels(kv...)] += v
}

func (m *metrics) observe(name string, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := m.histograms[name]
	if h == nil || math.IsNaN(v) {
		return
	}
	i := sort.SearchFloat64s(h.bounds, v)
	h.counts[i]++
	h.sum += v
	h.n++
}

func (m *metrics) observeDuration(name string, d time.Duration) { m.observe(name, d.Seconds()) }

// write renders every metric; gauges come from g.
func (m *metrics) write(w io.Writer, gauges map[string]map[string]float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	emit := func(name, typ string, series map[string]float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, m.help[name], name, typ)
		keys := make([]string, 0, len(series))
		for k := range series {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "" {
				fmt.Fprintf(w, "%s %g\n", name, series[k])
			} else {
				fmt.Fprintf(w, "%s{%s} %g\n", name, k, series[k])
			}
		}
	}
	names := make([]string, 0, len(m.counters))
	for n := range m.counters {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		emit(n, "counter", m.counters[n])
	}
	gnames := make([]string, 0, len(gauges))
	for n := range gauges {
		gnames = append(gnames, n)
	}
	sort.Strings(gnames)
	for _, n := range gnames {
		emit(n, "gauge", gauges[n])
	}
	hnames := make([]string, 0, len(m.histograms))
	for n := range m.histograms {
		hnames = append(hnames, n)
	}
	sort.Strings(hnames)
	for _, n := range hnames {
		h := m.histograms[n]
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s histogram\n", n, m.help[n], n)
		var cum uint64
		for i, b := range h.bounds {
			cum += h.counts[i]
			fmt.Fprintf(w, "%s_bucket{le=\"%g\"} %d\n", n, b, cum)
		}
		cum += h.counts[len(h.bounds)]
		fmt.Fprintf(w, "%s_bucket{le=\"+Inf\"} %d\n%s_sum %g\n%s_count %d\n", n, cum, n, h.sum, n, h.n)
	}
}
