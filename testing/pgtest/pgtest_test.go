package pgtest

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestStartRunsAQueryableCluster: the cluster answers SQL over TCP (psql
// from the same directory) as its superuser, without a password.
func TestStartRunsAQueryableCluster(t *testing.T) {
	s := Start(t)
	out, err := exec.Command(filepath.Join(BinDir(), "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port), "-U", s.User,
		"-d", s.Database, "-At", "-c", "CREATE TABLE t (x int); INSERT INTO t VALUES (41); SELECT x + 1 FROM t").CombinedOutput()
	if err != nil {
		t.Fatalf("psql: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); !strings.HasSuffix(got, "42") {
		t.Fatalf("psql answered %q", got)
	}
	s.Stop()
	s.Stop() // twice is fine
	if err := exec.Command(filepath.Join(BinDir(), "pg_isready"), "-h", "127.0.0.1", "-p", strconv.Itoa(s.Port)).Run(); err == nil {
		t.Error("still accepting connections after Stop")
	}
}
