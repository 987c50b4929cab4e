// Package guardrail tests guardrails end to end: the real binary with its
// real estimator in front of the real Trino, the Trino Go client and CLI,
// the console in headless Chromium, and
// Trino's own system.runtime.queries to prove what reached the cluster.
// See package e2e.
package guardrail

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/trinodb/trino-go-client/trino"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/guardrail"
	"github.com/prestroid/prestroid/testing/e2e"
)

// heavySQL is a join the model gives some CPU time (tens of ms on TPC-H
// tiny): well over the 1 ms limit below, yet quick to run.
const heavySQL = "SELECT count(*) FROM tpch.tiny.lineitem l JOIN tpch.tiny.orders o ON l.orderkey = o.orderkey"

// chromium is the browser: $PRESTROID_CHROMIUM (make test sets it), else
// chromium on PATH, else the subtest skips.
func chromium(t *testing.T) string {
	if p := os.Getenv("PRESTROID_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium: set PRESTROID_CHROMIUM or run scripts/install-chromium.sh (make test does)")
	return ""
}

// proxyEstimate is the estimate the proxy makes for sql as user (POST
// /v1/estimate), the one the guardrail compares.
func proxyEstimate(t *testing.T, base, user, sql string) estimate.JSON {
	t.Helper()
	req, _ := http.NewRequest("POST", base+"/v1/estimate", strings.NewReader(sql))
	req.Header.Set("X-Trino-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e estimate.JSON
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != 200 {
		t.Fatalf("POST /v1/estimate: %d %s %v", resp.StatusCode, b, err)
	}
	return e
}

// metric is series' value in GET /metrics (e2e.Metrics.Value), as
// Prometheus writes it ("" when absent).
func metric(t *testing.T, base, series string) string {
	t.Helper()
	v, ok := e2e.Metric(t, base, series)
	if !ok {
		return ""
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func TestGuardrailsOnRealTrino(t *testing.T) {
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	dir, port := t.TempDir(), e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
clusters:
  - {name: default, url: %q}
estimator:
  explain: always   # the plan model's estimate, as POST /v1/estimate reports it
guardrails:
  - {name: tiny-cpu, match: {user: e2e}, target: cpu, limit: 1ms, override_tag: guardrail-ok}
  - {name: tiny-cpu-shadow, match: {user: e2e-shadow}, target: cpu, limit: 1ms, dry_run: true}
`, port, direct)
	path := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", path)
	run := fmt.Sprintf("%d", rand.Uint32())

	est := proxyEstimate(t, base, "e2e", heavySQL+" /* guardrail_probe_"+run+" */")
	if !est.Estimated || !(est.CPUSeconds > 0.001) {
		t.Fatalf("the estimator does not put the join over the 1 ms limit, nothing to refuse: %+v", est)
	}
	t.Logf("the proxy estimates %s CPU for the join (%s)", est.CPUTime, est.Source)

	t.Run("a query over the limit is refused with PRESTROID_GUARDRAIL and never reaches Trino", func(t *testing.T) {
		marker := "guardrail_refused_" + run
		var n int
		err := e2e.OpenDB(t, base, "").QueryRow(heavySQL + " /* " + marker + " */").Scan(&n)
		var te *trino.ErrTrino
		if errors.As(err, &te) {
			if te.ErrorName != guardrail.ErrorName || te.ErrorType != "USER_ERROR" {
				t.Errorf("error %s/%s: %s", te.ErrorName, te.ErrorType, te.Message)
			}
			want := fmt.Sprintf(`guardrail "tiny-cpu" refused the query: its estimated CPU time at quantile 0.5 is %s, over the limit of 1ms; the query was not sent. To run it anyway, add the client tag "guardrail-ok"`,
				guardrail.Format(estimate.TargetCPU, est.CPUSeconds))
			if !strings.Contains(te.Message, want) {
				t.Errorf("message\n%s\nlacks\n%s", te.Message, want)
			}
		} else {
			t.Errorf("want a failed query, got %v", err)
		}
		if seen := e2e.SeenByTrino(t, direct, marker); seen != 0 {
			t.Errorf("Trino ran %d queries with the refused query's marker", seen)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="refused",rule="tiny-cpu"}`); v != "1" {
			t.Errorf("refusals counted: %q", v)
		}
	})

	t.Run("the same query with the override tag runs and returns its rows", func(t *testing.T) {
		marker := "guardrail_override_" + run
		var n int
		if err := e2e.OpenDB(t, base, "&clientTags=etl,guardrail-ok").QueryRow(heavySQL + " /* " + marker + " */").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 60175 { // tpch.tiny.lineitem's rows, each with its order
			t.Errorf("count %d", n)
		}
		if seen := e2e.SeenByTrino(t, direct, marker); seen != 1 {
			t.Errorf("Trino ran %d queries with the overriding query's marker, want 1", seen)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="override",rule="tiny-cpu"}`); v != "1" {
			t.Errorf("overrides counted: %q", v)
		}
	})

	t.Run("a dry-run rule lets the query run and only counts it", func(t *testing.T) {
		marker := "guardrail_dry_run_" + run
		db, err := sql.Open("trino", strings.Replace(base, "http://", "http://e2e-shadow@", 1)+"?source=prestroid-e2e")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		var n int
		if err := db.QueryRow(heavySQL + " /* " + marker + " */").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 60175 {
			t.Errorf("count %d", n)
		}
		if seen := e2e.SeenByTrino(t, direct, marker); seen != 1 {
			t.Errorf("Trino ran %d queries with the dry-run query's marker, want 1", seen)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="dry_run",rule="tiny-cpu-shadow"}`); v != "1" {
			t.Errorf("dry-run hits counted: %q", v)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="refused",rule="tiny-cpu-shadow"}`); v != "0" {
			t.Errorf("the dry-run rule counted refusals: %q", v)
		}
	})

	t.Run("a statement without an estimate fails open", func(t *testing.T) {
		// SET SESSION is not estimated: it goes through, counted.
		if _, err := e2e.OpenDB(t, base, "").Exec("SET SESSION query_max_run_time = '1h'"); err != nil {
			t.Fatal(err)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="fail_open",rule="tiny-cpu"}`); v != "1" {
			t.Errorf("fail-open counted: %q", v)
		}
	})

	t.Run("the console lists the refusal and the dry-run hit", func(t *testing.T) {
		resp, err := http.Get(base + "/prestroid/api/guardrails")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v struct {
			Total  int
			Events []guardrail.Event
		}
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatal(err)
		}
		if v.Total != 2 || len(v.Events) != 2 || v.Events[0].Outcome != "dry_run" || v.Events[0].User != "e2e-shadow" ||
			v.Events[1].Outcome != "refused" || v.Events[1].Rule != "tiny-cpu" || !strings.Contains(v.Events[1].SQL, "guardrail_refused_"+run) {
			t.Errorf("%+v", v)
		}
	})
	t.Run("the console page shows the refusal in its Guardrails panel", func(t *testing.T) {
		browser := chromium(t)
		opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.UserDataDir(t.TempDir()),
			chromedp.NoSandbox, chromedp.WindowSize(1440, 1000), chromedp.Flag("disable-gpu", true))
		actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
		defer acancel()
		ctx, cancel := chromedp.NewContext(actx)
		defer cancel()
		ctx, tcancel := context.WithTimeout(ctx, 2*time.Minute)
		defer tcancel()
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/prestroid/#guardrails"),
			chromedp.Poll[chromedp.Void](`document.body.dataset.loaded !== undefined`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			t.Fatal(err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
			`[...document.querySelectorAll('#guardrails-table tbody tr')].map((r) => r.innerText.replace(/\s+/g, ' '))`))
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != 2 || !strings.Contains(rows[1], "refused") || !strings.Contains(rows[1], "tiny-cpu") ||
			!strings.Contains(rows[1], guardrail.Format(estimate.TargetCPU, est.CPUSeconds)) || !strings.Contains(rows[1], "1ms") ||
			!strings.Contains(rows[1], "guardrail_refused_"+run) || !strings.Contains(rows[0], "dry run") {
			t.Errorf("the panel's rows: %q", rows)
		}
	})

	t.Run("the Trino CLI shows the refusal, and its --client-tags override runs the query", func(t *testing.T) {
		cli := os.Getenv("PRESTROID_TRINO_CLI")
		if cli == "" {
			t.Skip("PRESTROID_TRINO_CLI not set (make test sets it)")
		}
		marker := "guardrail_cli_" + run
		sql := heavySQL + " /* " + marker + " */"
		out, err := exec.Command("java", "-jar", cli, "--server", base, "--user", "e2e", "--execute", sql).CombinedOutput()
		if err == nil || !strings.Contains(string(out), `guardrail "tiny-cpu" refused the query`) || !strings.Contains(string(out), `client tag "guardrail-ok"`) {
			t.Errorf("CLI without the tag: %v\n%s", err, out)
		}
		if seen := e2e.SeenByTrino(t, direct, marker); seen != 0 {
			t.Errorf("Trino ran %d queries with the refused CLI query's marker", seen)
		}
		out, err = exec.Command("java", "-jar", cli, "--server", base, "--user", "e2e", "--client-tags", "guardrail-ok",
			"--output-format", "TSV", "--execute", sql).CombinedOutput()
		// The last line: the CLI may warn first (no system terminal).
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); err != nil || lines[len(lines)-1] != "60175" {
			t.Errorf("CLI with the override tag: %v\n%s", err, out)
		}
		if v := metric(t, base, `prestroid_guardrail_decisions_total{outcome="refused",rule="tiny-cpu"}`); v != "2" {
			t.Errorf("refusals counted: %q", v)
		}
	})
}
