package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// TestGracefulUpgradeRefusesNothing: SIGUSR2 starts a new proxy process
// that inherits the listener (tableflip); the old one drains and exits.
// Clients opening a new connection for every request throughout see no
// refused or reset connection, and a query polled across the handover
// finishes with all its rows.
func TestGracefulUpgradeRefusesNothing(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	dir := t.TempDir()
	port := e2e.FreePort(t)
	pidFile := filepath.Join(dir, "prestroid.pid")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("u", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	readPID := func() int {
		b, _ := os.ReadFile(pidFile)
		n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return n
	}
	cmd, base := e2e.ServeBinary(t, bin, port, "--listen", "127.0.0.1:"+port, "--upstream", direct,
		"--route-secret-file", secret, "--pid-file", pidFile)
	t.Cleanup(func() {
		if pid := readPID(); pid > 0 && pid != cmd.Process.Pid {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	old := cmd.Process.Pid
	if readPID() != old {
		t.Fatalf("pid file holds %d, want %d", readPID(), old)
	}

	// Clients: a new connection for every request, until stopped.
	var total, failed atomic.Int64
	var firstErr atomic.Value
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := c.Get(base + "/v1/info")
				total.Add(1)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("HTTP %d", resp.StatusCode)
					}
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	// A query started on the old process.
	_, p := e2e.Do(t, "POST", base+"/v1/statement", "SELECT orderkey, linenumber FROM tpch.tiny.lineitem", nil)
	rows := 0
	count := func(p e2e.Page) {
		var r []json.RawMessage
		if len(p.Data) > 0 {
			json.Unmarshal(p.Data, &r)
		}
		rows += len(r)
	}
	for rows == 0 && p.NextURI != "" {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		count(p)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Process.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		t.Fatal("the old process did not hand over and exit within 60 s")
	}
	handover := time.Since(start)
	if pid := readPID(); pid == old || pid == 0 {
		t.Fatalf("pid file holds %d after the upgrade (old %d)", pid, old)
	}
	for p.NextURI != "" {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
		count(p)
	}
	time.Sleep(500 * time.Millisecond) // clients on the new process alone for a while
	close(stop)
	wg.Wait()
	t.Logf("upgrade: old process gone %s after SIGUSR2; %d requests on new connections throughout, %d failed; the query polled across it: %d rows",
		handover.Round(time.Millisecond), total.Load(), failed.Load(), rows)
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed (first: %v)", failed.Load(), total.Load(), firstErr.Load())
	}
	if p.Error != nil || rows != 60175 {
		t.Errorf("the query across the upgrade: %d rows, error %+v", rows, p.Error)
	}
}
