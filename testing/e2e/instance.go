package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Killable is a harness Trino that a test owns and may kill -9 and start
// again on the same port (the fault tests). Start it with StartKillable;
// it is stopped in Cleanup.
type Killable struct {
	URL  string
	Port string
	Dir  string // the instance's directory (pid, server.log)
	Heap string // TRINO_HEAP; empty means 1G
	root string
}

// StartKillable starts a harness Trino (1G heap) on a free port.
func StartKillable(t testing.TB, what string) *Killable {
	t.Helper()
	return StartKillableOn(t, what, FreePort(t), "")
}

// StartKillableOn starts a harness Trino on port with heap (TRINO_HEAP;
// empty: 1G), for a caller that must keep to a range of ports.
func StartKillableOn(t testing.TB, what, port, heap string) *Killable {
	t.Helper()
	k := &Killable{root: RepoRoot(t), Port: port, Heap: heap}
	k.URL = "http://127.0.0.1:" + k.Port
	cache := os.Getenv("PRESTROID_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "prestroid")
	}
	k.Dir = filepath.Join(cache, "instances", k.Port)
	t.Cleanup(func() {
		if out, err := k.harness("down"); err != nil {
			t.Errorf("trino.sh down (port %s): %v\n%s", k.Port, err, out)
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(k.Dir, "server.log"))
			t.Logf("%s Trino log (tail):\n%s", what, Tail(string(log), 4000))
			return
		}
		_ = os.RemoveAll(k.Dir)
	})
	d := k.Up(t)
	t.Logf("%s Trino up on port %s in %s", what, k.Port, d.Round(time.Second))
	return k
}

func (k *Killable) harness(verb string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(k.root, "testing/trino/trino.sh"), verb)
	cmd.Dir = k.root
	heap := k.Heap
	if heap == "" {
		heap = "1G"
	}
	cmd.Env = append(os.Environ(), "TRINO_PORT="+k.Port, "TRINO_HEAP="+heap, "TRINO_START_TIMEOUT=420")
	return cmd.CombinedOutput()
}

// Up starts the instance (again) and returns how long it took to run
// queries.
func (k *Killable) Up(t testing.TB) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := k.harness("up"); err != nil {
		t.Fatalf("Trino on port %s did not start: %v\n%s", k.Port, err, out)
	}
	return time.Since(start)
}

// Kill9 sends SIGKILL to the Trino JVM (no shutdown of any kind) and waits
// until it is gone.
func (k *Killable) Kill9(t testing.TB) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(k.Dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
}
