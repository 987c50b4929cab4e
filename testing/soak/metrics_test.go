package soak

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/redis/go-redis/v9"
)

// sample is one replica's process figures, from its own /metrics (the
// Prometheus Go and process collectors), its admission gauges and its
// estimator caches' sizes.
type sample struct {
	fds, goroutines  int
	kinds            map[string]int // fds by kind (fdKinds); nil where /proc could not be read
	rss              float64        // bytes
	inflight, queued int
	storeErrors      float64            // prestroid_admission_store_errors_total
	heap             float64            // go_memstats_heap_inuse_bytes
	nextGC           float64            // go_memstats_next_gc_bytes: the heap goal the last GC set
	lastGC           float64            // go_memstats_last_gc_time_seconds
	gcs              float64            // go_gc_duration_seconds_count: GCs so far
	retained         float64            // go_memstats_heap_sys_bytes - go_memstats_heap_released_bytes: the heap's memory not given back
	gogc             float64            // go_gc_gogc_percent (100 when not exported)
	caches           map[string]float64 // prestroid_estimator_cache_bytes by cache
	entries          map[string]float64 // prestroid_estimator_cache_entries by cache
}

// live is the Go heap the last GC found live, from the goal it set: the
// runtime sets the goal to the marked heap plus GOGC% of it (and of the
// stacks and globals), so goal / (1 + GOGC/100) is the marked heap plus
// half the stacks and globals at GOGC=100, a bound that moves with the
// live heap and is read without a GC of our own.
func (s sample) live() float64 { return s.nextGC / (1 + s.gogc/100) }

// cacheBytes is the estimator caches' reported bytes, summed.
func (s sample) cacheBytes() float64 {
	var n float64
	for _, b := range s.caches {
		n += b
	}
	return n
}

func (s sample) String() string {
	var cs []string
	for _, c := range slices.Sorted(maps.Keys(s.caches)) {
		cs = append(cs, fmt.Sprintf("%s %.1f MiB / %.0f entries", c, s.caches[c]/(1<<20), s.entries[c]))
	}
	fds := fmt.Sprint(s.fds)
	if s.kinds != nil {
		fds += " (" + kindsString(s.kinds) + ")"
	}
	return fmt.Sprintf("%s fds, %d goroutines, RSS %.1f MiB (Go heap: in use %.1f, live at the last GC %.1f, kept from the OS %.1f MiB), caches %.1f MiB (%s), %d in flight, %d queued",
		fds, s.goroutines, s.rss/(1<<20), s.heap/(1<<20), s.live()/(1<<20), s.retained/(1<<20), s.cacheBytes()/(1<<20),
		strings.Join(cs, ", "), s.inflight, s.queued)
}

// sampleOf reads a replica's sample from its /metrics.
func sampleOf(base string) (sample, error) {
	s := sample{caches: map[string]float64{}, entries: map[string]float64{}}
	m, err := e2e.ReadMetrics(base)
	if err != nil {
		return s, err
	}
	need := func(series string) float64 {
		v, ok := m.Value(series)
		if !ok && err == nil {
			err = fmt.Errorf("soak: %s/metrics has no %s", base, series)
		}
		return v
	}
	s.fds, s.goroutines, s.rss = int(need("process_open_fds")), int(need("go_goroutines")), need("process_resident_memory_bytes")
	s.inflight, s.queued = int(need("prestroid_inflight_queries")), int(need("prestroid_queue_length"))
	if err != nil {
		return s, err
	}
	opt := func(series string) float64 { v, _ := m.Value(series); return v }
	s.storeErrors = opt("prestroid_admission_store_errors_total")
	s.heap, s.nextGC, s.lastGC = opt("go_memstats_heap_inuse_bytes"), opt("go_memstats_next_gc_bytes"), opt("go_memstats_last_gc_time_seconds")
	s.gcs = opt("go_gc_duration_seconds_count")
	s.retained = opt("go_memstats_heap_sys_bytes") - opt("go_memstats_heap_released_bytes")
	s.gogc = 100
	if v, ok := m.Value("go_gc_gogc_percent"); ok {
		s.gogc = v
	}
	for name, into := range map[string]map[string]float64{"prestroid_estimator_cache_bytes": s.caches, "prestroid_estimator_cache_entries": s.entries} {
		for _, x := range m[name].GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "cache" {
					into[l.GetValue()] = x.GetGauge().GetValue()
				}
			}
		}
	}
	return s, nil
}

// slotsHeld says what still holds admission ("" when nothing): each
// replica's in-flight and queue gauges, and Redis' slot set and queue
// length and the in-flight count charged to the budget under prefix.
func slotsHeld(rdb *redis.Client, prefix string, reps []*replica) string {
	var l []string
	for _, r := range reps {
		s, err := sampleOf(r.base)
		if err != nil {
			l = append(l, fmt.Sprintf("replica %s: %v", r.name, err))
		} else if s.inflight != 0 || s.queued != 0 {
			l = append(l, fmt.Sprintf("replica %s: %d in flight, %d queued", r.name, s.inflight, s.queued))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := rdb.ZCard(ctx, prefix+"slots").Result()
	if err != nil {
		l = append(l, "redis: "+err.Error())
	} else if n != 0 {
		l = append(l, fmt.Sprintf("redis: %d slots", n))
	}
	nq, err := rdb.Get(ctx, prefix+"nq").Int()
	if err != nil && err != redis.Nil {
		l = append(l, "redis: "+err.Error())
	} else if nq != 0 {
		l = append(l, fmt.Sprintf("redis: queue length %d", nq))
	}
	if use, err := rdb.HGet(ctx, prefix+"use", "n").Int(); err != nil && err != redis.Nil {
		l = append(l, "redis: "+err.Error())
	} else if use != 0 {
		l = append(l, fmt.Sprintf("redis: %d queries charged to the budget", use))
	}
	return strings.Join(l, "; ")
}

// The leak check's tolerances, beyond what the figures explain:
//
//   - heapSlack: live Go heap growth the estimator caches' reported bytes
//     do not cover. A cached value's allocation is rounded up to its size
//     class (at most 1/8 more: Go's size classes are spaced so that no
//     class wastes over 12.5%), hence caches/8; and a fixed 16 MiB for
//     what survives a GC without being a leak: sync.Pool's victim cache
//     (pools outlive one GC: fasthttp's request contexts and buffers,
//     JSON encoders), the keep-alive connections' read and write buffers
//     to Trino and Redis (a few per cluster and replica, 4-64 KiB each),
//     the in-process history's and usage's write queues' last contents,
//     and the live bound's share of goroutine stacks. A leak grows with the
//     queries (run 3: +120 MiB over 8,748 queries); 16 MiB is under 2 KiB
//     a query at 10,000.
//   - the retained heap: the runtime keeps about its heap goal plus 10%
//     from the OS (the background scavenger's target, retainExtraPercent
//     in runtime/mgcscavenge.go) and returns the rest in the background;
//     16 MiB because that target is the heap in use at the last GC's end
//     (fragmentation included) scaled by the goal's change, not the goal
//     itself, and the scavenger works in 64 KiB chunks paced to 1% of a
//     CPU. Run 7: replica a kept 70.6 MiB 6 minutes after the load, 0.2
//     MiB over 1.1 × its goal + 4, with its live heap 0.2 MiB under the
//     baseline.
//   - nonHeapSlack: resident memory outside the Go heap (RSS less the
//     heap kept from the OS): ONNX Runtime's arena, which grows to the
//     largest batch inferred and keeps it; goroutine stacks (back with the
//     goroutines); GC metadata (a few % of the heap); binary pages first
//     touched by code the load ran.
const (
	heapSlack    = 16 << 20
	nonHeapSlack = 48 << 20
	scavSlack    = 16 << 20
)

// memoryLeaks compares a replica's memory after the load (a) with its
// baseline (b) and says what the estimator caches and the runtime's rules
// leave unexplained ("" when nothing):
//
//   - live heap growth over the caches' growth (+ 1/8) + heapSlack;
//   - the heap kept from the OS over 1.1 × the heap goal + scavSlack;
//   - memory outside the heap (RSS − kept heap) grown by over nonHeapSlack.
//
// Together RSS may grow by (1+GOGC/100)·1.1 × the explained live growth
// plus the slacks, and no more.
//
// live false skips the first two: a's GCs since the load have not yet
// dropped what the load's queries held, and the heap goal the scavenger
// follows is still the load's.
func memoryLeaks(b, a sample, live bool) []string {
	var l []string
	mib := func(x float64) float64 { return x / (1 << 20) }
	dCaches := a.cacheBytes() - b.cacheBytes()
	dLive := a.live() - b.live()
	if allowed := max(0, dCaches) + max(0, dCaches)/8 + heapSlack; live && dLive > allowed {
		l = append(l, fmt.Sprintf("live heap %.1f -> %.1f MiB (+%.1f), caches +%.1f MiB: %.1f MiB unexplained, over the %.1f MiB allowed",
			mib(b.live()), mib(a.live()), mib(dLive), mib(dCaches), mib(dLive-max(0, dCaches)), mib(allowed-max(0, dCaches))))
	}
	if keep := 1.1*a.nextGC + scavSlack; live && a.retained > keep {
		l = append(l, fmt.Sprintf("heap kept from the OS %.1f MiB, over 1.1 x the heap goal %.1f MiB + %.0f MiB", mib(a.retained), mib(a.nextGC), mib(scavSlack)))
	}
	if nb, na := b.rss-b.retained, a.rss-a.retained; na > nb+nonHeapSlack {
		l = append(l, fmt.Sprintf("RSS outside the Go heap %.1f -> %.1f MiB, over +%.0f MiB", mib(nb), mib(na), mib(nonHeapSlack)))
	}
	return l
}
