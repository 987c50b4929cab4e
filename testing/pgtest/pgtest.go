// Package pgtest starts a throwaway PostgreSQL cluster for tests, as
// testing/redistest starts Redis: initdb into a temporary directory, then
// postgres on a free port of 127.0.0.1 (trust authentication, no fsync,
// its Unix socket in that directory), stopped and removed in the test's
// Cleanup.
//
// The programs come from $PRESTROID_PG_BIN (make test sets it from
// scripts/install-postgres.sh: Debian's /usr/lib/postgresql/15/bin), else
// that directory, else initdb on PATH. Without any, Start skips the test
// and says so; with PRESTROID_PG_BIN set, a cluster that does not start
// fails the test.
//
// PostgreSQL refuses to run as root. Run as root (as CI is), initdb and
// postgres run as the `postgres` system user that Debian's package creates
// (the Go process sets their uid and gid; no su, runuser or sudo), and the
// temporary directory is handed to that user; its parent ($TMPDIR, else
// /tmp) must let that user through.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Server is one running PostgreSQL cluster.
type Server struct {
	// Port is its TCP port on 127.0.0.1; User the superuser (no password
	// needed: trust authentication); Database the database that exists.
	Port     int
	User     string
	Database string
	dir      string
	cmd      *exec.Cmd
	exited   chan error // postgres' exit (cmd.Wait)
}

// JDBCURL is the cluster's database as a JDBC URL.
func (s *Server) JDBCURL() string {
	return fmt.Sprintf("jdbc:postgresql://127.0.0.1:%d/%s", s.Port, s.Database)
}

// BinDir returns the directory holding initdb and postgres, or "".
func BinDir() string {
	if d := os.Getenv("PRESTROID_PG_BIN"); d != "" {
		return d
	}
	if _, err := os.Stat("/usr/lib/postgresql/15/bin/initdb"); err == nil {
		return "/usr/lib/postgresql/15/bin"
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	return ""
}

// Start initdbs and runs a cluster, stopped and removed at the end of the
// test. It returns once the cluster accepts connections.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := BinDir()
	if bin == "" {
		t.Skip("PostgreSQL not found (set PRESTROID_PG_BIN or run scripts/install-postgres.sh)")
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var attr *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("pgtest: running as root, PostgreSQL needs another user and there is no `postgres` user (Debian's package creates it): %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	s := &Server{Port: freePort(t), User: "pgtest", Database: "postgres", dir: dir}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", s.User, "--auth=trust",
		"--no-sync", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = attr
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "postgres.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(s.Port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=50", "-c", "shared_buffers=32MB")
	s.cmd.SysProcAttr = attr
	s.cmd.Dir = dir
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("pgtest: postgres: %v", err)
	}
	t.Cleanup(s.Stop)
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		log, _ := os.ReadFile(logPath)
		if strings.Contains(string(log), "database system is ready to accept connections") {
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.Port), time.Second); err == nil {
				c.Close()
				s.exited = exited
				return s
			}
		}
		select {
		case err := <-exited:
			s.cmd = nil
			t.Fatalf("pgtest: postgres exited: %v\n%s", err, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: postgres on port %d not ready within 30s\n%s", s.Port, log)
		}
	}
}

// Stop shuts the cluster down (SIGINT: PostgreSQL's fast shutdown, then
// SIGKILL after 10 s); safe to call more than once.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	s.cmd = nil
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
