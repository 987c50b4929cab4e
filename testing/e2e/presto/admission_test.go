package presto

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestAdmissionQueueWithPrestoClients: over the proxy's budget, PrestoDB's
// CLI, JDBC driver and Python client wait on the proxy's own QUEUED pages
// (nothing reaches PrestoDB) and then run; a full queue refuses a query
// with a failed page each client shows.
func TestAdmissionQueueWithPrestoClients(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	cli := need(t, "PRESTROID_PRESTO_CLI")
	jar := need(t, "PRESTROID_PRESTO_JDBC")
	py := need(t, "PRESTROID_PYTHON")
	base, _ := e2e.StartProxy(t, proxy.Options{
		Clusters:  []proxy.ClusterConfig{{Name: "presto", URL: direct, Engine: "presto"}},
		Admission: &admission.Options{MaxQueries: 1, QueueSize: 3, MaxWait: 5 * time.Minute},
	})
	stamp := time.Now().Format("150405.000")
	marker := func(who string) string { return strings.ReplaceAll("waiter_"+who+"_"+stamp, ".", "_") }

	// The holder takes the one slot until it is cancelled.
	resp, hold := do(t, "POST", base+"/v1/statement", slowSQL, nil)
	if resp.StatusCode != 200 || hold.NextURI == "" {
		t.Fatalf("holder: %s %+v", resp.Status, hold.Error)
	}
	_, hold = do(t, "GET", hold.NextURI, "", nil) // PrestoDB dispatches it on the first poll
	release := func() {
		if hold.NextURI != "" {
			do(t, "DELETE", hold.NextURI, "", nil)
			hold.NextURI = ""
		}
	}
	defer release()

	type result struct{ who, out string }
	done := make(chan result, 3)
	start := func(who string, cmd *exec.Cmd) {
		go func() {
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				out.WriteString("\n" + err.Error())
			}
			done <- result{who, out.String()}
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start("cli", exec.CommandContext(ctx, java(t), "-jar", cli, "--server", base, "--user", "e2e-cli", "--output-format", "TSV",
		"--execute", "SELECT count(*) FROM tpch.tiny.nation /* "+marker("cli")+" */"))
	jdbc := exec.CommandContext(ctx, java(t), "-cp", jar, "JdbcCorpus.java", "jdbc:presto://"+strings.TrimPrefix(base, "http://")+"/tpch/tiny", "e2e-jdbc")
	jdbc.Stdin = strings.NewReader("SELECT count(*) FROM region /* " + marker("jdbc") + " */\n")
	start("jdbc", jdbc)
	start("python", exec.CommandContext(ctx, py, "-c", versionPy, "prestodb", base[strings.LastIndexByte(base, ':')+1:]))

	// All three wait in the proxy's queue (the JVMs take seconds to start).
	for queued(t, base) < 3 {
		select {
		case r := <-done:
			t.Fatalf("%s finished while over budget: %s", r.who, r.out)
		case <-ctx.Done():
			t.Fatalf("the three clients never all waited in the queue (%d do)", queued(t, base))
		case <-time.After(200 * time.Millisecond):
		}
	}
	time.Sleep(time.Second) // they keep waiting
	select {
	case r := <-done:
		t.Fatalf("%s finished while over budget: %s", r.who, r.out)
	default:
	}
	for _, who := range []string{"cli", "jdbc"} {
		if n := seenByPresto(t, direct, marker(who)); n != 0 {
			t.Errorf("the queued %s query reached PrestoDB", who)
		}
	}
	t.Run("a full queue refuses a query in a failed page the client shows", func(t *testing.T) {
		c, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		out, _ := exec.CommandContext(c, py, "-c", versionPy, "prestodb", base[strings.LastIndexByte(base, ':')+1:]).CombinedOutput()
		if !strings.Contains(string(out), "PRESTROID_QUEUE_FULL") {
			t.Errorf("over a full queue: %s", out)
		}
	})
	release()
	want := map[string]string{"cli": "25", "jdbc": "\n5\n", "python": "version 0.296"}
	for range 3 {
		select {
		case r := <-done:
			if !strings.Contains(r.out, want[r.who]) {
				t.Errorf("%s after admission: %s", r.who, r.out)
			}
		case <-ctx.Done():
			t.Fatal("a queued query was never admitted")
		}
	}
}

// queued reads the proxy's prestroid_queue_length.
func queued(t *testing.T, base string) int {
	t.Helper()
	v, _ := e2e.Metric(t, base, "prestroid_queue_length")
	return int(v)
}
