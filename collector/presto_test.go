package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
)

// fakePresto answers like a PrestoDB 0.296 coordinator (the page, query
// info and status shapes copied from a real one) and refuses, as PrestoDB
// does, any request that carries a Trino header. Statements: "SELECT ok"
// finishes with two rows over two pages, "SELECT bad" fails, "SELECT slow"
// never ends.
type fakePresto struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	sent    []http.Header // headers of every statement POST
	deleted []string      // paths of DELETE requests
}

func newFakePresto(t *testing.T) *fakePresto {
	f := &fakePresto{t: t}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

const prestoFinalStats = `{"state":"FINISHED","waitingForPrerequisites":false,"queued":false,"scheduled":true,` +
	`"nodes":1,"totalSplits":52,"queuedSplits":0,"runningSplits":0,"completedSplits":52,"cpuTimeMillis":200,` +
	`"wallTimeMillis":632,"waitingForPrerequisitesTimeMillis":3,"queuedTimeMillis":1,"elapsedTimeMillis":329,` +
	`"processedRows":60175,"processedBytes":726,"peakMemoryBytes":3317658,"peakTotalMemoryBytes":4194304,` +
	`"peakTaskTotalMemoryBytes":4194304,"spilledBytes":0}`

func (f *fakePresto) serve(w http.ResponseWriter, r *http.Request) {
	for k := range r.Header {
		if dialect.OfHeader(k) == dialect.Trino {
			http.Error(w, "Trino header "+k, http.StatusBadRequest)
			return
		}
	}
	base := f.srv.URL
	switch {
	case r.URL.Path == "/v1/info":
		fmt.Fprint(w, `{"nodeVersion":{"version":"0.296-8661b73"},"environment":"test","coordinator":true,"starting":false,"uptime":"5.00m"}`)
	case r.URL.Path == "/v1/status":
		fmt.Fprint(w, `{"nodeId":"presto-test","nodeVersion":{"version":"0.296-8661b73"},"uptime":"5.00m"}`)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/statement":
		f.mu.Lock()
		f.sent = append(f.sent, r.Header.Clone())
		f.mu.Unlock()
		b, _ := io.ReadAll(r.Body)
		id := map[string]string{"SELECT ok": "q_ok", "SELECT bad": "q_bad", "SELECT slow": "q_slow"}[string(b)]
		fmt.Fprintf(w, `{"id":%q,"nextUri":"%s/v1/statement/queued/%s/1","stats":{"state":"WAITING_FOR_PREREQUISITES","cpuTimeMillis":0}}`, id, base, id)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/statement/"):
		parts := strings.Split(r.URL.Path, "/") // "", v1, statement, queued|executing, id, token
		id, token := parts[4], parts[5]
		switch {
		case id == "q_ok" && token == "1":
			fmt.Fprintf(w, `{"id":"q_ok","nextUri":"%s/v1/statement/executing/q_ok/2","columns":[{"name":"x","type":"varchar(7)","typeSignature":{"rawType":"varchar","arguments":[{"kind":"LONG_LITERAL","value":7}]}}],"data":[["a"]],"stats":{"state":"RUNNING","cpuTimeMillis":20}}`, base)
		case id == "q_ok":
			fmt.Fprintf(w, `{"id":"q_ok","data":[["b"]],"stats":%s}`, prestoFinalStats)
		case id == "q_bad":
			fmt.Fprint(w, `{"id":"q_bad","stats":{"state":"FAILED","cpuTimeMillis":0},"error":{"message":"Division by zero","errorCode":8,"errorName":"DIVISION_BY_ZERO","errorType":"USER_ERROR"}}`)
		default: // q_slow: running forever
			time.Sleep(20 * time.Millisecond)
			fmt.Fprintf(w, `{"id":"q_slow","nextUri":"%s/v1/statement/executing/q_slow/%s0","stats":{"state":"RUNNING","cpuTimeMillis":5}}`, base, token)
		}
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/query/"):
		if r.Header.Get("X-Presto-User") == "" {
			http.Error(w, "no user", http.StatusUnauthorized)
			return
		}
		switch strings.TrimPrefix(r.URL.Path, "/v1/query/") {
		case "q_ok":
			fmt.Fprint(w, `{"queryId":"q_ok","state":"FINISHED","queryStats":{"elapsedTime":"328.75ms","queuedTime":"74.24us",`+
				`"analysisTime":"27.80ms","totalPlanningTime":"28.86ms","totalCpuTime":"200.00ms","totalScheduledTime":"632.00ms",`+
				`"peakUserMemoryReservation":"3.16MB","peakTotalMemoryReservation":"4MB","rawInputDataSize":"1.50kB","rawInputPositions":60175,`+
				`"totalDrivers":52,"operatorSummaries":[{"operatorType":"ScanFilterAndProjectOperator","addInputCpu":"0.00ns","getOutputCpu":"150.00ms","finishCpu":"0.00ns"}]}}`)
		case "q_bad":
			fmt.Fprint(w, `{"queryId":"q_bad","state":"FAILED","queryStats":{"totalCpuTime":"3.00ms","elapsedTime":"10.00ms"},`+
				`"errorCode":{"code":8,"name":"DIVISION_BY_ZERO","type":"USER_ERROR","retriable":false},"failureInfo":{"message":"Division by zero"}}`)
		default:
			fmt.Fprint(w, `{"queryId":"q_slow","state":"FAILED","queryStats":{"totalCpuTime":"1.20s","elapsedTime":"1.30s"},"errorCode":{"code":3,"name":"USER_CANCELED","type":"USER_ERROR"}}`)
		}
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.deleted = append(f.deleted, r.URL.Path)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		http.NotFound(w, r)
	}
}

func prestoRun(t *testing.T, f *fakePresto, r *Runner, items []Item) (Summary, map[string]*Record) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "presto.jsonl.gz")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	r.Server, r.Writer = f.srv.URL, w
	sum, err := r.Run(context.Background(), items)
	w.Close()
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	recs, err := ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*Record{}
	for _, rec := range recs {
		byKey[rec.Key] = rec
	}
	return sum, byKey
}

func TestAPrestoRunSpeaksPrestoAndRecordsItsStatistics(t *testing.T) {
	f := newFakePresto(t)
	var planHeaders http.Header
	r := &Runner{
		// No DB and no Engine: told by /v1/info.
		Plan: func(ctx context.Context, server string, it *Item, h http.Header) (*Plan, error) {
			if it.Key == "ok" {
				planHeaders = h
			}
			return &Plan{JSON: json.RawMessage(`{"0":{"plan":{"id":"9","name":"Output","children":[]}}}`)}, nil
		},
	}
	items := []Item{
		{Key: "ok", Catalog: "tpch", Schema: "tiny", SQL: "SELECT ok", Session: map[string]string{"join_distribution_type": "BROADCAST"}},
		{Key: "bad", Catalog: "tpch", Schema: "tiny", SQL: "SELECT bad"},
	}
	sum, recs := prestoRun(t, f, r, items)
	if sum.ByStatus[StatusFinished] != 1 || sum.ByStatus[StatusFailed] != 1 {
		t.Fatalf("outcomes %v, want one FINISHED and one FAILED", sum.ByStatus)
	}
	if planHeaders.Get("X-Presto-User") != "prestroid-collect" || planHeaders.Get("X-Presto-Session") != "join_distribution_type=BROADCAST" {
		t.Errorf("the plan function got %v, want the session in PrestoDB's headers", planHeaders)
	}
	h := f.sent[0]
	if h.Get("X-Presto-User") != "prestroid-collect" || h.Get("X-Presto-Catalog") != "tpch" || h.Get("X-Presto-Schema") != "tiny" ||
		h.Get("X-Presto-Source") != "prestroid-collect" || h.Get("X-Presto-Session") != "join_distribution_type=BROADCAST" {
		t.Errorf("statement headers %v", h)
	}

	ok := recs["ok"]
	if ok.Engine != "presto" || ok.EngineVersion != "0.296-8661b73" || ok.TrinoVersion != "" || ok.EngineName() != "presto" || ok.ServerVersion() != "0.296-8661b73" {
		t.Errorf("engine %q %q, trino_version %q", ok.Engine, ok.EngineVersion, ok.TrinoVersion)
	}
	if ok.Status != StatusFinished || ok.QueryID != "q_ok" || ok.ResultRows != 2 || string(ok.Plan.JSON) == "" {
		t.Fatalf("record %+v", ok)
	}
	want := Stats{State: "FINISHED", CPUMillis: 200, WallMillis: 632, ElapsedMillis: 329, QueuedMillis: 1,
		AnalysisMillis: 28, PlanningMillis: 29, PlanningCPUMillis: -1, ClientMillis: ok.Stats.ClientMillis,
		PeakMemoryBytes: 3317658, PeakTotalMemoryBytes: 4194304, ProcessedRows: 60175, ProcessedBytes: 726,
		PhysicalInputBytes: 1536, Splits: 52, Nodes: 1}
	if got := *ok.Stats; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stats\n got %+v\nwant %+v", got, want)
	}
	if ok.Warmth == nil || ok.Warmth.Node != "presto-test" {
		t.Errorf("warmth %+v", ok.Warmth)
	}

	bad := recs["bad"]
	if bad.Status != StatusFailed || bad.QueryID != "q_bad" || bad.Error == nil ||
		bad.Error.Name != "DIVISION_BY_ZERO" || bad.Error.Type != "USER_ERROR" || bad.Error.Code != 8 || bad.Error.Message != "Division by zero" {
		t.Errorf("failed record %+v, error %+v", bad, bad.Error)
	}
	if bad.Stats.CPUMillis != 3 {
		t.Errorf("failed query's CPU %d ms, want /v1/query's 3", bad.Stats.CPUMillis)
	}
}

func TestOperatorCPUOnlyWhenAsked(t *testing.T) {
	f := newFakePresto(t)
	items := []Item{{Key: "ok", Catalog: "tpch", Schema: "tiny", SQL: "SELECT ok"}}
	_, recs := prestoRun(t, f, &Runner{}, items)
	if recs["ok"].Stats.OperatorCPUMillis != nil {
		t.Errorf("operator CPU recorded without OperatorStats: %v", recs["ok"].Stats.OperatorCPUMillis)
	}
	_, recs = prestoRun(t, f, &Runner{OperatorStats: true}, items)
	if got := recs["ok"].Stats.OperatorCPUMillis["ScanFilterAndProjectOperator"]; got != 150 {
		t.Errorf("operator CPU %v, want 150 ms of ScanFilterAndProjectOperator", recs["ok"].Stats.OperatorCPUMillis)
	}
}

func TestAPrestoTimeoutCancelsTheQuery(t *testing.T) {
	f := newFakePresto(t)
	items := []Item{{Key: "slow", Catalog: "tpch", Schema: "tiny", SQL: "SELECT slow"}}
	sum, recs := prestoRun(t, f, &Runner{Timeout: 300 * time.Millisecond}, items)
	if sum.ByStatus[StatusTimeout] != 1 {
		t.Fatalf("outcomes %v, want one TIMEOUT", sum.ByStatus)
	}
	rec := recs["slow"]
	if rec.QueryID != "q_slow" || rec.Stats.CPUMillis != 1200 || rec.Error.Name != "TIMEOUT" {
		t.Errorf("timeout record %+v (stats %+v)", rec, rec.Stats)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.Contains(strings.Join(f.deleted, " "), "/v1/query/q_slow") {
		t.Errorf("DELETEs %v, want the query cancelled", f.deleted)
	}
}

func TestAnEngineTheVersionContradictsFailsTheRun(t *testing.T) {
	f := newFakePresto(t)
	w, err := OpenWriter(filepath.Join(t.TempDir(), "r.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := &Runner{Server: f.srv.URL, Engine: dialect.Trino, Writer: w}
	if _, err := r.Run(context.Background(), []Item{{Key: "ok", SQL: "SELECT ok"}}); err == nil || !strings.Contains(err.Error(), "0.296") {
		t.Fatalf("run with --engine trino against PrestoDB: %v", err)
	}
}

func TestResolveEngine(t *testing.T) {
	cases := []struct {
		want    dialect.Engine
		version string
		got     dialect.Engine
		fails   bool
	}{
		{dialect.Unknown, "476", dialect.Trino, false},
		{dialect.Unknown, "0.296-8661b73", dialect.Presto, false},
		{dialect.Unknown, "dev", dialect.Trino, false},
		{dialect.Presto, "dev", dialect.Presto, false},
		{dialect.Presto, "0.296", dialect.Presto, false},
		{dialect.Presto, "476", dialect.Presto, true},
		{dialect.Trino, "0.296", dialect.Trino, true},
	}
	for _, c := range cases {
		got, err := ResolveEngine(c.want, c.version)
		if got != c.got || (err != nil) != c.fails {
			t.Errorf("ResolveEngine(%v, %q) = %v, %v", c.want, c.version, got, err)
		}
	}
}

func TestParseDataSizeBytes(t *testing.T) {
	for s, want := range map[string]int64{"0B": 0, "726B": 726, "1.43kB": 1464, "1.50MB": 1572864, "2GB": 2 << 30, "": -1, "12": -1, "3xB": -1} {
		if got := parseDataSizeBytes(s); got != want {
			t.Errorf("parseDataSizeBytes(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestTrinoRecordsKeepTheirShape(t *testing.T) {
	old := []byte(`{"v":1,"source":"collector","key":"k","status":"FINISHED","trino_version":"476","sql":"SELECT 1","submitted_at":"2026-12-02T12:49:52Z","finished_at":"2026-12-02T12:49:52Z"}`)
	var r Record
	if err := json.Unmarshal(old, &r); err != nil {
		t.Fatal(err)
	}
	if r.EngineName() != "trino" || r.ServerVersion() != "476" {
		t.Errorf("a record without engine: EngineName %q, ServerVersion %q", r.EngineName(), r.ServerVersion())
	}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != string(old) {
		t.Errorf("a Trino record re-encodes as\n%s\nnot\n%s", b, old)
	}
}
