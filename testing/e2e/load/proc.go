package load

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/testing/e2e"
)

// usage is one sample of the proxy process, read from /proc and its own
// /metrics.
type usage struct {
	RSSKiB     int // VmRSS
	FDs        int // entries of /proc/PID/fd
	Clients    int // of them, TCP connections accepted on the proxy's port
	Upstream   int // of them, TCP connections to the Trino's port
	Goroutines int // go_goroutines from /metrics
	HeapInuse  int // go_memstats_heap_inuse_bytes from /metrics
}

func (u usage) String() string {
	return fmt.Sprintf("RSS %.1f MiB (Go heap in use %.1f MiB), %d fds (%d client connections, %d to Trino), %d goroutines",
		float64(u.RSSKiB)/1024, float64(u.HeapInuse)/(1<<20), u.FDs, u.Clients, u.Upstream, u.Goroutines)
}

// max keeps the larger of each field.
func (u usage) max(o usage) usage {
	return usage{RSSKiB: max(u.RSSKiB, o.RSSKiB), FDs: max(u.FDs, o.FDs), Clients: max(u.Clients, o.Clients),
		Upstream: max(u.Upstream, o.Upstream), Goroutines: max(u.Goroutines, o.Goroutines),
		HeapInuse: max(u.HeapInuse, o.HeapInuse)}
}

// sampler reads a process's usage; metrics is the proxy's /metrics URL,
// read with its own client (one kept-alive connection, so the sampling
// itself adds at most one connection to what it counts).
type sampler struct {
	pid                  int
	proxyPort, trinoPort int
	metrics              string
	client               *http.Client
}

func (s *sampler) sample() (usage, error) {
	var u usage
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			u.RSSKiB, _ = strconv.Atoi(f[1])
		}
	}
	kinds, err := e2e.FDKinds(s.pid, strconv.Itoa(s.proxyPort), map[string]string{strconv.Itoa(s.trinoPort): "trino"})
	if err != nil {
		return u, err
	}
	for _, n := range kinds {
		u.FDs += n
	}
	u.Clients, u.Upstream = kinds["clients"], kinds["trino"]
	m, err := s.read()
	if err != nil {
		return u, err
	}
	g, ok := m.Value("go_goroutines")
	if !ok {
		return u, fmt.Errorf("load: no go_goroutines in %s", s.metrics)
	}
	heap, _ := m.Value("go_memstats_heap_inuse_bytes")
	u.Goroutines, u.HeapInuse = int(g), int(heap)
	return u, nil
}

// read scrapes the proxy's /metrics with the sampler's client.
func (s *sampler) read() (e2e.Metrics, error) {
	resp, err := s.client.Get(s.metrics)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return e2e.ParseMetrics(resp.Body)
}

// counters returns the /metrics lines of the named metrics.
func (s *sampler) counters(names ...string) []string {
	resp, err := s.client.Get(s.metrics)
	if err != nil {
		return []string{err.Error()}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				out = append(out, line)
			}
		}
	}
	return out
}

// sum adds up every series of the named metric (0 when it has none yet).
func (s *sampler) sum(name string) (float64, error) {
	m, err := s.read()
	if err != nil {
		return 0, err
	}
	v, _ := m.Value(name)
	return v, nil
}
