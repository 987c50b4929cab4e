package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/valyala/fasthttp"
)

// query is what the estimator was asked.
type query struct {
	SQL    string
	Header http.Header
}

var errBusy = errors.New("estimator busy")

// recordingEstimator remembers the queries it was asked to estimate and
// answers like the proxy's estimator would: "cpu=N" in the text is the
// estimate ("mem=BYTES" its peak memory), "SET" is not estimated, "fail", "stall" (the time budget ran
// out) and "busy" (every planner at its EXPLAIN bound) fail, a caller
// without X-Trino-User cannot plan, and a syntax error fails like Trino's
// EXPLAIN.
type recordingEstimator struct {
	mu   sync.Mutex
	seen []query
}

func (r *recordingEstimator) estimate(sql string, h http.Header) (estimate.Estimate, error) {
	r.mu.Lock()
	r.seen = append(r.seen, query{sql, h})
	r.mu.Unlock()
	switch {
	case strings.HasPrefix(sql, "SELEC "):
		return estimate.Estimate{}, errors.New("explain: line 1:1: mismatched input 'SELEC'")
	case strings.Contains(sql, "fail"):
		return estimate.Estimate{}, errors.New("explain failed")
	case strings.Contains(sql, "stall"):
		return estimate.Estimate{}, fmt.Errorf("explain: %w", context.DeadlineExceeded)
	case strings.HasPrefix(sql, "SET"):
		return estimate.Estimate{Reason: "SET SESSION"}, nil
	case strings.Contains(sql, "busy"):
		return estimate.Estimate{}, fmt.Errorf("every planner busy: %w", errBusy)
	}
	var cpu float64
	if i := strings.Index(sql, "cpu="); i >= 0 {
		cpu, _ = strconv.ParseFloat(strings.Fields(sql[i+4:])[0], 64)
	}
	if h.Get("X-Trino-User") == "" {
		return estimate.Estimate{}, errors.New("no caller identity")
	}
	e := estimate.Estimate{Estimated: true, CPUSeconds: cpu, Model: "test-model"}
	if i := strings.Index(sql, "mem="); i >= 0 {
		m, _ := strconv.ParseFloat(strings.Fields(sql[i+4:])[0], 64)
		e.PeakMemory = estimate.Quantity{Median: m}
	}
	return e, nil
}

func (r *recordingEstimator) queries() []query {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]query(nil), r.seen...)
}

// serve serves h on a local listener and returns its base URL.
func serve(t *testing.T, h *Handler) string {
	t.Helper()
	if h.Log == nil {
		h.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &fasthttp.Server{Handler: h.Serve}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown() })
	return "http://" + ln.Addr().String()
}

// gatewayBody is shaped like the body gateway-ha 18 posts (see
// testdata/trino-gateway-18) for a new statement; edit changes it.
func gatewayBody(sql string, edit func(body, props map[string]any)) string {
	props := map[string]any{
		"body": sql, "queryType": "Query", "resourceGroupQueryType": "SELECT",
		"tables": []string{"tpch.sf1.lineitem"}, "defaultCatalog": "tpch", "defaultSchema": "sf1",
		"catalogs": []string{"tpch"}, "schemas": []string{"sf1"}, "catalogSchemas": []string{"tpch.sf1"},
		"isNewQuerySubmission": true, "isQueryParsingSuccessful": true,
	}
	body := map[string]any{
		"trinoQueryProperties": props,
		"trinoRequestUser":     map[string]any{"user": "alice", "userInfo": nil},
		"contentType":          "application/json", "method": "POST", "requestURI": "/v1/statement",
		"remoteAddr": "10.0.0.7", "remoteHost": "10.0.0.7", "parameters": map[string]any{},
	}
	if edit != nil {
		edit(body, props)
	}
	b, _ := json.Marshal(body)
	return string(b)
}

// routingCall posts body to url/v1/routing with headers h and returns the
// status, the decoded answer and the X-Prestroid-Decision header.
func routingCall(t *testing.T, url, body string, h map[string]string) (int, Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/routing", strings.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	return doRouting(t, req)
}

func doRouting(t *testing.T, req *http.Request) (int, Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r Response
	if resp.StatusCode == 200 || resp.StatusCode == 400 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		// Trino Gateway reads only application/json answers.
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("Content-Type %q", ct)
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if r.Errors == nil || r.ExternalHeaders == nil {
			t.Errorf("errors and externalHeaders must be present: %s", b)
		}
	}
	return resp.StatusCode, r, resp.Header.Get("X-Prestroid-Decision")
}

func str(s *string) string {
	if s == nil {
		return "<null>"
	}
	return *s
}

// TestRoutingEndpointLikeTrinoGateway: what gateway-ha 18 sends, and what
// it does with the answer (see gateway.go): a failure never puts
// anything in errors (with propagateErrors the gateway would refuse the
// client's query with HTTP 400), only a new statement is estimated.
func TestRoutingEndpointLikeTrinoGateway(t *testing.T) {
	est := &recordingEstimator{}
	p := serve(t, &Handler{Estimate: est.estimate, ErrBusy: errBusy,
		Groups: []RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60}, {Name: "etl"}}})
	// The gateway forwards the client's headers beside its own JSON body.
	h := map[string]string{"Content-Type": "application/json; charset=utf-8", "X-Trino-User": "alice",
		"X-Trino-Source": "trino-cli", "User-Agent": "StatementClientV1/476"}
	cases := []struct {
		name, body string
		noUser     bool
		status     int
		group      string
		header     string
		decision   string
		estimates  int // calls to the estimator
	}{
		{"a light query goes to the interactive group", gatewayBody("SELECT 1 -- cpu=0.5", nil), false, 200,
			"interactive", "CPU_TIME=500ms", "routed: group interactive", 1},
		{"a heavy query goes to the etl group", gatewayBody("SELECT 2 -- cpu=900", nil), false, 200,
			"etl", "CPU_TIME=15m", "routed: group etl", 1},
		{"a statement that is not a query gets the gateway's default", gatewayBody("SET SESSION x = 1", nil), false, 200,
			"<null>", "", "not-estimated: SET SESSION", 1},
		{"a failed estimate fails open with errors empty", gatewayBody("SELECT fail", nil), false, 200,
			"<null>", "", "fail-open: estimate failed", 1},
		{"an estimate over budget fails open", gatewayBody("SELECT stall", nil), false, 200,
			"<null>", "", "fail-open: estimate over budget", 1},
		{"busy planners fail open at once", gatewayBody("SELECT busy", nil), false, 200,
			"<null>", "", "fail-open: planners busy", 1},
		{"a caller the estimate cannot run as fails open", gatewayBody("SELECT 1 -- cpu=1", nil), true, 200,
			"<null>", "", "fail-open: estimate failed", 1},
		{"a GET the gateway asks about (/v1/info) is not estimated",
			gatewayBody("", func(b, p map[string]any) {
				b["method"], b["requestURI"], p["isNewQuerySubmission"] = "GET", "/v1/info", false
			}),
			false, 200, "<null>", "", "not-estimated: not a new statement (not a POST)", 0},
		{"a POST that is not a new submission is not estimated",
			gatewayBody("SELECT 1", func(_, p map[string]any) { p["isNewQuerySubmission"] = false }),
			false, 200, "<null>", "", "not-estimated: not a new statement", 0},
		{"without the gateway's analysis there is no query text",
			`{"trinoQueryProperties": null, "method": "POST", "requestURI": "/v1/statement"}`,
			false, 200, "<null>", "", "not-estimated: no trinoQueryProperties (the gateway's requestAnalyzerConfig.analyzeRequest is off)", 0},
		{"an empty body (a client Content-Type without charset) is not estimated", gatewayBody("", nil),
			false, 200, "<null>", "", "not-estimated: no query text", 0},
		{"a form posted to another path never becomes an EXPLAIN",
			gatewayBody("user=alice&password=secret", func(b, p map[string]any) {
				b["requestURI"], p["isQueryParsingSuccessful"], p["queryType"] = "/ui/login", false, ""
			}), false, 200, "<null>", "", "not-estimated: not /v1/statement and not SQL", 0},
		{"SQL posted to another statement path is estimated",
			gatewayBody("SELECT 3 -- cpu=2", func(b, _ map[string]any) { b["requestURI"] = "/v2/statement" }),
			false, 200, "interactive", "CPU_TIME=2s", "routed: group interactive", 1},
		{"a malformed body is a 400 the gateway logs", `{`, false, 400, "<null>", "", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			hh := map[string]string{}
			for k, v := range h {
				if k != "X-Trino-User" || !c.noUser {
					hh[k] = v
				}
			}
			before := len(est.queries())
			st, r, why := routingCall(t, p, c.body, hh)
			if st != c.status {
				t.Fatalf("status %d, want %d", st, c.status)
			}
			if str(r.RoutingGroup) != c.group || r.ExternalHeaders["X-Trino-Resource-Estimate"] != c.header {
				t.Errorf("group %s headers %v; want group %s header %q", str(r.RoutingGroup), r.ExternalHeaders, c.group, c.header)
			}
			if st == 200 && len(r.Errors) != 0 {
				t.Errorf("errors %q: with propagateErrors the gateway would refuse the query", r.Errors)
			}
			if st == 400 && len(r.Errors) == 0 {
				t.Error("a refused body says why in errors")
			}
			if !strings.HasPrefix(why, c.decision) {
				t.Errorf("X-Prestroid-Decision %q, want %q…", why, c.decision)
			}
			if n := len(est.queries()) - before; n != c.estimates {
				t.Errorf("%d estimates, want %d", n, c.estimates)
			}
		})
	}
}

// TestRoutingHonoursEstimateOptions: keep_client_estimate and class_tag
// act on the gateway's externalHeaders as on the proxy's own requests.
func TestRoutingHonoursEstimateOptions(t *testing.T) {
	est := &recordingEstimator{}
	p := serve(t, &Handler{Estimate: est.estimate, KeepClientEstimate: true, ClassTag: "cost:",
		Groups: []RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60, Class: "small"}, {Name: "etl", Class: "large"}}})
	t.Run("a client's own estimate is kept and the class tag joins its tags", func(t *testing.T) {
		_, r, _ := routingCall(t, p, gatewayBody("SELECT 1 -- cpu=900", nil), map[string]string{"X-Trino-User": "alice",
			"X-Trino-Resource-Estimate": "CPU_TIME=1s", "X-Trino-Client-Tags": "etl,nightly"})
		if _, set := r.ExternalHeaders["X-Trino-Resource-Estimate"]; set || str(r.RoutingGroup) != "etl" ||
			r.ExternalHeaders["X-Trino-Client-Tags"] != "etl,nightly,cost:large" {
			t.Errorf("group %s, headers %v", str(r.RoutingGroup), r.ExternalHeaders)
		}
	})
	t.Run("without tags of its own the client gets the class tag alone", func(t *testing.T) {
		_, r, _ := routingCall(t, p, gatewayBody("SELECT 1 -- cpu=2", nil), map[string]string{"X-Trino-User": "alice"})
		if r.ExternalHeaders["X-Trino-Resource-Estimate"] != "CPU_TIME=2s" || r.ExternalHeaders["X-Trino-Client-Tags"] != "cost:small" {
			t.Errorf("headers %v", r.ExternalHeaders)
		}
	})
}

// replay reads a request gateway-ha 18 sent (captured off the wire, see
// testdata/trino-gateway-18/README.md) and aims it at base, keeping every
// header, the client's Host included.
func replay(t *testing.T, name, base string) *http.Request {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "trino-gateway-18", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in, err := http.ReadRequest(bufio.NewReader(f))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(in.Body)
	req, _ := http.NewRequest(in.Method, base+in.URL.Path, strings.NewReader(string(body)))
	req.Header = in.Header
	req.Host = in.Host
	return req
}

// TestRoutingReplaysTrinoGateway18 replays requests a real gateway-ha 18
// sent for the Trino CLI and curl.
func TestRoutingReplaysTrinoGateway18(t *testing.T) {
	est := &recordingEstimator{}
	groups := []RoutingGroup{{Name: "small", MaxCPUSeconds: 60}, {Name: "large"}}
	admin := serve(t, &Handler{Estimate: est.estimate, Groups: groups})
	last := func() query { q := est.queries(); return q[len(q)-1] }

	t.Run("a CLI query is estimated as its user with its catalog and schema", func(t *testing.T) {
		st, r, why := doRouting(t, replay(t, "cli-select.http", admin))
		if st != 200 || str(r.RoutingGroup) != "small" || !strings.HasPrefix(r.ExternalHeaders["X-Trino-Resource-Estimate"], "CPU_TIME=") ||
			why != "routed: group small" {
			t.Fatalf("%d %s %v %q", st, str(r.RoutingGroup), r.ExternalHeaders, why)
		}
		q := last()
		if q.SQL != "SELECT r.name, count(*) FROM nation n JOIN region r ON n.regionkey = r.regionkey GROUP BY r.name" {
			t.Errorf("estimated %q", q.SQL)
		}
		for k, want := range map[string]string{"X-Trino-User": "alice", "X-Trino-Catalog": "tpch", "X-Trino-Schema": "tiny",
			"X-Trino-Source": "trino-cli", "X-Trino-Client-Tags": "dash"} {
			if got := q.Header.Get(k); got != want {
				t.Errorf("EXPLAIN header %s = %q, want %q", k, got, want)
			}
		}
	})
	t.Run("the gateway's GET /v1/info is answered without an estimate", func(t *testing.T) {
		n := len(est.queries())
		st, r, why := doRouting(t, replay(t, "get-info.http", admin))
		if st != 200 || r.RoutingGroup != nil || len(r.Errors) != 0 || len(est.queries()) != n || !strings.HasPrefix(why, "not-estimated: not a new statement") {
			t.Errorf("%d %+v %q, %d estimates", st, r, why, len(est.queries())-n)
		}
	})
	t.Run("a syntax error fails open with no errors, so Trino reports it", func(t *testing.T) {
		st, r, why := doRouting(t, replay(t, "syntax-error.http", admin))
		if st != 200 || r.RoutingGroup != nil || len(r.Errors) != 0 || why != "fail-open: estimate failed" || last().SQL != "SELEC 1" {
			t.Errorf("%d %+v %q", st, r, why)
		}
	})
	t.Run("EXECUTE arrives as the prepared statement's text", func(t *testing.T) {
		if st, _, _ := doRouting(t, replay(t, "execute.http", admin)); st != 200 || last().SQL != "SELECT ? + 1" {
			t.Errorf("%d, estimated %q", st, last().SQL)
		}
	})
	t.Run("a client Content-Type without charset leaves no text to estimate", func(t *testing.T) {
		n := len(est.queries())
		st, r, why := doRouting(t, replay(t, "no-charset.http", admin))
		if st != 200 || r.RoutingGroup != nil || len(est.queries()) != n || !strings.HasPrefix(why, "not-estimated: no query text") {
			t.Errorf("%d %+v %q", st, r, why)
		}
	})
}

// TestRoutingWithoutEstimator: with no estimator every answer is the
// gateway's default group, without asking anything.
func TestRoutingWithoutEstimator(t *testing.T) {
	p := serve(t, &Handler{Groups: []RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60}, {Name: "etl"}}})
	st, r, why := routingCall(t, p, gatewayBody("SELECT 1 -- cpu=1", nil), map[string]string{"X-Trino-User": "alice"})
	if st != 200 || r.RoutingGroup != nil || len(r.ExternalHeaders) != 0 || why != "no-estimator" {
		t.Errorf("%d %+v %q", st, r, why)
	}
}

// TestRoutingGroupsOnMemory: the group is chosen on memory too where the
// groups bound it and the estimate predicts it, and the header carries
// PEAK_MEMORY.
func TestRoutingGroupsOnMemory(t *testing.T) {
	est := &recordingEstimator{}
	p := serve(t, &Handler{Estimate: est.estimate,
		Groups: []RoutingGroup{{Name: "interactive", MaxCPUSeconds: 60, MaxPeakMemory: 1 << 30}, {Name: "etl", MaxPeakMemory: 8 << 30}}})
	h := map[string]string{"Content-Type": "application/json; charset=utf-8", "X-Trino-User": "alice"}
	for _, c := range []struct{ name, sql, group, header, decision string }{
		{"little memory stays interactive", "SELECT 1 -- cpu=1 mem=1048576", "interactive", "CPU_TIME=1s, PEAK_MEMORY=1024kB", "routed: group interactive"},
		{"more memory than interactive holds goes to etl", "SELECT 2 -- cpu=1 mem=4294967296", "etl", "CPU_TIME=1s, PEAK_MEMORY=4096MB", "routed: group etl"},
		{"more than any group holds goes to etl, flagged", "SELECT 3 -- cpu=1 mem=107374182400", "etl", "CPU_TIME=1s, PEAK_MEMORY=102400MB",
			"routed: group etl; over every class's peak_memory"},
		{"no memory predicted: CPU alone", "SELECT 4 -- cpu=1", "interactive", "CPU_TIME=1s", "routed: group interactive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			st, r, why := routingCall(t, p, gatewayBody(c.sql, nil), h)
			if st != 200 || str(r.RoutingGroup) != c.group || r.ExternalHeaders["X-Trino-Resource-Estimate"] != c.header || why != c.decision {
				t.Errorf("%d group %s headers %v decision %q; want group %s header %q decision %q",
					st, str(r.RoutingGroup), r.ExternalHeaders, why, c.group, c.header, c.decision)
			}
		})
	}
}
