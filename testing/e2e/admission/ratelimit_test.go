package admission

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestRateLimitedClientsRetryOnce: a query over its user's rate limit gets
// HTTP 503 with Retry-After before anything reaches Trino; the Go client
// and the Trino CLI (the Java client) retry it on their own and it runs
// exactly once.
func TestRateLimitedClientsRetryOnce(t *testing.T) {
	direct := e2e.TrinoURL(t)
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	// The CLI's user refills in 10 s, longer than its JVM takes to start,
	// so the CLI meets the limit.
	base, _ := e2e.StartProxy(t, proxy.Options{
		Clusters: []proxy.ClusterConfig{{Name: "default", URL: direct}},
		Admission: &proxy.AdmissionOptions{Rate: proxy.RateLimits{UserRate: 0.5, UserBurst: 1, GroupRate: 0.1, GroupBurst: 1},
			UserGroups: map[string]string{"e2e-cli": "cli"}},
	})
	run := fmt.Sprintf("%d", rand.Uint32())
	// refusals reads prestroid_rate_limited_total for scope.
	refusals := func(scope string) int {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^prestroid_rate_limited_total\{scope="` + scope + `"\} (\d+)$`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	// burn takes the user's one token with a query of its own.
	burn := func(user string) {
		resp, p := e2e.Do(t, "POST", base+"/v1/statement", "SELECT 1 -- burn_"+run, map[string]string{"X-Trino-User": user})
		if resp.StatusCode != 200 {
			t.Fatalf("burn: %s", resp.Status)
		}
		for p.NextURI != "" {
			_, p = e2e.Do(t, "GET", p.NextURI, "", map[string]string{"X-Trino-User": user})
		}
		resp, _ = e2e.Do(t, "POST", base+"/v1/statement", "SELECT 1 -- refused_"+run, map[string]string{"X-Trino-User": user})
		if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("over the limit: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
		}
	}

	t.Run("the Go client waits out Retry-After and runs the query once", func(t *testing.T) {
		burn("e2e")
		marker := "go_limited_" + run
		start := time.Now()
		var n int
		if err := e2e.OpenDB(t, base, "").QueryRow("SELECT 7 -- " + marker).Scan(&n); err != nil || n != 7 {
			t.Fatalf("%d %v", n, err)
		}
		t.Logf("the Go client's query ran after %v", time.Since(start).Round(time.Millisecond))
		if got := e2e.SeenByTrino(t, direct, marker); got != 1 {
			t.Errorf("Trino ran the query %d times", got)
		}
	})
	t.Run("the CLI retries the 503 and runs the query once", func(t *testing.T) {
		burn("e2e-cli")
		before := refusals("group")
		marker := "cli_limited_" + run
		cmd := exec.Command("java", "-jar", cli, "--server", base, "--user", "e2e-cli", "--output-format", "TSV",
			"--execute", "SELECT 8 /* "+marker+" */")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "8" {
			t.Fatalf("%v: %s\n%s", err, out, stderr.String())
		}
		if n := refusals("group") - before; n < 1 {
			t.Errorf("the CLI's query was never refused: the test did not exercise its retry")
		} else {
			t.Logf("the CLI's query was refused %d times, then ran", n)
		}
		if got := e2e.SeenByTrino(t, direct, marker); got != 1 {
			t.Errorf("Trino ran the query %d times", got)
		}
		if got := e2e.SeenByTrino(t, direct, "refused_"+run); got != 0 {
			t.Errorf("refused queries reached Trino (%d)", got)
		}
	})
}
