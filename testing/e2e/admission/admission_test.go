// Package admission tests the proxy's admission queue with real clients (the
// Trino CLI and the Go client) against a real Trino. See package e2e.
package admission

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/testing/e2e"
)

// holdQuery starts e2e.SlowQuery through base by hand and polls it until it
// runs; the returned func cancels it (DELETE on its nextUri).
func holdQuery(t *testing.T, base, marker string) func() {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", e2e.SlowQuery+" -- "+marker, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for p.Stats.State != "RUNNING" && p.NextURI != "" {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
	}
	if p.NextURI == "" {
		t.Fatalf("holder query ended: %+v", p)
	}
	return func() { e2e.Do(t, "DELETE", p.NextURI, "", nil) }
}

func TestAdmissionQueueWithRealClients(t *testing.T) {
	direct := e2e.TrinoURL(t)
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	base, _ := e2e.StartProxy(t, proxy.Options{
		Clusters:  []proxy.ClusterConfig{{Name: "default", URL: direct}},
		Admission: &admission.Options{MaxQueries: 1},
	})
	run := fmt.Sprintf("%d", rand.Uint32())

	t.Run("over budget, the CLI and the Go client wait as QUEUED queries and then run", func(t *testing.T) {
		release := holdQuery(t, base, "holder_"+run)
		cliMarker, goMarker := "cli_waiter_"+run, "go_waiter_"+run
		cliDone := make(chan string, 1)
		go func() {
			out, err := exec.Command("java", "-jar", cli, "--server", base, "--user", "e2e-cli", "--output-format", "TSV",
				"--execute", "SELECT count(*) FROM tpch.tiny.nation /* "+cliMarker+" */").CombinedOutput()
			if err != nil {
				out = append(out, []byte(err.Error())...)
			}
			cliDone <- string(out)
		}()
		goDone := make(chan error, 1)
		go func() {
			var n int
			err := e2e.OpenDB(t, base, "").QueryRow("SELECT count(*) FROM tpch.tiny.region /* " + goMarker + " */").Scan(&n)
			if err == nil && n != 5 {
				err = fmt.Errorf("count %d", n)
			}
			goDone <- err
		}()
		time.Sleep(5 * time.Second) // the CLI's JVM starts, both poll the proxy's queue
		select {
		case out := <-cliDone:
			t.Fatalf("the CLI finished while over budget: %s", out)
		case err := <-goDone:
			t.Fatalf("the Go client finished while over budget: %v", err)
		default:
		}
		if n := e2e.SeenByTrino(t, direct, cliMarker) + e2e.SeenByTrino(t, direct, goMarker); n != 0 {
			t.Fatalf("queued queries reached Trino (%d)", n)
		}
		release()
		select {
		case out := <-cliDone:
			if !strings.Contains(out, "25") {
				t.Errorf("CLI output after admission: %s", out)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("the CLI's query was never admitted")
		}
		select {
		case err := <-goDone:
			if err != nil {
				t.Errorf("Go client after admission: %v", err)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("the Go client's query was never admitted")
		}
	})

	t.Run("a Go client cancelling while queued removes its query; Trino never sees it", func(t *testing.T) {
		release := holdQuery(t, base, "holder2_"+run)
		defer release()
		marker := "cancelled_waiter_" + run
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := e2e.OpenDB(t, base, "").QueryContext(ctx, "SELECT 1 -- "+marker)
		if err == nil {
			t.Fatal("a query over budget returned before its context ended")
		}
		time.Sleep(500 * time.Millisecond)
		if n := e2e.SeenByTrino(t, direct, marker); n != 0 {
			t.Errorf("the cancelled queued query reached Trino")
		}
	})
}
