// Package dashboard tests the Grafana dashboard (deploy/grafana/prestroid.json)
// against a real Prometheus: the real binary in front of the real Trino, a
// Prometheus started by the test scraping the binary's admin listener every
// second (with the admin token), a short workload (estimated queries, an
// exact repeat, a fail-open, a query that waits in the admission queue),
// then every panel's every PromQL expression, with the dashboard's
// variables resolved the way Grafana resolves them (their own label_values
// queries), evaluated through Prometheus' HTTP API: each must evaluate
// without error and return at least one series with a number.
//
// Environment: PRESTROID_TRINO_URL (skips without it), PRESTROID_BIN,
// PRESTROID_ORT_LIB (the model, for estimated queries), and
// PRESTROID_PROMETHEUS or prometheus on PATH (Debian's `prometheus`
// package; scripts/install-prometheus.sh).
package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// dashboard is the part of Grafana's dashboard model the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []variable `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	IncludeAll bool            `json:"includeAll"`
	Multi      bool            `json:"multi"`
	AllValue   string          `json:"allValue"`
}

type datasourceRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Datasource *datasourceRef `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	path := filepath.Join(e2e.RepoRoot(t), "deploy/grafana/prestroid.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// allPanels flattens collapsed rows.
func (d dashboard) allPanels() []panel {
	var ps []panel
	for _, p := range d.Panels {
		ps = append(ps, p)
		ps = append(ps, p.Panels...)
	}
	return ps
}

// TestDashboardShape needs no Prometheus: the JSON is a dashboard Grafana
// imports (a Prometheus datasource variable every query uses, unique panel
// ids, every non-row panel with a query) and covers what the README lists.
func TestDashboardShape(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("uid %q, title %q", d.UID, d.Title)
	}
	ds := false
	for _, v := range d.Templating.List {
		if v.Name == "datasource" && v.Type == "datasource" && string(v.Query) == `"prometheus"` {
			ds = true
		}
	}
	if !ds {
		t.Errorf("no datasource variable of type prometheus")
	}
	ids := map[int]string{}
	var exprs []string
	for _, p := range d.allPanels() {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panel id %d used by %q and %q", p.ID, prev, p.Title)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if p.GridPos.W == 0 || p.GridPos.H == 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v", p.Title, p.GridPos)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable: %+v", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if tg.Expr == "" || refs[tg.RefID] || tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: target %+v (empty, duplicate refId or another datasource)", p.Title, tg)
			}
			refs[tg.RefID] = true
			exprs = append(exprs, tg.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, m := range []string{"prestroid_decisions_total", "prestroid_fail_open_total", "prestroid_estimate_seconds_bucket",
		"prestroid_explain_seconds_bucket", "prestroid_estimate_qerror_bucket", "prestroid_queue_length",
		"prestroid_queue_wait_seconds_bucket", "prestroid_cluster_queries", "prestroid_cluster_healthy",
		"prestroid_unseen_table_share_ratio", "prestroid_estimator_cache_hits_total", "prestroid_estimate_cache_total", "go_goroutines"} {
		if !strings.Contains(all, m) {
			t.Errorf("no panel queries %s", m)
		}
	}
}

const (
	estimatedSQL = "SELECT orderpriority, count(*), sum(totalprice) FROM tpch.tiny.orders GROUP BY orderpriority"
	otherSQL     = "SELECT returnflag, count(*), sum(quantity) FROM tpch.tiny.lineitem GROUP BY returnflag"
	thirdSQL     = "SELECT nationkey, count(*) FROM tpch.tiny.customer GROUP BY nationkey"
	failingSQL   = "SELECT * FROM tpch.tiny.no_such_table" // its EXPLAIN fails: fail-open
	adminToken   = "dashboard-test-admin-token-0123456789"
)

func TestDashboardQueriesOnRealPrometheus(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	promBin := findPrometheus(t)
	d := loadDashboard(t)
	dir := t.TempDir()

	// The binary: one live cluster and one dead one (health 0), admission
	// of one query at a time (so a second one waits), the admin endpoints
	// on their own listener behind a token.
	port, adminPort := e2e.FreePort(t), e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
admin_listen: 127.0.0.1:%s
admin_token: %s
route_secret: %s
clusters:
  - {name: dead, url: "http://127.0.0.1:%s", class: small}
  - {name: live, url: %q, class: small}
routing:
  classes:
    - {name: small}
  monitor_interval: 1s
  estimate_timeout: 60s
  explain: always   # the workload's EXPLAINs (a failing one too) on the hot path: the EXPLAIN and fail-open panels get data
admission:
  max_queries: 1
`, port, adminPort, adminToken, strings.Repeat("d", 40), e2e.FreePort(t), trino)
	cfgPath := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", cfgPath)
	waitFor(t, 30*time.Second, "the proxy's /readyz", func() (bool, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == 200, string(b)
	})

	prom := startPrometheus(t, promBin, dir, "127.0.0.1:"+adminPort)
	waitFor(t, 60*time.Second, "Prometheus scraping the proxy", func() (bool, string) {
		r, err := prom.query(`up{job="prestroid"}`)
		return err == nil && len(r) == 1 && r[0].value == 1, fmt.Sprint(r, err)
	})

	// The workload.
	start := time.Now()
	for _, q := range []struct{ sql, decision, state string }{
		{estimatedSQL, "routed: class small", "FINISHED"},
		{estimatedSQL, "routed: class small", "FINISHED"}, // the exact repeat: an estimate cache hit
		{failingSQL, "fail-open: estimate failed", "FAILED"},
	} {
		decision, state := runQuery(t, base, q.sql)
		if !strings.HasPrefix(decision, q.decision) || state != q.state {
			t.Errorf("%s: X-Prestroid-Decision %q, state %s; want %q, %s (PRESTROID_ORT_LIB=%q)",
				q.sql, decision, state, q.decision, q.state, os.Getenv("PRESTROID_ORT_LIB"))
		}
	}
	// A query waits in the admission queue: the first holds the only slot
	// until its last page passes the proxy.
	holder := post(t, base, otherSQL)
	waiter := post(t, base, thirdSQL)
	if waiter.Stats.State != "QUEUED" || waiter.NextURI == "" {
		t.Fatalf("the second query is not waiting: %+v", waiter)
	}
	waitFor(t, 30*time.Second, "Prometheus seeing the queued query", func() (bool, string) {
		r, err := prom.query(`prestroid_queue_length{job="prestroid"}`)
		return err == nil && len(r) == 1 && r[0].value == 1, fmt.Sprint(r, err)
	})
	if s := follow(t, holder); s != "FINISHED" {
		t.Errorf("the holder ended %s", s)
	}
	if s := follow(t, waiter); s != "FINISHED" {
		t.Errorf("the waiting query ended %s", s)
	}
	t.Logf("workload: %v", time.Since(start).Round(time.Millisecond))

	// Every completed query (and the q-error of the estimated ones) has
	// been scraped.
	waitFor(t, 60*time.Second, "Prometheus scraping the finished workload", func() (bool, string) {
		r, err := prom.query(`sum(prestroid_completed_queries_total{job="prestroid"})`)
		q, err2 := prom.query(`sum(prestroid_queued_total{job="prestroid"})`)
		return err == nil && err2 == nil && len(r) == 1 && r[0].value == 5 && len(q) == 1 && q[0].value == 1, fmt.Sprint(r, q, err, err2)
	})
	time.Sleep(2 * time.Second) // two more scrapes: every rate has its last sample

	// The variables, resolved in order by their own queries; the rate
	// window covers the whole workload.
	window := strconv.Itoa(int(time.Since(start).Seconds())+30) + "s"
	vars := map[string]string{"__rate_interval": window, "__interval": "1s", "__range": window}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if json.Unmarshal(v.Query, &s) != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q.Query = s
		}
		values, err := prom.labelValues(substitute(q.Query, vars))
		if err != nil || len(values) == 0 {
			t.Fatalf("variable %s: %s gives %v, %v", v.Name, q.Query, values, err)
		}
		// Grafana's escaping: a multi-value (or All) variable's values
		// become a regex inside a PromQL string, so its backslashes double.
		vars[v.Name] = values[0]
		if v.Multi || v.IncludeAll {
			vars[v.Name] = strings.ReplaceAll(regexp.QuoteMeta(values[0]), `\`, `\\`)
		}
		t.Logf("$%s = %s (of %v)", v.Name, values[0], values)
	}

	n := 0
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			n++
			expr := substitute(tg.Expr, vars)
			t.Run(fmt.Sprintf("%s/%s", p.Title, tg.RefID), func(t *testing.T) {
				if strings.Contains(expr, "$") {
					t.Fatalf("unresolved variable in %s", expr)
				}
				r, err := prom.query(expr)
				if err != nil {
					t.Fatalf("%s: %v", expr, err)
				}
				finite := 0
				for _, s := range r {
					if !math.IsNaN(s.value) && !math.IsInf(s.value, 0) {
						finite++
					}
				}
				if finite == 0 {
					t.Errorf("%s: no series with a number: %v", expr, r)
				}
			})
		}
	}
	t.Logf("%d queries of %d panels evaluated", n, len(d.allPanels()))
}

// substitute replaces $name and ${name} by vars[name], longest names
// first (so $__rate_interval is not read as $__rate).
func substitute(s string, vars map[string]string) string {
	return varRE.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		if v, ok := vars[name]; ok {
			return v
		}
		return m
	})
}

var varRE = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)

// findPrometheus returns $PRESTROID_PROMETHEUS, else prometheus on PATH;
// it skips only when neither is there.
func findPrometheus(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PRESTROID_PROMETHEUS"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("PRESTROID_PROMETHEUS=%s: %v", p, err)
		}
		return p
	}
	p, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found and PRESTROID_PROMETHEUS not set: scripts/install-prometheus.sh (Debian's prometheus package)")
	}
	return p
}

// promServer is a Prometheus started by the test.
type promServer struct{ base string }

// startPrometheus runs Prometheus on a free port with a temporary TSDB,
// scraping target (the proxy's admin listener, with the admin token)
// every second, until the test ends.
func startPrometheus(t *testing.T, bin, dir, target string) *promServer {
	t.Helper()
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte(adminToken), 0o600)
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: prestroid
    authorization:
      credentials_file: %s
    static_configs:
      - targets: [%q]
`, tokenFile, target)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + e2e.FreePort(t)
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd := exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", e2e.Tail(string(b), 4000))
		}
	})
	p := &promServer{base: "http://" + addr}
	waitFor(t, 60*time.Second, "Prometheus ready", func() (bool, string) {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == 200, resp.Status
	})
	return p
}

// sample is one series of an instant vector.
type sample struct {
	metric map[string]string
	value  float64
}

func (s sample) String() string { return fmt.Sprintf("%v=%g", s.metric, s.value) }

var client = &http.Client{Timeout: 20 * time.Second}

// query evaluates expr now through /api/v1/query; a scalar comes back as
// one sample.
func (p *promServer) query(expr string) ([]sample, error) {
	var r struct {
		Status    string `json:"status"`
		Error     string `json:"error"`
		ErrorType string `json:"errorType"`
		Data      struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := p.get("/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("dashboard: %s: %s", r.ErrorType, r.Error)
	}
	parse := func(v [2]any) float64 {
		s, _ := v[1].(string)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return math.NaN()
		}
		return f
	}
	switch r.Data.ResultType {
	case "vector":
		var vs []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &vs); err != nil {
			return nil, err
		}
		out := make([]sample, len(vs))
		for i, v := range vs {
			out[i] = sample{v.Metric, parse(v.Value)}
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		return []sample{{nil, parse(v)}}, nil
	}
	return nil, fmt.Errorf("dashboard: result type %s", r.Data.ResultType)
}

// labelValues answers Grafana's label_values(selector, label) (or
// label_values(label)) through /api/v1/label/LABEL/values.
func (p *promServer) labelValues(q string) ([]string, error) {
	m := labelValuesRE.FindStringSubmatch(strings.TrimSpace(q))
	if m == nil {
		return nil, fmt.Errorf("dashboard: not a label_values query: %s", q)
	}
	selector, label := strings.TrimSpace(m[1]), strings.TrimSpace(m[2])
	if label == "" {
		selector, label = "", selector
	}
	path := "/api/v1/label/" + url.PathEscape(label) + "/values"
	if selector != "" {
		path += "?match[]=" + url.QueryEscape(selector)
	}
	var r struct {
		Status string   `json:"status"`
		Error  string   `json:"error"`
		Data   []string `json:"data"`
	}
	if err := p.get(path, &r); err != nil {
		return nil, err
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("dashboard: %s", r.Error)
	}
	return r.Data, nil
}

var labelValuesRE = regexp.MustCompile(`^label_values\((?:(.*),)?\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)$`)

func (p *promServer) get(path string, into any) error {
	resp, err := client.Get(p.base + path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, into); err != nil {
		return fmt.Errorf("dashboard: %s: %s: %s", path, resp.Status, e2e.Tail(string(b), 300))
	}
	return nil
}

// waitFor polls cond every 250ms until it holds, or fails the test after
// limit with cond's last word.
func waitFor(t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		ok, last := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v; last: %s", what, limit, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

var user = map[string]string{"X-Trino-User": "dashboard-test"}

// post submits sql and returns the first page.
func post(t *testing.T, base, sql string) e2e.Page {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, user)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	return p
}

// follow polls nextUri to the last page and returns the final state.
func follow(t *testing.T, p e2e.Page) string {
	t.Helper()
	for p.NextURI != "" {
		var resp *http.Response
		if resp, p = e2e.Do(t, "GET", p.NextURI, "", user); resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s", p.NextURI, resp.Status)
		}
	}
	return p.Stats.State
}

// runQuery runs sql to its end and returns the POST's X-Prestroid-Decision
// and the final state.
func runQuery(t *testing.T, base, sql string) (string, string) {
	t.Helper()
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", sql, user)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", sql, resp.Status)
	}
	return resp.Header.Get("X-Prestroid-Decision"), follow(t, p)
}
