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
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestRateLimitedClientsRetryOnce: a query over its user's rate limit gets
// HTTP 503 with Retry-After before anything reaches Trino; the Go client
// and the Trino CLI (the Java client) retry it on their own and it runs
// exactly once; the Python client gives up after its default 3 attempts
// (nothing ran) and succeeds, once, with more. Each client has a proxy of
// its own, so the three wait out their limits in parallel.
func TestRateLimitedClientsRetryOnce(t *testing.T) {
	direct := e2e.TrinoURL(t)
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	run := fmt.Sprintf("%d", rand.Uint32())
	// limited starts a proxy whose users get one query per refill.
	limited := func(refill time.Duration) string {
		base, _ := e2e.StartProxy(t, proxy.Options{
			Clusters:  []proxy.ClusterConfig{{Name: "default", URL: direct}},
			Admission: &admission.Options{Rate: admission.RateLimits{UserRate: 1 / refill.Seconds(), UserBurst: 1}},
		})
		return base
	}
	// refusals reads prestroid_rate_limited_total{scope="user"}.
	refusals := func(base string) int {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		m := regexp.MustCompile(`(?m)^prestroid_rate_limited_total\{scope="user"\} (\d+)$`).FindSubmatch(b)
		if m == nil {
			return 0
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n
	}
	// burn takes the user's one token with a query of its own and checks
	// that the next is refused.
	burn := func(base, user string) {
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
		t.Parallel()
		base := limited(5 * time.Second)
		burn(base, "e2e")
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
		t.Parallel()
		// A refill longer than the CLI's JVM takes to start, even on a
		// loaded machine, so that the CLI meets the limit.
		base := limited(30 * time.Second)
		burn(base, "e2e-cli")
		before := refusals(base)
		marker := "cli_limited_" + run
		cmd := exec.Command("java", "-jar", cli, "--server", base, "--user", "e2e-cli", "--output-format", "TSV",
			"--execute", "SELECT 8 /* "+marker+" */")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "8" {
			t.Fatalf("%v: %s\n%s", err, out, stderr.String())
		}
		if n := refusals(base) - before; n < 1 {
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
	t.Run("the Python client gives up after its 3 default attempts, sending nothing; with more attempts it runs the query once", func(t *testing.T) {
		t.Parallel()
		py := e2e.RequireEnv(t, "PRESTROID_PYTHON")
		base := limited(10 * time.Second)
		host, port, _ := strings.Cut(strings.TrimPrefix(base, "http://"), ":")
		pyRun := func(attempts int, marker string) (string, error) {
			script := fmt.Sprintf(`
import sys, trino
conn = trino.dbapi.connect(host=%q, port=%s, user="e2e-py", max_attempts=%d)
cur = conn.cursor()
try:
    cur.execute("SELECT 9 -- %s")
    print(cur.fetchall()[0][0])
except Exception as e:
    print("ERROR", type(e).__name__, e)
`, host, port, attempts, marker)
			out, err := exec.Command(py, "-c", script).CombinedOutput()
			return strings.TrimSpace(string(out)), err
		}
		burn(base, "e2e-py")
		short := "py_default_" + run
		out, err := pyRun(3, short)
		if err != nil || !strings.Contains(out, "ERROR") || !strings.Contains(out, "503") {
			t.Fatalf("default attempts: %v %s", err, out)
		}
		t.Logf("Python with max_attempts=3: %s", e2e.Tail(out, 120))
		long := "py_patient_" + run
		// The client sleeps 0.1 s × 2^attempt × a random factor between
		// attempts (no Retry-After for a 503): 8 attempts may all fall
		// inside the 10 s refill by chance; 12 outlast it but by a fluke.
		if out, err := pyRun(12, long); err != nil || out != "9" {
			t.Fatalf("12 attempts: %v %s", err, out)
		}
		if a, b := e2e.SeenByTrino(t, direct, short), e2e.SeenByTrino(t, direct, long); a != 0 || b != 1 {
			t.Errorf("Trino ran the given-up query %d times (want 0), the patient one %d times (want 1)", a, b)
		}
	})
}
