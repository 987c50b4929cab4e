// Package redistest starts a real redis-server for tests, as
// testing/trino/trino.sh starts Trino: on a free port (or one given), in a
// temporary directory, with persistence off (no RDB snapshots, no AOF), and
// stopped in the test's Cleanup.
//
// The binary is $PRESTROID_REDIS_SERVER (make test sets it from
// scripts/install-redis.sh), else redis-server on PATH. Without either,
// Start skips the test and says so; with PRESTROID_REDIS_SERVER set, a
// server that does not start fails the test.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running redis-server.
type Server struct {
	Addr  string // 127.0.0.1:port
	cmd   *exec.Cmd
	dir   string
	extra []string
}

// Binary returns the redis-server to run, or "" when there is none.
func Binary() string {
	if p := os.Getenv("PRESTROID_REDIS_SERVER"); p != "" {
		return p
	}
	p, _ := exec.LookPath("redis-server")
	return p
}

// Start runs a redis-server on a free port, stopped at the end of the test;
// extra are more redis-server options (e.g. "--requirepass", "pw").
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return StartPort(t, 0, extra...)
}

// StartPort runs a redis-server on port (0: a free one).
func StartPort(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	bin := Binary()
	if bin == "" {
		t.Skip("redis-server not found (set PRESTROID_REDIS_SERVER or run `make redis`): skipping the Redis tests")
	}
	if port == 0 {
		port = freePort(t)
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), extra: extra}
	s.cmd = exec.Command(bin, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"), "--databases", "1"}, extra...)...)
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("redistest: %s: %v", bin, err)
	}
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.Ping(); err == nil || strings.Contains(err.Error(), "NOAUTH") {
			return s // up (a password-protected one answers NOAUTH)
		} else if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			t.Fatalf("redistest: redis-server on %s did not answer PING within 10s: %v\n%s", s.Addr, err, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Ping sends PING over a plain connection (no client library involved).
func (s *Server) Ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redistest: PING answered %q", line)
	}
	return nil
}

// Stop kills the server (SIGKILL: nothing is persisted anyway) and waits
// for it; safe to call more than once.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL) // a paused process dies too
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server with SIGSTOP: it keeps its data and its
// connections, and answers nothing (clients wait out their timeouts) until
// Resume.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return fmt.Errorf("redistest: %s not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}

// Restart starts the server again on the same port (after Stop), empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	_, port, _ := net.SplitHostPort(s.Addr)
	p, _ := strconv.Atoi(port)
	n := StartPort(t, p, s.extra...)
	*s = *n
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
