package bench

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// redisRelay sits between the proxy and redis-server and counts what the
// proxy sends: each command of the RESP stream (pipelined ones each), by
// name ("EVALSHA enter.lua" for a script it knows), and the bytes each way.
// It reads the client's stream command by command and forwards each batch
// the client wrote as one write, so it adds latency, never commands.
type redisRelay struct {
	ln      net.Listener
	backend string
	scripts map[string]string // sha1 -> file name

	mu  sync.Mutex
	ops map[string]int64
	in  atomic.Int64 // proxy -> Redis
	out atomic.Int64 // Redis -> proxy
	// trips counts the batches the proxy wrote (a pipeline or a
	// transaction is one round trip): a batch that reaches the relay in
	// two reads counts twice, so an upper bound.
	trips atomic.Int64
	wg    sync.WaitGroup
	done  chan struct{}
}

// startRedisRelay listens on a free loopback port in front of backend.
// scripts names the Lua scripts by their SHA-1 (luaScripts).
func startRedisRelay(backend string, scripts map[string]string) (*redisRelay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &redisRelay{ln: ln, backend: backend, scripts: scripts, ops: map[string]int64{}, done: make(chan struct{})}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *redisRelay) Addr() string { return r.ln.Addr().String() }

// Close stops accepting; open connections end with their clients.
func (r *redisRelay) Close() {
	close(r.done)
	r.ln.Close()
	r.wg.Wait()
}

func (r *redisRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		go r.serve(c)
	}
}

func (r *redisRelay) serve(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", r.backend)
	if err != nil {
		return
	}
	defer b.Close()
	go func() {
		io.Copy(countingWriter{c, &r.out}, b)
		c.Close()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	var batch []byte
	for {
		raw, name, err := readRESPCommand(br)
		if err != nil {
			return
		}
		r.count(name)
		batch = append(batch, raw...)
		if br.Buffered() == 0 {
			if _, err := b.Write(batch); err != nil {
				return
			}
			r.in.Add(int64(len(batch)))
			r.trips.Add(1)
			batch = batch[:0]
		}
	}
}

// count adds one command; an EVAL names its script from here on.
func (r *redisRelay) count(name []string) {
	if len(name) == 0 {
		return
	}
	op := strings.ToUpper(name[0])
	switch {
	case op == "EVALSHA" && len(name) > 1:
		op += " " + r.scriptName(strings.ToLower(name[1]))
	case op == "EVAL" && len(name) > 1:
		sum := sha1.Sum([]byte(name[1]))
		op += " " + r.scriptName(hex.EncodeToString(sum[:]))
	case (op == "SCRIPT" || op == "CLIENT" || op == "CONFIG") && len(name) > 1:
		op += " " + strings.ToUpper(name[1])
	}
	r.mu.Lock()
	r.ops[op]++
	r.mu.Unlock()
}

func (r *redisRelay) scriptName(sha string) string {
	if n, ok := r.scripts[sha]; ok {
		return n
	}
	return "script " + sha[:min(8, len(sha))]
}

// relayCounts is a snapshot of the relay's counters.
type relayCounts struct {
	ops            map[string]int64
	in, out, trips int64
}

func (r *redisRelay) snapshot() relayCounts {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := make(map[string]int64, len(r.ops))
	for k, v := range r.ops {
		ops[k] = v
	}
	return relayCounts{ops: ops, in: r.in.Load(), out: r.out.Load(), trips: r.trips.Load()}
}

// sub is what happened between two snapshots.
func (a relayCounts) sub(b relayCounts) relayCounts {
	d := relayCounts{ops: map[string]int64{}, in: a.in - b.in, out: a.out - b.out, trips: a.trips - b.trips}
	for k, v := range a.ops {
		if n := v - b.ops[k]; n != 0 {
			d.ops[k] = n
		}
	}
	return d
}

var errRESP = errors.New("bench: redis relay: not a RESP command")

// readRESPCommand reads one command (an array of bulk strings, as every
// client library sends; or an inline command) and returns its raw bytes
// and its first two arguments (the command and, for EVAL/EVALSHA, the
// script or its SHA-1).
func readRESPCommand(br *bufio.Reader) (raw []byte, head []string, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, nil, err
	}
	raw = append(raw, line...)
	if len(line) == 0 || line[0] != '*' {
		f := strings.Fields(string(line))
		return raw, f[:min(2, len(f))], nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(line[1:])))
	if err != nil {
		return nil, nil, errRESP
	}
	for i := 0; i < n; i++ {
		hdr, err := br.ReadSlice('\n')
		if err != nil {
			return nil, nil, err
		}
		raw = append(raw, hdr...)
		if len(hdr) == 0 || hdr[0] != '$' {
			return nil, nil, errRESP
		}
		size, err := strconv.Atoi(strings.TrimSpace(string(hdr[1:])))
		if err != nil || size < 0 {
			return nil, nil, errRESP
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(br, raw[start:]); err != nil {
			return nil, nil, err
		}
		if i < 2 {
			head = append(head, string(raw[start:start+size]))
		}
	}
	return raw, head, nil
}

// luaScripts names the proxy's Lua scripts by their SHA-1, as go-redis
// sends them (EVALSHA of the script's text): the admission scripts are
// the prelude, a newline and the command's body (proxy/admission/redis.go).
func luaScripts(repo string) (map[string]string, error) {
	sha := func(b []byte) string { s := sha1.Sum(b); return hex.EncodeToString(s[:]) }
	m := map[string]string{}
	dir := filepath.Join(repo, "proxy", "admission", "lua")
	prelude, err := os.ReadFile(filepath.Join(dir, "admission.lua"))
	if err != nil {
		return nil, fmt.Errorf("bench: the admission scripts (run from the repository, or --repo): %w", err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.lua"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := filepath.Base(f)
		m[sha(b)] = name // ratelimit.lua: the file alone
		m[sha([]byte(string(prelude)+"\n"+string(b)))] = name
	}
	if b, err := os.ReadFile(filepath.Join(repo, "estimator", "history", "redis_cas.lua")); err == nil {
		m[sha(b)] = "redis_cas.lua"
	}
	return m, nil
}

// countingWriter counts what it writes into n.
type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
