package protocol

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
)

func testMapper(t testing.TB) *URIMapper {
	s, err := NewSigner([]byte(strings.Repeat("s", 32)))
	if err != nil {
		t.Fatal(err)
	}
	return &URIMapper{Signer: s, Cluster: "small", UpstreamBase: "http://trino:8081", PublicBase: "http://proxy:8080"}
}

func rewriteAll(t testing.TB, m *URIMapper, in []byte, oneByte bool) ([]byte, *PageInfo) {
	info := &PageInfo{}
	var src io.Reader = bytes.NewReader(in)
	if oneByte {
		src = iotest.OneByteReader(src)
	}
	out, err := io.ReadAll(NewJSONRewriter(src, nil, m, info))
	if err != nil {
		t.Fatal(err)
	}
	return out, info
}

const samplePage = `{
  "id": "20261201_101500_00042_x7k2p",
  "infoUri": "http://trino:8081/ui/query.html?20261201_101500_00042_x7k2p",
  "partialCancelUri": "http://trino:8081/v1/statement/executing/partialCancel/20261201_101500_00042_x7k2p/1/y0a1b/3",
  "nextUri": "http://trino:8081/v1/statement/executing/20261201_101500_00042_x7k2p/y9f3e/3",
  "columns": [{"name": "nextUri", "type": "varchar", "typeSignature": {"rawType": "varchar", "arguments": []}}],
  "data": [["http://trino:8081/v1/statement/executing/x/y/1", {"nextUri": "http://trino:8081/v1/z"}], ["a\"b\\c", null, -1.5e3, true]],
  "stats": {"state": "RUNNING", "queued": false, "cpuTimeMillis": 180, "wallTimeMillis": 260, "processedRows": 15000, "peakMemoryBytes": 524288,
            "rootStage": {"stageId": "0", "state": "RUNNING", "cpuTimeMillis": 3}},
  "warnings": []
}`

func TestRewriterRewritesOnlyProtocolURIs(t *testing.T) {
	m := testMapper(t)
	out, info := rewriteAll(t, m, []byte(samplePage), false)
	var got, in map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	_ = json.Unmarshal([]byte(samplePage), &in)

	for _, k := range []string{"nextUri", "partialCancelUri", "infoUri"} {
		v := got[k].(string)
		if !strings.HasPrefix(v, "http://proxy:8080/r/small.") {
			t.Errorf("%s not routed through the proxy: %s", k, v)
		}
		tok, target, ok := SplitRouted(strings.TrimPrefix(v, "http://proxy:8080"))
		if !ok {
			t.Fatalf("%s: not a routed path", k)
		}
		if c, err := m.Signer.Verify(tok, target); err != nil || c != "small" {
			t.Errorf("%s: token does not verify: %v", k, err)
		}
		if want := strings.TrimPrefix(in[k].(string), "http://trino:8081"); target != want {
			t.Errorf("%s: target %q, want %q", k, target, want)
		}
	}
	for _, k := range []string{"data", "columns", "stats", "warnings", "id"} {
		if !reflect.DeepEqual(got[k], in[k]) {
			t.Errorf("%s changed:\n got %v\nwant %v", k, got[k], in[k])
		}
	}
	if info.ID != "20261201_101500_00042_x7k2p" || !info.HasNextURI || info.State != "RUNNING" ||
		info.Stats.CPUTimeMillis != 180 || info.Stats.ProcessedRows != 15000 || info.Stats.PeakMemoryBytes != 524288 {
		t.Errorf("page info = %+v", info)
	}
	one, _ := rewriteAll(t, m, []byte(samplePage), true)
	if !bytes.Equal(one, out) {
		t.Errorf("output depends on read boundaries:\n%s\n%s", one, out)
	}
}

func TestRewriterSpooledSegments(t *testing.T) {
	m := testMapper(t)
	page := `{"id":"q","data":{"encoding":"json+zstd","segments":[
	 {"type":"inline","data":"W1sxXV0=","metadata":{"rowOffset":0,"rowsCount":1,"segmentSize":5}},
	 {"type":"spooled","uri":"http://trino:8081/v1/spooled/download/AbC","ackUri":"http://trino:8081/v1/spooled/ack/AbC",
	  "metadata":{"rowOffset":1,"rowsCount":9},"headers":{"x-amz-server-side-encryption-customer-key":["c2VjcmV0"]}},
	 {"type":"spooled","uri":"https://bucket.s3.example:9000/spool/AbC?X-Amz-Signature=abc","ackUri":"http://trino:8081/v1/spooled/ack/AbD"}]},
	 "stats":{"state":"FINISHED"}}`
	out, info := rewriteAll(t, m, []byte(page), false)
	var got struct {
		Data struct {
			Segments []map[string]any `json:"segments"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seg := got.Data.Segments
	if seg[0]["data"] != "W1sxXV0=" {
		t.Errorf("inline segment changed: %v", seg[0])
	}
	for _, k := range []string{"uri", "ackUri"} {
		if v := seg[1][k].(string); !strings.HasPrefix(v, "http://proxy:8080/r/small.") || !strings.HasSuffix(v, "/AbC") {
			t.Errorf("coordinator segment %s not routed: %s", k, v)
		}
	}
	if v := seg[2]["uri"].(string); v != "https://bucket.s3.example:9000/spool/AbC?X-Amz-Signature=abc" {
		t.Errorf("pre-signed storage URI was touched: %s", v)
	}
	if !reflect.DeepEqual(seg[1]["headers"], map[string]any{"x-amz-server-side-encryption-customer-key": []any{"c2VjcmV0"}}) {
		t.Errorf("segment headers changed: %v", seg[1]["headers"])
	}
	if info.HasNextURI || info.State != "FINISHED" {
		t.Errorf("info = %+v", info)
	}
}

func TestRewriterCapturesErrors(t *testing.T) {
	page := `{"id":"q1","stats":{"state":"FAILED","cpuTimeMillis":7},"error":{"message":"line 1:8: Column 'x' cannot be resolved","errorCode":47,"errorName":"COLUMN_NOT_FOUND","errorType":"USER_ERROR"},"warnings":[]}`
	out, info := rewriteAll(t, testMapper(t), []byte(page), true)
	if string(out) != page {
		t.Errorf("page without URIs changed:\n%s", out)
	}
	if !info.HasError || info.ErrorName != "COLUMN_NOT_FOUND" || info.ErrorType != "USER_ERROR" || info.State != "FAILED" || info.Stats.CPUTimeMillis != 7 {
		t.Errorf("info = %+v", info)
	}
}

func TestRewriterMemoryStaysBounded(t *testing.T) {
	// A 20 MB page streams through a rewriter whose buffers never grow past
	// one read chunk plus a URI.
	var b bytes.Buffer
	b.WriteString(`{"id":"q","nextUri":"http://trino:8081/v1/statement/executing/q/y/1","data":[`)
	row := `["` + strings.Repeat("x", 1000) + `",123,null],`
	for b.Len() < 20<<20 {
		b.WriteString(row)
	}
	b.WriteString(`[1]]}`)
	rw := NewJSONRewriter(bytes.NewReader(b.Bytes()), nil, testMapper(t), &PageInfo{})
	buf := make([]byte, 4096)
	total := 0
	for {
		n, err := rw.Read(buf)
		total += n
		if cap(rw.out) > 2*rewriteReadBuf+maxURILen {
			t.Fatalf("output buffer grew to %d bytes", cap(rw.out))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total < b.Len() {
		t.Fatalf("read %d of %d bytes", total, b.Len())
	}
}

// expectedRewrite applies the documented rewrite rules to a decoded page:
// the oracle for the fuzz target.
func expectedRewrite(m *URIMapper, v any) any {
	root, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for _, k := range []string{"nextUri", "partialCancelUri", "infoUri"} {
		if s, ok := root[k].(string); ok {
			if nv, ok := m.mapTopLevel(k, s); ok {
				root[k] = nv
			}
		}
	}
	if data, ok := root["data"].(map[string]any); ok {
		if segs, ok := data["segments"].([]any); ok {
			for _, sg := range segs {
				if seg, ok := sg.(map[string]any); ok {
					for _, k := range []string{"uri", "ackUri"} {
						if s, ok := seg[k].(string); ok {
							if nv, ok := m.mapSegment(s); ok {
								seg[k] = nv
							}
						}
					}
				}
			}
		}
	}
	return root
}

// FuzzRewriteURIs: the streaming rewriter never panics, its output does not
// depend on read boundaries, and on valid JSON it equals the oracle.
func FuzzRewriteURIs(f *testing.F) {
	f.Add([]byte(samplePage))
	f.Add([]byte(`{"nextUri":"http://trino:8081/v1/statement/queued/a/b/1","data":{"segments":[{"uri":"http://trino:8081/v1/spooled/download/x"}]}}`))
	f.Add([]byte(`{"next\u0055ri":"http://trino:8081/v1/x","infoUri":"http://elsewhere/ui"}`))
	f.Add([]byte(`[{"nextUri":"http://trino:8081/v1/x"}]`))
	f.Add([]byte(`{"a":[[[[[[]]]]]],"stats":{"cpuTimeMillis":1e3}}`))
	// Rows are skipped from quote to bracket: brackets and escaped quotes
	// in their strings, nested arrays and objects, and URIs after them.
	f.Add([]byte(`{"data":[[1,"a]\"[b",[2,[3]],{"k":"]"}],[null,"http://trino:8081/v1/x"]],"nextUri":"http://trino:8081/v1/statement/executing/q/s/2","stats":{"state":"RUNNING","cpuTimeMillis":7}}`))
	f.Add([]byte(`{"data":[],"infoUri":"http://trino:8081/ui/q"}`))
	// Invalid UTF-8 in a URI: clients decode it to U+FFFD (one per bad
	// byte, as encoding/json does), so the token covers that and the
	// proxy writes it as valid UTF-8.
	f.Add([]byte("{\"nextUri\":\"http://trino:8081/v1/statement/executing/q/\xff\xfe/1\",\"infoUri\":\"http://trino:8081/ui/\xc3\"}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		m := testMapper(t)
		whole, _ := rewriteAll(t, m, in, false)
		one, _ := rewriteAll(t, m, in, true)
		if !bytes.Equal(whole, one) {
			t.Fatalf("read boundaries change the output:\n%q\n%q", whole, one)
		}
		var v any
		if json.Unmarshal(in, &v) != nil {
			return
		}
		var got any
		if err := json.Unmarshal(whole, &got); err != nil {
			t.Fatalf("valid input produced invalid output: %v\nin:  %q\nout: %q", err, in, whole)
		}
		if want := expectedRewrite(m, v); !reflect.DeepEqual(got, want) {
			t.Fatalf("rewrite differs from the rules:\nin:   %q\ngot:  %v\nwant: %v", in, got, want)
		}
	})
}

// A final page sent before the tasks' statistics were rolled up (seen on a
// loaded Trino 476: FINISHED, 0 ms of CPU and wall time, 0 rows, after 7
// splits) is told apart from a query that really cost nothing.
func TestRewriterTellsAnUnrolledFinalPage(t *testing.T) {
	for _, c := range []struct {
		stats string
		want  bool
	}{
		{`"state":"FINISHED","cpuTimeMillis":0,"wallTimeMillis":0,"processedRows":0,"totalSplits":7,"completedSplits":7`, false},
		{`"state":"FINISHED","cpuTimeMillis":0,"wallTimeMillis":3,"processedRows":1,"totalSplits":1,"completedSplits":1`, true},
		{`"state":"FINISHED","cpuTimeMillis":0,"wallTimeMillis":0,"processedRows":0,"totalSplits":0,"completedSplits":0`, true},
		// count(*) of tpch.tiny.region: 5 rows in well under a millisecond
		{`"state":"FINISHED","cpuTimeMillis":0,"wallTimeMillis":0,"processedRows":5,"totalSplits":2,"completedSplits":2`, true},
		{`"state":"FINISHED","cpuTimeMillis":38,"wallTimeMillis":40,"processedRows":25,"totalSplits":7,"completedSplits":7`, true},
	} {
		_, info := rewriteAll(t, testMapper(t), []byte(`{"id":"q1","stats":{`+c.stats+`},"warnings":[]}`), false)
		if got := info.Stats.RolledUp(); got != c.want {
			t.Errorf("%s: rolled up %v, want %v (%+v)", c.stats, got, c.want, info.Stats)
		}
	}
}
