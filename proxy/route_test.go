package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/routing"
)

// fixedEstimator answers every query with the CPU seconds found after
// "cpu=" in the SQL text (and the peak memory in bytes after "mem=", the
// elapsed seconds after "elapsed=", each a point), or fails / stalls on request: a test double for
// the proxy's own unit tests (the real model is tested end to end).
type fixedEstimator struct{ calls atomic.Int64 }

func (f *fixedEstimator) Estimate(ctx context.Context, q Query) (estimate.Estimate, error) {
	f.calls.Add(1)
	switch {
	case strings.Contains(q.SQL, "fail"):
		return estimate.Estimate{}, errors.New("explain failed")
	case strings.Contains(q.SQL, "stall"):
		<-ctx.Done()
		return estimate.Estimate{}, ctx.Err()
	case strings.HasPrefix(q.SQL, "SET"):
		return estimate.Estimate{Reason: "SET SESSION"}, nil
	case strings.Contains(q.SQL, "busy"):
		return estimate.Estimate{}, fmt.Errorf("every planner busy: %w", ErrEstimatorBusy)
	case strings.Contains(q.SQL, "history"):
		// A confident history estimate, no EXPLAIN: 5 s ± a little.
		return estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 0.05, Source: estimate.SourceHistory}, nil
	case strings.Contains(q.SQL, "uncertain"):
		// A new shape's model estimate: median 5 s, wide interval.
		return estimate.Estimate{Estimated: true, CPUSeconds: 5, Sigma: 1, Source: estimate.SourceModel, Model: "test-model",
			ModelCPUSeconds: 4, Planner: q.Planners[len(q.Planners)-1]}, nil
	}
	var cpu float64
	if i := strings.Index(q.SQL, "cpu="); i >= 0 {
		f := strings.Fields(q.SQL[i+4:])[0]
		cpu, _ = parseFloat(f)
	}
	if q.Header.Get("X-Trino-User") == "" {
		return estimate.Estimate{}, errors.New("no caller identity")
	}
	e := estimate.Estimate{Estimated: true, CPUSeconds: cpu, Model: "test-model"}
	if strings.Contains(q.SQL, "plan") {
		e.Plan = []byte(`{"0":{"name":"Output"}}`)
	}
	for _, t := range []estimate.Target{estimate.TargetMemory, estimate.TargetElapsed} {
		key := map[estimate.Target]string{estimate.TargetMemory: "mem=", estimate.TargetElapsed: "elapsed="}[t]
		if i := strings.Index(q.SQL, key); i >= 0 {
			v, _ := parseFloat(strings.Fields(q.SQL[i+len(key):])[0])
			e.Set(t, estimate.Quantity{Median: v})
		}
	}
	return e, nil
}

func parseFloat(s string) (float64, error) {
	var f float64
	_, err := fmt.Sscan(s, &f)
	return f, err
}

// coordinator is a stub cluster recording the last statement POST.
type coordinator struct {
	*stubTrino
	lastPost atomic.Pointer[http.Request]
	healthy  atomic.Bool
}

func newCoordinator(t *testing.T) *coordinator {
	c := &coordinator{}
	c.healthy.Store(true)
	c.stubTrino = newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		switch {
		case r.URL.Path == "/v1/info":
			if !c.healthy.Load() {
				w.WriteHeader(503)
				return
			}
			io.WriteString(w, `{"starting":false}`)
		case r.URL.Path == "/v1/query":
			io.WriteString(w, `[]`)
		case r.URL.Path == "/v1/statement":
			c.lastPost.Store(r.Clone(context.Background()))
			if strings.Contains(r.Header.Get("X-Trino-Transaction-Id"), "NONE") {
				w.Header().Set("X-Trino-Started-Transaction-Id", "tx-uuid-1")
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, queuedPage(base))
		default:
			http.NotFound(w, r)
		}
	})
	return c
}

func routingProxy(t *testing.T, o Options) string {
	t.Helper()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	if o.MonitorInterval == 0 {
		o.MonitorInterval = 50 * time.Millisecond
	}
	addr, _ := serveTest(t, o)
	time.Sleep(150 * time.Millisecond) // first health round
	return addr
}

func sendSQL(t *testing.T, p, sql string, h map[string]string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", p+"/v1/statement", strings.NewReader(sql))
	req.Header.Set("X-Trino-User", "alice")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp
}

func TestCostRouting(t *testing.T) {
	small, large := newCoordinator(t), newCoordinator(t)
	est := &fixedEstimator{}
	classes := []routing.CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}}
	p := routingProxy(t, Options{
		Clusters:  []ClusterConfig{{Name: "small", URL: small.URL, Class: "small"}, {Name: "large", URL: large.URL, Class: "large"}},
		Estimator: est, Classes: classes, EstimateTimeout: 200 * time.Millisecond, ClassTag: "cost:",
		ClassQuantile: 0.9,
	})
	for _, tc := range []struct {
		name, sql, cluster, decision, estimate string
	}{
		{"a light query goes to the small cluster", "SELECT 1 -- cpu=0.5", "small", "routed: class small", "CPU_TIME=500ms"},
		{"a heavy query goes to the large cluster", "SELECT 2 -- cpu=900", "large", "routed: class large", "CPU_TIME=15m"},
		{"a failing estimate fails open to the default cluster", "SELECT fail", "small", "fail-open: estimate failed", ""},
		{"a slow estimate fails open within the budget", "SELECT stall", "small", "fail-open: estimate over budget", ""},
		{"a statement the model does not score is not annotated", "SET SESSION a = 1", "small", "not-estimated: SET SESSION", ""},
		{"planners at their EXPLAIN bound fail open at once", "SELECT busy", "small", "fail-open: planners busy", ""},
		{"a confident 5 s history estimate stays in the 10 s class", "SELECT history", "small", "routed: class small", "CPU_TIME=5s"},
		{"an uncertain 5 s model estimate goes large at the 0.9 quantile", "SELECT uncertain", "large", "routed: class large", "CPU_TIME=5s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := sendSQL(t, p, tc.sql, nil)
			if got := resp.Header.Get("X-Prestroid-Cluster"); got != tc.cluster {
				t.Errorf("cluster %q, want %q", got, tc.cluster)
			}
			if got := resp.Header.Get("X-Prestroid-Decision"); got != tc.decision {
				t.Errorf("decision %q, want %q", got, tc.decision)
			}
			fromHistory := strings.Contains(tc.sql, "history") // no EXPLAIN, no model
			st := resp.Header.Get("Server-Timing")
			if !strings.HasPrefix(st, "prestroid;dur=") || strings.Contains(st, "explain;dur=") != (tc.estimate != "" && !fromHistory) ||
				strings.Contains(st, "estimate;desc=history") != fromHistory {
				t.Errorf("Server-Timing %q", st)
			}
			if est := resp.Header.Get("X-Prestroid-Estimate"); (tc.estimate != "") != (est != "") ||
				fromHistory && !strings.HasPrefix(est, "history; cpu=5; lo=") ||
				strings.Contains(tc.sql, "uncertain") && !strings.HasSuffix(est, "; model=4") {
				t.Errorf("X-Prestroid-Estimate %q", est)
			}
			target := map[string]*coordinator{"small": small, "large": large}[tc.cluster]
			up := target.lastPost.Load()
			if got := up.Header.Get("X-Trino-Resource-Estimate"); got != tc.estimate {
				t.Errorf("upstream X-Trino-Resource-Estimate %q, want %q", got, tc.estimate)
			}
			if tc.estimate != "" {
				if (resp.Header.Get("X-Prestroid-Model") != "test-model") != fromHistory || resp.Header.Get("X-Prestroid-Cpu-Estimate") == "" {
					t.Errorf("estimate headers missing: %v", resp.Header)
				}
				if !strings.Contains(up.Header.Get("X-Trino-Client-Tags"), "cost:"+tc.cluster) {
					t.Errorf("class tag missing: %q", up.Header.Get("X-Trino-Client-Tags"))
				}
			}
		})
	}
	t.Run("the client's own resource estimate is replaced unless configured to keep it", func(t *testing.T) {
		sendSQL(t, p, "SELECT 3 -- cpu=1", map[string]string{"X-Trino-Resource-Estimate": "CPU_TIME=1d"})
		if got := small.lastPost.Load().Header.Values("X-Trino-Resource-Estimate"); len(got) != 1 || got[0] != "CPU_TIME=1s" {
			t.Errorf("upstream estimate %q", got)
		}
	})
	t.Run("an unhealthy class falls back to the next larger one", func(t *testing.T) {
		small.healthy.Store(false)
		defer small.healthy.Store(true)
		time.Sleep(200 * time.Millisecond)
		resp := sendSQL(t, p, "SELECT 4 -- cpu=1", nil)
		if resp.Header.Get("X-Prestroid-Cluster") != "large" || !strings.HasPrefix(resp.Header.Get("X-Prestroid-Decision"), "fallback") {
			t.Errorf("cluster %q decision %q", resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"))
		}
	})
	t.Run("a transaction sticks to the cluster that started it", func(t *testing.T) {
		resp := sendSQL(t, p, "START TRANSACTION -- cpu=900", map[string]string{"X-Trino-Transaction-Id": "NONE"})
		tx := resp.Header.Get("X-Trino-Started-Transaction-Id")
		if resp.Header.Get("X-Prestroid-Cluster") != "large" || tx != "large~tx-uuid-1" {
			t.Fatalf("cluster %q, started transaction %q", resp.Header.Get("X-Prestroid-Cluster"), tx)
		}
		before := est.calls.Load()
		resp = sendSQL(t, p, "SELECT 5 -- cpu=0.1", map[string]string{"X-Trino-Transaction-Id": tx})
		if resp.Header.Get("X-Prestroid-Cluster") != "large" || resp.Header.Get("X-Prestroid-Decision") != "transaction" {
			t.Errorf("follow-up went to %q (%q)", resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"))
		}
		if got := large.lastPost.Load().Header.Get("X-Trino-Transaction-Id"); got != "tx-uuid-1" {
			t.Errorf("Trino got transaction id %q, want its own", got)
		}
		if est.calls.Load() != before {
			t.Errorf("a statement inside a transaction was estimated")
		}
		resp = sendSQL(t, p, "SELECT 6", map[string]string{"X-Trino-Transaction-Id": "elsewhere~tx"})
		if resp.StatusCode != 400 {
			t.Errorf("transaction naming an unknown cluster: %d, want 400", resp.StatusCode)
		}
	})
}

func TestShadowModeOnlyReports(t *testing.T) {
	small, large := newCoordinator(t), newCoordinator(t)
	p := routingProxy(t, Options{
		Clusters:  []ClusterConfig{{Name: "small", URL: small.URL, Class: "small"}, {Name: "large", URL: large.URL, Class: "large"}},
		Estimator: &fixedEstimator{}, Shadow: true,
		Classes: []routing.CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}},
	})
	resp := sendSQL(t, p, "SELECT 1 -- cpu=900", nil)
	if resp.Header.Get("X-Prestroid-Cluster") != "small" || resp.Header.Get("X-Prestroid-Decision") != "shadow: would route to large" {
		t.Errorf("cluster %q decision %q", resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"))
	}
	if small.lastPost.Load().Header.Get("X-Trino-Resource-Estimate") != "" {
		t.Error("shadow mode annotated the query")
	}
}

// TestFailoverWhenAClusterRefusesConnections: a new query whose cluster
// cannot be reached goes to another healthy one (same class first); the
// unreachable cluster stays out of routing; with nothing left the client
// gets an error and nothing hangs.
func TestFailoverWhenAClusterRefusesConnections(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	live := newCoordinator(t)
	p := routingProxy(t, Options{
		Clusters:        []ClusterConfig{{Name: "dead", URL: dead, Class: "small"}, {Name: "live", URL: live.URL, Class: "small"}},
		Estimator:       &fixedEstimator{},
		Classes:         []routing.CostClass{{Name: "small"}},
		EstimateTimeout: 200 * time.Millisecond,
		MonitorInterval: -1, // nobody has checked the dead cluster
	})
	resp := sendSQL(t, p, "SELECT 1 -- cpu=1", nil)
	if c, why := resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"); c != "live" ||
		why != "routed: class small; failover: dead unreachable" {
		t.Fatalf("first query on %q (%q)", c, why)
	}
	if live.lastPost.Load() == nil {
		t.Fatal("the live cluster got no statement")
	}
	// Now known down: the next query goes straight to the live cluster.
	resp = sendSQL(t, p, "SELECT 2 -- cpu=1", nil)
	if c, why := resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"); c != "live" || why != "routed: class small" {
		t.Fatalf("second query on %q (%q)", c, why)
	}

	// A single unreachable cluster: the client gets an answer, not a hang.
	alone := routingProxy(t, Options{Clusters: []ClusterConfig{{Name: "dead", URL: dead}}, MonitorInterval: -1})
	resp = sendSQL(t, alone, "SELECT 1", nil)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %s, want 503 (nothing was sent)", resp.Status)
	}
}

// TestRoutingRulesBeforeCost: with Options.Rules the server routes by the
// first matching rule's class, then by cost; metrics count the rule kind.
func TestRoutingRulesBeforeCost(t *testing.T) {
	small, large := newCoordinator(t), newCoordinator(t)
	p := routingProxy(t, Options{
		Clusters:  []ClusterConfig{{Name: "small", URL: small.URL, Class: "small"}, {Name: "large", URL: large.URL, Class: "large"}},
		Estimator: &fixedEstimator{}, EstimateTimeout: 200 * time.Millisecond,
		Classes: []routing.CostClass{{Name: "small", MaxCPUSeconds: 10}, {Name: "large"}},
		Rules:   []routing.Rule{{Name: "etl", ClientTags: []string{"etl"}, Class: "large"}, {Source: "dashboards", Class: "small"}},
	})
	for _, tc := range []struct {
		name     string
		sql      string
		h        map[string]string
		cluster  string
		decision string
	}{
		{"a tagged light query goes where its rule says", "SELECT 1 -- cpu=0.5", map[string]string{"X-Trino-Client-Tags": "nightly, etl"}, "large", "rule: etl; class large"},
		{"a heavy query from a source rule goes to its class", "SELECT 2 -- cpu=900", map[string]string{"X-Trino-Source": "dashboards"}, "small", "rule: rules[1]; class small"},
		{"a query no rule matches is routed by cost", "SELECT 3 -- cpu=900", nil, "large", "routed: class large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := sendSQL(t, p, tc.sql, tc.h)
			if c, d := resp.Header.Get("X-Prestroid-Cluster"), resp.Header.Get("X-Prestroid-Decision"); c != tc.cluster || d != tc.decision {
				t.Errorf("cluster %q decision %q, want %q %q", c, d, tc.cluster, tc.decision)
			}
		})
	}
	resp, err := http.Get(p + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `prestroid_decisions_total{class="large",cluster="large",kind="rule"} 1`; !strings.Contains(string(body), want) {
		t.Errorf("/metrics lacks %s", want)
	}
	if _, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "a", URL: small.URL}}, Classes: []routing.CostClass{{Name: "small"}},
		Rules: []routing.Rule{{User: "x", Class: "huge"}}})); err == nil {
		t.Error("New accepted a rule naming an unknown class")
	}
}

func TestPlannersAreTheHealthyPlanningGroup(t *testing.T) {
	cfg := []ClusterConfig{{Name: "a", URL: "http://a:1"}, {Name: "b", URL: "http://b:1"}, {Name: "c", URL: "http://c:1"}}
	for _, tc := range []struct {
		name     string
		planners []string
		want     []string
	}{
		{"with no planning group every cluster plans, the default first", nil, []string{"http://a:1", "http://b:1", "http://c:1"}},
		{"a planning group without the default cluster leaves it out", []string{"c", "b"}, []string{"http://b:1", "http://c:1"}},
		{"the default cluster in the group comes first", []string{"c", "a"}, []string{"http://a:1", "http://c:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(withDefaults(Options{Clusters: cfg, Planners: tc.planners, MonitorInterval: -1}))
			if err != nil {
				t.Fatal(err)
			}
			if got := s.planners(s.defaultCluster()); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("planners %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEstimateQuantiles(t *testing.T) {
	e := estimate.Estimate{CPUSeconds: 10, Sigma: 0.5}
	if got := e.Quantile(0.5); math.Abs(got-10) > 1e-9 {
		t.Errorf("median %g, want 10", got)
	}
	lo, hi := e.Interval()
	// The 10% and 90% quantiles of a log-normal: 10·e^(∓1.2816·0.5).
	if math.Abs(lo-10*math.Exp(-1.2815516*0.5)) > 1e-4 || math.Abs(hi-10*math.Exp(1.2815516*0.5)) > 1e-4 {
		t.Errorf("interval [%g, %g]", lo, hi)
	}
	if got := (estimate.Estimate{CPUSeconds: 3}).Quantile(0.9); got != 3 {
		t.Errorf("no sigma: quantile %g, want the point 3", got)
	}
	for _, q := range []float64{0, 1, -1, math.NaN()} {
		if got := e.Quantile(q); got != 10 {
			t.Errorf("quantile %g: %g, want the point", q, got)
		}
	}
}
