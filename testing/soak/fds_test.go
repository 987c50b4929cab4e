package soak

import (
	"bufio"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fdKinds counts a process's open descriptors by what they are, from
// /proc (Linux): "redis" and "trino" are TCP connections to those ports,
// "clients" connections accepted on the process's own port, "listen" its
// listening sockets, "other" everything else (files, pipes, epoll, other
// sockets). The pools' connections are told apart from the rest so that
// a pool's idle connections (go-redis keeps them 30 minutes) are judged
// against the pool's bound, and anything else against the baseline.
func fdKinds(pid int, own string, ports map[string]string) (map[string]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil, err
	}
	socks, err := tcpSockets(pid)
	if err != nil {
		return nil, err
	}
	kinds := map[string]int{}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(fmt.Sprintf("/proc/%d/fd", pid), e.Name()))
		if err != nil {
			continue // closed since the listing
		}
		inode, ok := strings.CutPrefix(link, "socket:[")
		if !ok {
			kinds["other"]++
			continue
		}
		s, ok := socks[strings.TrimSuffix(inode, "]")]
		switch {
		case !ok:
			kinds["other"]++ // a unix or UDP socket
		case s.listen:
			kinds["listen"]++
		case s.local == own:
			kinds["clients"]++
		case ports[s.remote] != "":
			kinds[ports[s.remote]]++
		default:
			kinds["other"]++
		}
	}
	return kinds, nil
}

// tcpSocket is one line of /proc/PID/net/tcp{,6}: its ports (decimal).
type tcpSocket struct {
	local, remote string
	listen        bool
}

// tcpSockets reads the TCP sockets of pid's network namespace by inode.
func tcpSockets(pid int) (map[string]tcpSocket, error) {
	socks := map[string]tcpSocket{}
	for _, name := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, name))
		if err != nil {
			if name == "tcp6" && os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
			fl := strings.Fields(sc.Text())
			if len(fl) < 10 {
				continue
			}
			socks[fl[9]] = tcpSocket{local: hexPort(fl[1]), remote: hexPort(fl[2]), listen: fl[3] == "0A"}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return socks, nil
}

// hexPort is the decimal port of /proc/net/tcp's "ADDR:PORT" (hex).
func hexPort(addr string) string {
	_, p, _ := strings.Cut(addr, ":")
	n, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return ""
	}
	return strconv.FormatUint(n, 10)
}

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
	if k, err := fdKinds(pid, port, pools); err == nil {
		s.kinds = k
	}
	return s, nil
}

// fdLeaks compares a replica's fds after the load (since: how long after
// it) with its baseline, by kind:
//   - redis: the admission store's go-redis pool, which keeps idle
//     connections 30 minutes (ConnMaxIdleTime) up to its size, 10 per
//     GOMAXPROCS, plus the subscription's own connection: it may hold what
//     the load's peak opened, up to that bound;
//   - trino: the upstream pool (idle 30 s) and the EXPLAIN client's (idle
//     90 s): back within 2 once those have lapsed, up to 10 before;
//   - clients, listen and other (files, pipes, epoll, other sockets):
//     within 2, 0 and 3 of the baseline (the sampler's own request, a
//     monitor probe in flight).
//
// Without /proc it falls back to the total, within 10.
func fdLeaks(b, a sample, since time.Duration) []string {
	if a.kinds == nil || b.kinds == nil {
		if a.fds > b.fds+10 {
			return []string{fmt.Sprintf("fds %d -> %d", b.fds, a.fds)}
		}
		return nil
	}
	bound := map[string]int{"redis": 10*runtime.GOMAXPROCS(0) + 1, "trino": 2, "clients": 2, "listen": 0, "other": 3}
	if since < 2*time.Minute {
		bound["trino"] = 10
	}
	var l []string
	for _, k := range []string{"redis", "trino", "clients", "listen", "other"} {
		if a.kinds[k] > b.kinds[k]+bound[k] {
			l = append(l, fmt.Sprintf("%s fds %d -> %d (at most +%d)", k, b.kinds[k], a.kinds[k], bound[k]))
		}
	}
	return l
}

// TestFdKinds classifies this process's own sockets: a listener, the
// connection accepted on it and the one dialled to it.
func TestFdKinds(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := portOf(ln.Addr().String())
	before, err := fdKinds(os.Getpid(), port, map[string]string{port: "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, err := fdKinds(os.Getpid(), port, map[string]string{port: "upstream"})
	if err != nil {
		t.Fatal(err)
	}
	if before["listen"] < 1 || after["listen"] != before["listen"] || after["clients"] != before["clients"]+1 || after["upstream"] != before["upstream"]+1 {
		t.Errorf("before %v, after dialling and accepting %v: want one more client and one more upstream", before, after)
	}
}
