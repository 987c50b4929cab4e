package load

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	dir := fmt.Sprintf("/proc/%d/fd", s.pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return u, err
	}
	u.FDs = len(ents)
	sockets := map[string]bool{} // inode
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(dir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") {
			sockets[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, table := range []string{"tcp", "tcp6"} {
		local, remote, err := tcpPorts(fmt.Sprintf("/proc/%d/net/%s", s.pid, table), sockets)
		if err != nil {
			return u, err
		}
		for i := range local {
			switch {
			case local[i] == s.proxyPort && remote[i] != 0:
				u.Clients++
			case remote[i] == s.trinoPort:
				u.Upstream++
			}
		}
	}
	resp, err := s.client.Get(s.metrics)
	if err != nil {
		return u, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "go_goroutines "); ok {
			u.Goroutines, _ = strconv.Atoi(strings.TrimSpace(v))
		}
		if v, ok := strings.CutPrefix(line, "go_memstats_heap_inuse_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			u.HeapInuse = int(f)
		}
	}
	if u.Goroutines == 0 {
		return u, fmt.Errorf("load: no go_goroutines in %s", s.metrics)
	}
	return u, nil
}

// tcpPorts returns the local and remote ports of the sockets in a
// /proc/net/tcp{,6} table whose inodes are in want.
func tcpPorts(path string, want map[string]bool) (local, remote []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
		f := strings.Fields(sc.Text())
		if len(f) < 10 || !want[f[9]] {
			continue
		}
		local = append(local, hexPort(f[1]))
		remote = append(remote, hexPort(f[2]))
	}
	return local, remote, sc.Err()
}

func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	p, _ := strconv.ParseInt(addr[i+1:], 16, 32)
	return int(p)
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
	resp, err := s.client.Get(s.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("load: %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
