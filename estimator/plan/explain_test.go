package plan

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/internal/dialect"
)

// RunStatement is runStatement, for the external tests.
var RunStatement = runStatement

// runStatement runs one statement to completion over the protocol (test
// set-up and clean-up only).
func runStatement(t *testing.T, server, sql string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, server+"/v1/statement", strings.NewReader(sql))
	req.Header.Set("X-Trino-User", "prestroid-test")
	for req != nil {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", sql, err)
			return
		}
		var qr queryResults
		err = json.NewDecoder(resp.Body).Decode(&qr)
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s: %v", sql, err)
			return
		}
		if qr.Error != nil {
			t.Errorf("%s: %s", sql, qr.Error.Message)
			return
		}
		req = nil
		if qr.NextURI != "" {
			req, _ = http.NewRequest(http.MethodGet, qr.NextURI, nil)
			req.Header.Set("X-Trino-User", "prestroid-test")
		}
	}
}

// fakeTrino answers the protocol with a fixed plan in three pages, gzipped,
// recording requests. It checks client behaviour a real Trino cannot show
// (header copies, DELETE on cancel).
type fakeTrino struct {
	mu      sync.Mutex
	headers []http.Header
	deletes int
	block   chan struct{} // when set, the queued GET waits on it
	polled  chan struct{} // when set, closed when the queued GET arrives
	once    sync.Once
}

func (f *fakeTrino) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.headers = append(f.headers, r.Header.Clone())
	f.mu.Unlock()
	base := "http://" + r.Host
	page := func(v any) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		json.NewEncoder(zw).Encode(v)
		zw.Close()
	}
	switch {
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.deletes++
		f.mu.Unlock()
		w.WriteHeader(204)
	case r.Method == http.MethodPost:
		page(map[string]any{"id": "q1", "nextUri": base + "/v1/statement/queued/q1/y/1", "stats": map[string]any{"state": "QUEUED"}})
	case strings.Contains(r.URL.Path, "/queued/"):
		if f.polled != nil {
			f.once.Do(func() { close(f.polled) })
		}
		if f.block != nil {
			select {
			case <-f.block:
			case <-r.Context().Done():
				return
			}
		}
		page(map[string]any{"id": "q1", "nextUri": base + "/v1/statement/executing/q1/y/0",
			"data": [][]string{{`{"0":{"id":"1","name":"Values","descriptor":{},"outputs":[],"details":[],"estimates":[],"children":[]}}`}}})
	default:
		page(map[string]any{"id": "q1", "stats": map[string]any{"state": "FINISHED", "elapsedTimeMillis": 7, "analysisTimeMillis": 3, "planningTimeMillis": 2}})
	}
}

func TestExplainCopiesCallerHeaders(t *testing.T) {
	f := &fakeTrino{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	h := http.Header{}
	h.Set("X-Trino-User", "alice")
	h.Add("X-Trino-Session", "a=1")
	h.Add("X-Trino-Session", "b=2")
	h.Set("X-Trino-Role", "system=ROLE{admin}")
	h.Set("X-Trino-Extra-Credential", "k=v")
	h.Set("X-Trino-Client-Tags", "etl,nightly")
	h.Set("X-Trino-Query-Data-Encoding", "json+zstd")
	// The caller's transaction id is the proxy's "cluster~id" form, and a
	// plan needs no transaction (internal/callerhdr).
	h.Set("X-Trino-Transaction-Id", "c1~20260101_000000_00001_abcde")
	h.Set("Authorization", "Bearer secret")
	h.Set("Cookie", "not-forwarded")
	res, err := (&ExplainClient{}).Explain(context.Background(), srv.URL, "SELECT 1", h)
	if err != nil {
		t.Fatal(err)
	}
	if res.ElapsedMillis != 7 || res.AnalysisMillis != 3 || res.PlanningMillis != 2 || res.QueryID != "q1" {
		t.Errorf("timing %+v", res)
	}
	if _, err := Parse(res.PlanJSON); err != nil {
		t.Fatal(err)
	}
	post := f.headers[0]
	if got := post.Values("X-Trino-Session"); len(got) != 2 || got[0] != "a=1" || got[1] != "b=2" {
		t.Errorf("X-Trino-Session = %v", got)
	}
	for _, k := range []string{"X-Trino-User", "X-Trino-Role", "X-Trino-Extra-Credential", "X-Trino-Client-Tags", "Authorization"} {
		if post.Get(k) != h.Get(k) {
			t.Errorf("%s = %q, want %q", k, post.Get(k), h.Get(k))
		}
	}
	if post.Get("Cookie") != "" || post.Get("X-Trino-Query-Data-Encoding") != "" || post.Get("X-Trino-Transaction-Id") != "" {
		t.Errorf("forwarded a header it should not: %v", post)
	}
	if h.Get("Cookie") == "" {
		t.Error("the caller's header was modified")
	}
}

func TestExplainCancelsWithDelete(t *testing.T) {
	f := &fakeTrino{block: make(chan struct{}), polled: make(chan struct{})}
	srv := httptest.NewServer(f)
	defer srv.Close()
	defer close(f.block)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.polled // the EXPLAIN is waiting on its nextUri: end the context now
		cancel()
	}()
	_, err := (&ExplainClient{}).Explain(ctx, srv.URL, "SELECT 1", trinotest.UserHeader("bob"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.deletes != 1 {
		t.Errorf("%d DELETEs, want 1", f.deletes)
	}
}

func TestExplainSQL(t *testing.T) {
	for in, want := range map[string]string{
		"SELECT 1":             explainPrefix + "SELECT 1",
		"SELECT 1;\n":          explainPrefix + "SELECT 1",
		"SELECT 1\n;\n":        explainPrefix + "SELECT 1",
		"SELECT 1 -- done;":    explainPrefix + "SELECT 1 -- done;",
		"EXECUTE q USING 1, 2": explainPrefix + "EXECUTE q USING 1, 2",
	} {
		if got := ExplainSQL(in); got != want {
			t.Errorf("ExplainSQL(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDecodeQueryResults: the page decoder reads what encoding/json reads,
// on pages built from real plans (escaped as Trino escapes them) and on
// the odd shapes.
func TestDecodeQueryResults(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(trinotest.ExplainDir, "*.json"))
	if len(files) < 100 {
		t.Fatalf("want the captured plans, found %d", len(files))
	}
	for _, f := range append(files[:20], filepath.Join(trinotest.Testdata, "bench", "union-7.json")) {
		plan, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := json.Marshal(map[string]any{
			"id": "20261203_000000_00001_abcde", "nextUri": "http://127.0.0.1:8081/v1/statement/executing/x/y/1",
			"columns": []any{map[string]any{"name": "Query Plan", "type": "varchar"}},
			"data":    [][]string{{string(plan)}},
			"stats":   map[string]any{"state": "FINISHED", "elapsedTimeMillis": 12, "analysisTimeMillis": 3, "planningTimeMillis": 5, "nodes": 1},
		})
		qr, err := decodeQueryResults(page)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if !bytes.Equal(qr.plan, plan) || !qr.hasRow || qr.badRow != "" {
			t.Fatalf("%s: the plan read back differs (%d bytes, want %d)", f, len(qr.plan), len(plan))
		}
		if qr.ID != "20261203_000000_00001_abcde" || !strings.HasSuffix(qr.NextURI, "/1") || qr.Stats.State != "FINISHED" ||
			qr.Stats.ElapsedTimeMillis != 12 || qr.Stats.AnalysisTimeMillis != 3 || qr.Stats.PlanningTimeMillis != 5 {
			t.Fatalf("%s: small fields %+v", f, qr)
		}
	}
	for _, c := range []struct {
		name, page    string
		hasRow        bool
		plan, badRow  string
		err, errorMsg string
	}{
		{name: "a page without data", page: `{"id":"q","nextUri":"http://h/1","stats":{"state":"QUEUED"}}`},
		{name: "null data", page: `{"id":"q","data":null}`},
		{name: "escapes and unicode in the plan", page: `{"data":[["{\"a\" : \"\\u00e9\\n\\\"x\\\" é \ud83d\ude00\"}"]]}`, hasRow: true, plan: "{\"a\" : \"\\u00e9\\n\\\"x\\\" é \U0001F600\"}"},
		{name: "only the first row is the plan", page: `{"data":[["p1"],["p2"]]}`, hasRow: true, plan: "p1"},
		{name: "a row of two values", page: `{"data":[["a","b"]]}`, hasRow: true, badRow: `["a","b"]`},
		{name: "a row that is not a string", page: `{"data":[[1]]}`, hasRow: true, badRow: `[1]`},
		{name: "an error page", page: `{"id":"q","error":{"message":"line 1:8: Table 'x' does not exist","errorCode":46,"errorName":"TABLE_NOT_FOUND","errorType":"USER_ERROR","sqlState":"42S02"}}`, errorMsg: "line 1:8: Table 'x' does not exist"},
		{name: "truncated", page: `{"data":[["abc`, err: "unterminated string"},
		{name: "trailing garbage", page: `{"id":"q"} x`, err: "data after the page"},
		{name: "a bad small field", page: `{"stats":{"elapsedTimeMillis":"soon"}}`, err: "cannot unmarshal"},
	} {
		t.Run(c.name, func(t *testing.T) {
			qr, err := decodeQueryResults([]byte(c.page))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if qr.hasRow != c.hasRow || string(qr.plan) != c.plan || qr.badRow != c.badRow {
				t.Fatalf("row %v plan %q bad %q, want %v %q %q", qr.hasRow, qr.plan, qr.badRow, c.hasRow, c.plan, c.badRow)
			}
			if c.errorMsg != "" && (qr.Error == nil || qr.Error.Message != c.errorMsg || qr.Error.ErrorName != "TABLE_NOT_FOUND") {
				t.Fatalf("error %+v", qr.Error)
			}
		})
	}
}

func BenchmarkDecodeQueryResults(b *testing.B) {
	plan, err := os.ReadFile(filepath.Join(trinotest.Testdata, "bench", "union-7.json"))
	if err != nil {
		b.Fatal(err)
	}
	page, _ := json.Marshal(map[string]any{"id": "q", "data": [][]string{{string(plan)}}, "stats": map[string]any{"state": "FINISHED"}})
	b.Run("page-decoder", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			if qr, err := decodeQueryResults(page); err != nil || len(qr.plan) != len(plan) {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) { // the decoding it replaced, side by side
		b.SetBytes(int64(len(page)))
		b.ReportAllocs()
		for b.Loop() {
			var qr struct{ Data []json.RawMessage }
			var row []string
			if err := json.Unmarshal(page, &qr); err != nil || json.Unmarshal(qr.Data[0], &row) != nil || len(row[0]) != len(plan) {
				b.Fatal(err)
			}
		}
	})
}

func TestExplainOnPrestoRenamesCallerHeaders(t *testing.T) {
	f := &fakeTrino{}
	srv := httptest.NewServer(f)
	defer srv.Close()
	h := http.Header{} // the canonical session, as the proxy hands it on
	h.Set("X-Trino-User", "alice")
	h.Add("X-Trino-Session", "a=1")
	h.Set("X-Trino-Catalog", "tpch")
	h.Set("X-Trino-Transaction-Id", "c1~20260101_000000_00001_abcde")
	h.Set("X-Trino-Query-Data-Encoding", "json")
	h.Set("Authorization", "Bearer secret")
	if _, err := (&ExplainClient{}).ExplainOn(context.Background(), srv.URL, dialect.Presto, "SELECT 1", h); err != nil {
		t.Fatal(err)
	}
	for i, sent := range f.headers {
		for k, want := range map[string]string{"X-Presto-User": "alice", "X-Presto-Session": "a=1", "X-Presto-Catalog": "tpch", "Authorization": "Bearer secret"} {
			if sent.Get(k) != want {
				t.Errorf("request %d: %s = %q, want %q", i, k, sent.Get(k), want)
			}
		}
		for k := range sent {
			if dialect.OfHeader(k) == dialect.Trino || k == "X-Presto-Transaction-Id" || k == "X-Presto-Query-Data-Encoding" {
				t.Errorf("request %d sent %s", i, k)
			}
		}
	}
	if h.Get("X-Trino-User") != "alice" || h.Get("X-Presto-User") != "" {
		t.Error("the caller's header was modified")
	}
}

func TestExplainToleratesMissingStats(t *testing.T) {
	page := []byte(`{"id":"q","stats":{"state":"FINISHED","elapsedTimeMillis":9,"cpuTimeMillis":0},"data":[["{}"]]}`)
	qr, err := decodeQueryResults(page)
	if err != nil || qr.Stats.ElapsedTimeMillis != 9 || qr.Stats.AnalysisTimeMillis != 0 || qr.Stats.PlanningTimeMillis != 0 {
		t.Fatalf("%+v, %v", qr, err)
	}
}
