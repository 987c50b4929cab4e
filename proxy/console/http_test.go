package console

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/estimate"
)

// fakeProxy answers for two clusters, the second never checked.
type fakeProxy struct{ checked time.Time }

func (p fakeProxy) Clusters() []ClusterState {
	return []ClusterState{
		{Name: "small", URL: "http://small:8080", Class: "small", Healthy: true, Load: 3, Checked: p.checked, Running: 2, Queued: 1},
		{Name: "large", URL: "http://large:8080", Class: "large"},
	}
}

func (fakeProxy) TablesScanned() (known, unknown uint64) { return 3, 1 }

// serve runs h on one request and returns the status and body.
func serve(h *Handler, method, uri, contentType, body string) (int, []byte) {
	var ctx fasthttp.RequestCtx
	ctx.Request.Header.SetMethod(method)
	ctx.Request.SetRequestURI(uri)
	if contentType != "" {
		ctx.Request.Header.SetContentType(contentType)
	}
	ctx.Request.SetBodyString(body)
	if !h.ServePage(&ctx) {
		h.ServeAPI(&ctx)
	}
	return ctx.Response.StatusCode(), append([]byte(nil), ctx.Response.Body()...)
}

func TestHandler(t *testing.T) {
	now := time.Now()
	ring := NewRing(10, []string{"small", "large"})
	seq := ringRecord(ring, "20260101_000000_00001_aaaaa", "small", 2, now)
	ring.Finish(seq, Final{Finished: now, State: "FINISHED", CPUSeconds: 0.5, PeakMemoryBytes: 3 << 20, ElapsedSeconds: 0.75})
	ringRecord(ring, "20260101_000000_00002_aaaaa", "large", 0, now)
	ring.Add(Record{Routed: now, QueryID: "20260101_000000_00003_aaaaa", Cluster: "large", Kind: "routed", Estimated: true,
		Estimate: estimate.Estimate{Estimated: true, CPUSeconds: 2, Source: estimate.SourceHistory,
			PeakMemory: estimate.Quantity{Median: 64 << 20}, Elapsed: estimate.Quantity{Median: 1.5}}})
	h := New(Options{Ring: ring, Proxy: fakeProxy{checked: now}, Estimator: true,
		EstimatorStats: func() estimate.Stats { return estimate.Stats{Model: &estimate.ModelStats{ID: "m-1"}} }})

	t.Run("clusters come in the proxy's order with the ring's routed counts", func(t *testing.T) {
		code, body := serve(h, "GET", "/prestroid/api/clusters?minutes=5", "", "")
		var v struct {
			WindowMinutes int `json:"window_minutes"`
			Clusters      []map[string]any
		}
		if code != 200 || json.Unmarshal(body, &v) != nil || v.WindowMinutes != 5 || len(v.Clusters) != 2 {
			t.Fatalf("%d %s", code, body)
		}
		small, large := v.Clusters[0], v.Clusters[1]
		if small["default"] != true || small["routed"] != 1.0 || small["running"] != 2.0 || small["load"] != 3.0 || small["checked"] == nil {
			t.Errorf("the first cluster: %v", small)
		}
		if large["default"] != false || large["healthy"] != false || large["routed"] != 2.0 || large["checked"] != nil {
			t.Errorf("the unchecked cluster: %v", large)
		}
	})
	t.Run("decisions carry the kind label and the q-error", func(t *testing.T) {
		code, body := serve(h, "GET", "/prestroid/api/decisions?limit=5", "", "")
		var v struct {
			Capacity  int
			Decisions []map[string]any
		}
		if code != 200 || json.Unmarshal(body, &v) != nil || v.Capacity != 10 || len(v.Decisions) != 3 {
			t.Fatalf("%d %s", code, body)
		}
		if d := v.Decisions[2]; d["kind"] != "routed" || d["qerror"] != 4.0 || d["ui_path"] != "/ui/query.html?20260101_000000_00001_aaaaa" ||
			d["actual_peak_memory_bytes"] != float64(3<<20) || d["actual_elapsed_seconds"] != 0.75 {
			t.Errorf("the finished query: %v", d)
		}
		// The other targets when the estimate predicts them, absent otherwise.
		e := v.Decisions[0]["estimate"].(map[string]any)
		if e["peak_memory_bytes"] != float64(64<<20) || e["elapsed_seconds"] != 1.5 {
			t.Errorf("an estimate with memory and elapsed: %v", e)
		}
		if e := v.Decisions[2]["estimate"].(map[string]any); e["peak_memory_bytes"] != nil || e["elapsed_seconds"] != nil {
			t.Errorf("a CPU-only estimate: %v", e)
		}
	})
	t.Run("the estimator view reads the figures and the drift", func(t *testing.T) {
		code, body := serve(h, "GET", "/prestroid/api/estimator", "", "")
		var v struct {
			Model struct{ ID string }
			Drift struct {
				Tables      uint64   `json:"tables"`
				UnseenShare *float64 `json:"unseen_share"`
			}
		}
		if code != 200 || json.Unmarshal(body, &v) != nil || v.Model.ID != "m-1" || v.Drift.Tables != 4 || v.Drift.UnseenShare == nil || *v.Drift.UnseenShare != 0.25 {
			t.Errorf("%d %s", code, body)
		}
	})
	for _, tc := range []struct {
		name, method, uri, ct, body string
		want                        int
	}{
		{"without a store the queue view says admission is off", "GET", "/prestroid/api/queue", "", "", 200},
		{"without a store there is nothing to cancel", "POST", "/prestroid/api/queue/cancel", "application/json", `{"id":"q_1"}`, 404},
		{"an unknown endpoint is 404", "GET", "/prestroid/api/nope", "", "", 404},
		{"the endpoints answer GET only", "POST", "/prestroid/api/clusters", "", "", 405},
		{"the page is served", "GET", "/prestroid/", "", "", 200},
		{"the vendored chart library is served", "GET", "/prestroid/vendor/chart.umd.min.js", "", "", 200},
		{"the package's Go files are not", "GET", "/prestroid/ring.go", "", "", 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, body := serve(h, tc.method, tc.uri, tc.ct, tc.body); got != tc.want {
				t.Errorf("%s %s: %d, want %d: %s", tc.method, tc.uri, got, tc.want, body)
			}
		})
	}
}

func TestUsageEndpoint(t *testing.T) {
	ring := NewRing(10, []string{"small"})
	t.Run("with accounting off it answers 404 and says why", func(t *testing.T) {
		h := New(Options{Ring: ring, Proxy: fakeProxy{}})
		code, body := serve(h, "GET", "/prestroid/api/usage?by=user", "", "")
		if code != 404 || !strings.Contains(string(body), "usage.disabled") {
			t.Errorf("%d %s", code, body)
		}
	})
	t.Run("with accounting on it hands the request to the accounting", func(t *testing.T) {
		h := New(Options{Ring: ring, Proxy: fakeProxy{}, Usage: func(ctx *fasthttp.RequestCtx) {
			ctx.SetBodyString(string(ctx.QueryArgs().Peek("by")))
		}})
		code, body := serve(h, "GET", "/prestroid/api/usage?by=group", "", "")
		if code != 200 || string(body) != "group" {
			t.Errorf("%d %s", code, body)
		}
		if code, _ := serve(h, "POST", "/prestroid/api/usage", "", ""); code != 405 {
			t.Errorf("POST: %d, want 405", code)
		}
	})
}
