package e2e

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// FDKinds counts process pid's open descriptors by what they are, from
// /proc (Linux): "clients" are TCP connections accepted on the process's
// own port (own), "listen" its listening sockets, ports[P] its
// connections to port P, "other" everything else (files, pipes, epoll,
// other sockets). Ports are decimal strings.
func FDKinds(pid int, own string, ports map[string]string) (map[string]int, error) {
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
