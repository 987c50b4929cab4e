package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// sample is one replica's process figures, from its own /metrics (the
// Prometheus Go and process collectors) and its admission gauges.
type sample struct {
	fds, goroutines  int
	rss              float64 // bytes
	inflight, queued int
	storeErrors      float64 // prestroid_admission_store_errors_total
	heap             float64 // go_memstats_heap_inuse_bytes (reported, not judged: it tells retained heap from RSS)
}

func (s sample) String() string {
	return fmt.Sprintf("%d fds, %d goroutines, RSS %.1f MiB (Go heap in use %.1f MiB), %d in flight, %d queued",
		s.fds, s.goroutines, s.rss/(1<<20), s.heap/(1<<20), s.inflight, s.queued)
}

var metricsClient = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func sampleOf(base string) (sample, error) {
	var s sample
	resp, err := metricsClient.Get(base + "/metrics")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return s, err
	}
	seen := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "process_open_fds":
			s.fds = int(v)
		case "go_goroutines":
			s.goroutines = int(v)
		case "process_resident_memory_bytes":
			s.rss = v
		case "prestroid_inflight_queries":
			s.inflight = int(v)
		case "prestroid_queue_length":
			s.queued = int(v)
		case "go_memstats_heap_inuse_bytes":
			s.heap = v
			continue
		case "prestroid_admission_store_errors_total":
			s.storeErrors = v
			continue // not one of the five every sample needs
		default:
			continue
		}
		seen++
	}
	if seen < 5 {
		return s, fmt.Errorf("soak: %s/metrics: %d of the 5 series wanted", base, seen)
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
