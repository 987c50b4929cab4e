package soak

import (
	"fmt"
	"maps"
	"net/url"
	"runtime"
	"slices"
	"strings"

	"github.com/prestroid/prestroid/testing/e2e"
)

// portOf is the port of a URL or host:port.
func portOf(addr string) string {
	if u, err := url.Parse(addr); err == nil && u.Port() != "" {
		return u.Port()
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return ""
}

func kindsString(k map[string]int) string {
	var l []string
	for _, n := range slices.Sorted(maps.Keys(k)) {
		l = append(l, fmt.Sprintf("%s %d", n, k[n]))
	}
	return strings.Join(l, ", ")
}

// sample is the replica's /metrics figures with its fds by kind; pools
// maps the Redis and Trino ports to their kinds.
func (r *replica) sample(pools map[string]string) (sample, error) {
	r.mu.Lock()
	base, pid, port := r.base, r.pid, r.port
	r.mu.Unlock()
	s, err := sampleOf(base)
	if err != nil {
		return s, err
	}
	if k, err := e2e.FDKinds(pid, port, pools); err == nil {
		s.kinds = k
	}
	return s, nil
}

// fdLeaks compares a replica's fds after the load (since: how long after
// it) with its baseline, by kind:
//   - redis: the go-redis pools of the three clients that share the
//     soak's Redis (admission, the estimate history and usage accounting
//     default to admission.redis), each keeping idle connections 30
//     minutes (ConnMaxIdleTime) up to its size, 10 per GOMAXPROCS, plus the
//     admission subscription's own connection: they may hold what the
//     load's peak opened, up to that bound;
//   - trino: the health probe's connection, the upstream pool's (idle 30
//     s) and the EXPLAIN client's (idle 90 s, up to 32), which background
//     work keeps using after the load (table statistics that failed are
//     fetched again every 5 minutes: run 7 ended with 4 open on each
//     replica against 1 at one's baseline): within the EXPLAIN pool's
//     bound and the probe's;
//   - clients, listen and other (files, pipes, epoll, other sockets):
//     within 2, 0 and 3 of the baseline (the sampler's own request, a
//     monitor probe in flight).
//
// Without /proc it falls back to the total, within 10.
func fdLeaks(b, a sample) []string {
	if a.kinds == nil || b.kinds == nil {
		if a.fds > b.fds+10 {
			return []string{fmt.Sprintf("fds %d -> %d", b.fds, a.fds)}
		}
		return nil
	}
	bound := map[string]int{"redis": redisClients*10*runtime.GOMAXPROCS(0) + 1, "trino": explainIdle + 1, "clients": 2, "listen": 0, "other": 3}
	var l []string
	for _, k := range []string{"redis", "trino", "clients", "listen", "other"} {
		if a.kinds[k] > b.kinds[k]+bound[k] {
			l = append(l, fmt.Sprintf("%s fds %d -> %d (at most +%d)", k, b.kinds[k], a.kinds[k], bound[k]))
		}
	}
	return l
}

// redisClients is how many go-redis clients a soak replica opens on the
// soak's Redis: admission, the estimate history, usage accounting.
const redisClients = 3

// explainIdle is the EXPLAIN client's idle connections per host
// (plan.NewHTTPClient's MaxIdleConnsPerHost).
const explainIdle = 32
