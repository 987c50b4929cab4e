package presto

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// TestSessionHeadersMatchDirect: the response headers a PrestoDB client
// acts on (X-Presto-Set-Session, -Clear-Session, -Set-Catalog, -Set-Schema,
// -Added-Prepare, -Deallocated-Prepare, -Started-Transaction-Id, every
// value in order) come through the proxy as PrestoDB sends them; the
// transaction id carries its cluster, and the transaction's statements
// reach PrestoDB inside it.
func TestSessionHeadersMatchDirect(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	proxied := startPresto(t)
	for _, tc := range []struct {
		name, sql string
		h         map[string]string
	}{
		{"SET SESSION", "SET SESSION query_max_run_time = '1h'", nil},
		{"RESET SESSION", "RESET SESSION query_max_run_time", map[string]string{"X-Presto-Session": "query_max_run_time=1h"}},
		{"USE", "USE tpch.sf1", nil},
		{"PREPARE", "PREPARE q1 FROM SELECT 1", nil},
		{"DEALLOCATE", "DEALLOCATE PREPARE q1", map[string]string{"X-Presto-Prepared-Statement": "q1=SELECT+1"}},
		{"several session properties in one request", "SELECT 1", map[string]string{"X-Presto-Session": "query_max_run_time=1h,join_distribution_type=BROADCAST"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wp, _, want := run(t, direct, tc.sql, tc.h)
			gp, _, got := run(t, proxied, tc.sql, tc.h)
			if wp.Error != nil || gp.Error != nil {
				t.Fatalf("errors: direct %+v, proxy %+v", wp.Error, gp.Error)
			}
			if len(want) == 0 && tc.name != "several session properties in one request" {
				t.Fatalf("PrestoDB sent no X-Presto-* header for %s", tc.sql)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("headers through the proxy %v, direct %v", got, want)
			}
		})
	}
	t.Run("a transaction started through the proxy carries its cluster and holds its statements", func(t *testing.T) {
		p, _, h := run(t, proxied, "START TRANSACTION", map[string]string{"X-Presto-Transaction-Id": "NONE"})
		tx := h.Get("X-Presto-Started-Transaction-Id")
		if p.Error != nil || !strings.HasPrefix(tx, "presto~") || h.Get("X-Trino-Started-Transaction-Id") != "" {
			t.Fatalf("START TRANSACTION: %+v, headers %v", p.Error, h)
		}
		resp, first := do(t, "POST", proxied+"/v1/statement", "SELECT count(*) FROM tpch.tiny.region", map[string]string{"X-Presto-Transaction-Id": tx})
		if resp.Header.Get("X-Prestroid-Decision") != "transaction" {
			t.Errorf("decision %q", resp.Header.Get("X-Prestroid-Decision"))
		}
		for p = first; p.NextURI != ""; {
			_, p = do(t, "GET", p.NextURI, "", map[string]string{"X-Presto-Transaction-Id": tx})
		}
		info := queryInfo(t, direct, first.ID)
		if got, _ := info["session"].(map[string]any)["transactionId"].(string); got != strings.TrimPrefix(tx, "presto~") {
			t.Errorf("PrestoDB ran the statement in transaction %q, want %q", got, strings.TrimPrefix(tx, "presto~"))
		}
		p, _, h = run(t, proxied, "COMMIT", map[string]string{"X-Presto-Transaction-Id": tx})
		if p.Error != nil || p.Stats.State != "FINISHED" || h.Get("X-Presto-Clear-Transaction-Id") == "" {
			t.Errorf("COMMIT: %+v, headers %v", p.Error, h)
		}
	})
}

// queryInfo is PrestoDB's GET /v1/query/{id}, asked directly.
func queryInfo(t testing.TB, direct, id string) map[string]any {
	t.Helper()
	var info map[string]any
	for i := 0; i < 50; i++ {
		req, _ := http.NewRequest("GET", direct+"/v1/query/"+id, nil)
		req.Header.Set("X-Presto-User", "e2e")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 && json.Unmarshal(b, &info) == nil {
			return info
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("PrestoDB does not know query %s", id)
	return nil
}

// TestCancelThroughTheProxy: a PrestoDB client's cancel (DELETE of its
// nextUri, whose slug is a query parameter) and partial cancel (DELETE of
// partialCancelUri, /v1/stage/…) reach PrestoDB through the proxy.
func TestCancelThroughTheProxy(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	proxied := startPresto(t)
	resp, p := do(t, "POST", proxied+"/v1/statement", slowSQL, nil)
	if resp.StatusCode != 200 || !strings.Contains(p.NextURI, "slug=") {
		t.Fatalf("POST: %s, nextUri %q", resp.Status, p.NextURI)
	}
	id := p.ID
	deadline := time.Now().Add(60 * time.Second)
	for p.Stats.State != "RUNNING" && p.NextURI != "" && time.Now().Before(deadline) {
		_, p = do(t, "GET", p.NextURI, "", nil)
	}
	if p.Stats.State != "RUNNING" {
		t.Fatalf("the query never ran: %s %+v", p.Stats.State, p.Error)
	}
	if p.PartialCancelURI != "" {
		if !strings.HasPrefix(p.PartialCancelURI, proxied+"/r/") {
			t.Errorf("partialCancelUri %s not routed", p.PartialCancelURI)
		}
		if r, _ := do(t, "DELETE", p.PartialCancelURI, "", nil); r.StatusCode >= 300 {
			t.Errorf("partial cancel through the proxy: %s", r.Status)
		}
	}
	if r, _ := do(t, "DELETE", p.NextURI, "", nil); r.StatusCode != http.StatusNoContent {
		t.Errorf("cancel through the proxy: %s", r.Status)
	}
	for time.Now().Before(deadline) {
		info := queryInfo(t, direct, id)
		if info["state"] == "FAILED" {
			if code, _ := info["errorCode"].(map[string]any); code["name"] != "USER_CANCELED" {
				t.Errorf("query failed with %v, want USER_CANCELED", info["errorCode"])
			}
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("PrestoDB did not cancel query %s", id)
}

// fixedEstimate is an estimator that always predicts cpu seconds.
type fixedEstimate struct {
	cpu, mem, elapsed float64 // seconds, bytes, seconds (0: not predicted)
	got               chan proxy.Query
}

func (f fixedEstimate) Estimate(_ context.Context, q proxy.Query) (estimate.Estimate, error) {
	select {
	case f.got <- q:
	default:
	}
	return estimate.Estimate{Estimated: true, CPUSeconds: f.cpu, Source: estimate.SourceModel,
		PeakMemory: estimate.Quantity{Median: f.mem}, Elapsed: estimate.Quantity{Median: f.elapsed}}, nil
}

// TestResourceEstimateReachesPresto: on a PrestoDB cluster the estimate
// travels as X-Presto-Resource-Estimate, which PrestoDB parses into the
// query's session (resourceEstimates.cpuTime, what its resource-group
// selectors read); the estimator is asked as the PrestoDB engine, with the
// caller's headers in the canonical form.
func TestResourceEstimateReachesPresto(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	est := fixedEstimate{cpu: 42, mem: 3 << 30, elapsed: 90, got: make(chan proxy.Query, 1)}
	base, _ := e2e.StartProxy(t, proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "presto", URL: direct}},
		Estimator: est, EstimateTimeout: 5 * time.Second, MonitorInterval: time.Second})
	time.Sleep(1500 * time.Millisecond) // the monitor's first round tells the engine
	p, rows, _ := run(t, base, "SELECT count(*) FROM tpch.tiny.nation", nil)
	if p.Error != nil || len(rows) != 1 {
		t.Fatalf("query: %+v, rows %v", p.Error, rows)
	}
	info := queryInfo(t, direct, p.ID)
	re, _ := info["session"].(map[string]any)["resourceEstimates"].(map[string]any)
	if re["cpuTime"] != "42.00s" {
		t.Errorf("PrestoDB's resourceEstimates %v, want cpuTime 42.00s", re)
	}
	// All three fields: EXECUTION_TIME=90s, PEAK_MEMORY=3072MB.
	if re["executionTime"] != "90.00s" || re["peakMemory"] != "3072MB" {
		t.Errorf("PrestoDB's resourceEstimates %v, want executionTime 90.00s and peakMemory 3072MB", re)
	}
	q := <-est.got
	if q.Engine.String() != "presto" || q.Header.Get("X-Trino-User") != "e2e" || q.Server != direct {
		t.Errorf("the estimator was asked engine %v, server %s, header %v", q.Engine, q.Server, q.Header)
	}
}
