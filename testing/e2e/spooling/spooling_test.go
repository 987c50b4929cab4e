// Package spooling tests the spooling protocol end to end: a second Trino
// with spooling enabled, its segments stored in an S3 fake (moto's server,
// from PyPI, in the test venv), retrieval through the coordinator
// (COORDINATOR_PROXY) so segment downloads and acks go through the proxy.
// Between the proxy and Trino sits a small recording reverse proxy that sees
// what Trino really sent (the segment headers, i.e. the SSE-C keys) and what
// reached Trino on each download and ack. See package e2e.
package spooling

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/testing/e2e"
)

// spoolingTrinoConfig is appended to the harness's config.properties.
// Inlining is off and segments are small, so every result spools, in
// several segments.
const spoolingTrinoConfig = `protocol.spooling.enabled=true
protocol.spooling.shared-secret-key=%s
protocol.spooling.retrieval-mode=COORDINATOR_PROXY
protocol.spooling.inlining.enabled=false
protocol.spooling.initial-segment-size=256kB
protocol.spooling.max-segment-size=2MB
query.max-memory=400MB
query.max-memory-per-node=400MB
`

// spoolingManagerConfig is etc/spooling-manager.properties.
const spoolingManagerConfig = `spooling-manager.name=filesystem
fs.s3.enabled=true
fs.location=s3://%s/
s3.endpoint=%s
s3.region=us-east-1
s3.aws-access-key=prestroid
s3.aws-secret-key=prestroid-secret
s3.path-style-access=true
`

const spoolBucket = "prestroid-spool"

type spoolingCluster struct {
	trino    string // the spooling Trino, direct
	recorder *segmentRecorder
	proxied  string // the proxy, in front of the recorder
}

// startMoto runs moto's S3 server on a free port and returns its endpoint.
func startMoto(t testing.TB, python string) string {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import moto.server").CombinedOutput(); err != nil {
		t.Fatalf("moto is not installed in %s (PY_TEST_DEPS in the Makefile; an older .venv needs `rm -rf .venv && make venv`): %v\n%s", python, err, out)
	}
	port := e2e.FreePort(t)
	cmd := exec.Command(python, "-m", "moto.server", "-H", "127.0.0.1", "-p", port)
	var logBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("moto server log (tail):\n%s", e2e.Tail(logBuf.String(), 3000))
		}
	})
	return "http://127.0.0.1:" + port // not waited for: see createBucket
}

// createBucket waits for the S3 fake and creates bucket (path style).
func createBucket(t testing.TB, endpoint, bucket string) {
	t.Helper()
	e2e.WaitHTTP(t, endpoint+"/")
	req, _ := http.NewRequest("PUT", endpoint+"/"+bucket, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("create bucket %s: %s: %s", bucket, resp.Status, b)
	}
}

// startSpoolingTrino starts a second harness instance with spooling into
// the bucket at s3Endpoint and returns its URL. It is stopped in Cleanup.
func startSpoolingTrino(t testing.TB, s3Endpoint, bucket string) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	u, _ := e2e.StartTrinoInstance(t, "spooling", fmt.Sprintf(spoolingTrinoConfig, base64.StdEncoding.EncodeToString(key)),
		map[string]string{"spooling-manager.properties": fmt.Sprintf(spoolingManagerConfig, bucket, s3Endpoint)})
	return u
}

// segmentRecorder is a reverse proxy in front of Trino that records the
// headers of every spooled segment Trino hands out (by upstream path) and
// the requests that reach its /v1/spooled/ endpoints.
type segmentRecorder struct {
	mu          sync.Mutex
	listed      map[string]map[string][]string // /v1/spooled/download/... -> headers in the page
	listedAck   map[string]string              // ack path -> download path
	downloads   map[string]http.Header         // download path -> request headers received
	acks        map[string]http.Header         // download path (of the acked segment) -> headers received
	downloadsOK int
}

func startSegmentRecorder(t testing.TB, trino string) (*segmentRecorder, string) {
	t.Helper()
	target, _ := url.Parse(trino)
	rec := &segmentRecorder{listed: map[string]map[string][]string{}, listedAck: map[string]string{},
		downloads: map[string]http.Header{}, acks: map[string]http.Header{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = pr.In.Host // Trino builds its URIs from Host: keep the recorder's
		},
		ModifyResponse: rec.observe,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.EscapedPath()
		rec.mu.Lock()
		switch {
		case strings.HasPrefix(p, "/v1/spooled/download/"):
			rec.downloads[p] = r.Header.Clone()
		case strings.HasPrefix(p, "/v1/spooled/ack/"):
			rec.acks[rec.listedAck[p]] = r.Header.Clone()
		}
		rec.mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

type segment struct {
	Type     string              `json:"type"`
	Data     []byte              `json:"data"` // inline: base64 in JSON
	URI      string              `json:"uri"`
	AckURI   string              `json:"ackUri"`
	Headers  map[string][]string `json:"headers"`
	Metadata struct {
		RowOffset        int64 `json:"rowOffset"`
		RowsCount        int64 `json:"rowsCount"`
		SegmentSize      int64 `json:"segmentSize"`
		UncompressedSize int64 `json:"uncompressedSize"`
	} `json:"metadata"`
}

type encodedData struct {
	Encoding string    `json:"encoding"`
	Segments []segment `json:"segments"`
}

func (rec *segmentRecorder) observe(resp *http.Response) error {
	p := resp.Request.URL.EscapedPath()
	if strings.HasPrefix(p, "/v1/spooled/download/") && resp.StatusCode == 200 {
		rec.mu.Lock()
		rec.downloadsOK++
		rec.mu.Unlock()
		return nil
	}
	if !strings.HasPrefix(p, "/v1/statement") || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var pg struct {
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(body, &pg) != nil || len(pg.Data) == 0 || pg.Data[0] != '{' {
		return nil
	}
	var d encodedData
	if err := json.Unmarshal(pg.Data, &d); err != nil {
		return nil
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, s := range d.Segments {
		if s.Type != "spooled" {
			continue
		}
		du, err1 := url.Parse(s.URI)
		au, err2 := url.Parse(s.AckURI)
		if err1 != nil || err2 != nil {
			continue
		}
		rec.listed[du.EscapedPath()] = s.Headers
		rec.listedAck[au.EscapedPath()] = du.EscapedPath()
	}
	return nil
}

// TestSpooling runs spooled queries through the proxy with the Go client
// and by hand.
func TestSpooling(t *testing.T) {
	e2e.TrinoURL(t) // the suite's gate: skip unless the real-Trino run is on
	python := os.Getenv("PRESTROID_PYTHON")
	if python == "" {
		t.Skip("PRESTROID_PYTHON not set: the S3 fake (moto) lives in the test venv; run `make test`")
	}
	start := time.Now()
	s3 := startMoto(t, python) // starts while Trino does
	c := spoolingCluster{trino: startSpoolingTrino(t, s3, spoolBucket)}
	createBucket(t, s3, spoolBucket)
	var upstream string
	c.recorder, upstream = startSegmentRecorder(t, c.trino)
	c.proxied, _ = e2e.StartProxy(t, proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "spooling", URL: upstream}}})

	t.Run("raw protocol: routed segment URIs, untouched headers, download and ack through the proxy", func(t *testing.T) {
		testSpoolingRaw(t, c)
	})
	t.Run("go client: results through the proxy equal direct", func(t *testing.T) {
		testSpoolingGoClient(t, c)
	})
	t.Logf("spooling test total %s", time.Since(start).Round(time.Second))
}

const spoolRawQuery = "SELECT orderkey, custkey, orderstatus, totalprice, orderdate, comment FROM tpch.tiny.orders"

func testSpoolingRaw(t *testing.T, c spoolingCluster) {
	// The same query by the direct protocol (no encoding header), directly.
	want := rawRows(t, c.trino, spoolRawQuery, "")
	if len(want) != 15000 {
		t.Fatalf("direct protocol: %d rows, want 15000", len(want))
	}

	// Spooled, through the proxy.
	hdr := map[string]string{"X-Trino-Query-Data-Encoding": "json"}
	resp, p := e2e.Do(t, "POST", c.proxied+"/v1/statement", spoolRawQuery, hdr)
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %s", resp.Status)
	}
	var segs []segment
	pages := 0
	for {
		if enc := resp.Header.Get("X-Trino-Query-Data-Encoding"); enc != "json" {
			t.Errorf("page %d: X-Trino-Query-Data-Encoding %q through the proxy, want json", pages, enc)
		}
		if len(p.Data) > 0 && string(p.Data) != "null" {
			var d encodedData
			if err := json.Unmarshal(p.Data, &d); err != nil {
				t.Fatalf("page %d: data is not a segments object (%v): %.300s", pages, err, p.Data)
			}
			if d.Encoding != "json" {
				t.Errorf("data.encoding %q, want json", d.Encoding)
			}
			segs = append(segs, d.Segments...)
		}
		if p.Error != nil {
			t.Fatalf("query failed: %+v", *p.Error)
		}
		if p.NextURI == "" {
			break
		}
		if !strings.HasPrefix(p.NextURI, c.proxied+"/r/") {
			t.Fatalf("nextUri %s not routed through the proxy", p.NextURI)
		}
		resp, p = e2e.Do(t, "GET", p.NextURI, "", hdr)
		if resp.StatusCode != 200 {
			t.Fatalf("GET nextUri: %s", resp.Status)
		}
		pages++
	}
	if p.Stats.State != "FINISHED" {
		t.Fatalf("query ended %s", p.Stats.State)
	}

	spooled := 0
	got := make([]string, 0, len(want))
	var next int64
	sort.Slice(segs, func(i, j int) bool { return segs[i].Metadata.RowOffset < segs[j].Metadata.RowOffset })
	for i, s := range segs {
		if s.Metadata.RowOffset != next {
			t.Errorf("segment %d: rowOffset %d, want %d", i, s.Metadata.RowOffset, next)
		}
		next = s.Metadata.RowOffset + s.Metadata.RowsCount
		var body []byte
		switch s.Type {
		case "inline":
			body = s.Data
		case "spooled":
			spooled++
			body = checkSpooledSegment(t, c, i, s)
		default:
			t.Fatalf("segment %d: type %q", i, s.Type)
		}
		if int64(len(body)) != s.Metadata.SegmentSize {
			t.Errorf("segment %d: %d bytes, segmentSize says %d", i, len(body), s.Metadata.SegmentSize)
		}
		rows := decodeRows(t, body)
		if int64(len(rows)) != s.Metadata.RowsCount {
			t.Errorf("segment %d: %d rows, rowsCount says %d", i, len(rows), s.Metadata.RowsCount)
		}
		got = append(got, rows...)
	}
	if spooled == 0 {
		t.Fatalf("no spooled segment among %d segments: spooling not in effect", len(segs))
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("spooled rows through the proxy differ from the direct protocol: %d rows vs %d", len(got), len(want))
	}
	t.Logf("raw: %d pages, %d segments (%d spooled), %d rows decoded from spooled bytes fetched through the proxy",
		pages, len(segs), spooled, len(got))
}

// checkSpooledSegment checks a spooled segment's URIs and headers against
// what Trino sent, downloads it and acks it through the proxy, and returns
// its bytes.
func checkSpooledSegment(t *testing.T, c spoolingCluster, i int, s segment) []byte {
	t.Helper()
	for _, u := range []string{s.URI, s.AckURI} {
		if !strings.HasPrefix(u, c.proxied+"/r/") {
			t.Fatalf("segment %d: %s is not routed through the proxy", i, u)
		}
	}
	dl := upstreamTarget(t, c.proxied, s.URI)
	ack := upstreamTarget(t, c.proxied, s.AckURI)
	if !strings.HasPrefix(dl, "/v1/spooled/download/") || !strings.HasPrefix(ack, "/v1/spooled/ack/") {
		t.Fatalf("segment %d: routed targets %s, %s", i, dl, ack)
	}
	c.recorder.mu.Lock()
	upstreamHeaders, listed := c.recorder.listed[dl]
	c.recorder.mu.Unlock()
	if !listed {
		t.Fatalf("segment %d: Trino never listed %s", i, dl)
	}
	if !reflect.DeepEqual(s.Headers, upstreamHeaders) {
		t.Errorf("segment %d: headers changed by the proxy:\n trino %v\n proxy %v", i, upstreamHeaders, s.Headers)
	}
	if len(s.Headers) == 0 {
		t.Errorf("segment %d: no segment headers (fs.segment.encryption is on by default: expected SSE-C keys)", i)
	}

	get := func(u string) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", u, nil)
		for k, vs := range s.Headers {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, b
	}
	resp, body := get(s.URI)
	if resp.StatusCode != 200 {
		t.Fatalf("segment %d: download through the proxy: %s: %.300s", i, resp.Status, body)
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" {
		t.Errorf("segment %d: download has Content-Encoding %q", i, ce)
	}
	// The headers reached Trino unchanged on the download.
	c.recorder.mu.Lock()
	received := c.recorder.downloads[dl]
	c.recorder.mu.Unlock()
	for k, vs := range s.Headers {
		if got := received.Values(k); !reflect.DeepEqual(got, vs) {
			t.Errorf("segment %d: download reached Trino with %s=%q, want %q", i, k, got, vs)
		}
	}
	if resp, b := get(s.AckURI); resp.StatusCode != 200 {
		t.Errorf("segment %d: ack through the proxy: %s: %.300s", i, resp.Status, b)
	}
	c.recorder.mu.Lock()
	_, acked := c.recorder.acks[dl]
	c.recorder.mu.Unlock()
	if !acked {
		t.Errorf("segment %d: the ack never reached Trino", i)
	}
	return body
}

// upstreamTarget returns the target a routed proxy URI stands for.
func upstreamTarget(t *testing.T, proxied, u string) string {
	t.Helper()
	_, target, ok := protocol.SplitRouted(strings.TrimPrefix(u, proxied))
	if !ok {
		t.Fatalf("%s is not a routed URI", u)
	}
	return target
}

// rawRows runs q by hand against base with the given encoding header (none
// for the direct protocol) and returns its rows in canonical JSON. Only
// direct-protocol pages are accepted here.
func rawRows(t *testing.T, base, q, encoding string) []string {
	t.Helper()
	var h map[string]string
	if encoding != "" {
		h = map[string]string{"X-Trino-Query-Data-Encoding": encoding}
	}
	resp, p := e2e.Do(t, "POST", base+"/v1/statement", q, h)
	if resp.StatusCode != 200 {
		t.Fatalf("POST: %s", resp.Status)
	}
	var out []string
	for {
		if p.Error != nil {
			t.Fatalf("%s: %+v", q, *p.Error)
		}
		if len(p.Data) > 0 && string(p.Data) != "null" {
			out = append(out, decodeRows(t, p.Data)...)
		}
		if p.NextURI == "" {
			return out
		}
		_, p = e2e.Do(t, "GET", p.NextURI, "", h)
	}
}

// decodeRows decodes a JSON array of rows into canonical JSON strings.
func decodeRows(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var rows [][]any
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("rows are not a JSON array of arrays: %v: %.200s", err, b)
	}
	out := make([]string, len(rows))
	for i, r := range rows {
		j, _ := json.Marshal(r)
		out[i] = string(j)
	}
	return out
}

func testSpoolingGoClient(t *testing.T, c spoolingCluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dbDirect, dbProxy := e2e.OpenDB(t, c.trino, ""), e2e.OpenDB(t, c.proxied, "")
	c.recorder.mu.Lock()
	downloadsBefore := c.recorder.downloadsOK
	c.recorder.mu.Unlock()
	for _, tc := range []struct{ name, sql, encoding string }{
		{"tiny orders, json (the client's default)", "SELECT * FROM tpch.tiny.orders", ""},
		{"tiny customer, zstd", "SELECT * FROM tpch.tiny.customer", "json+zstd,json"},
		{"sf1 customer, lz4", "SELECT * FROM tpch.sf1.customer", "json+lz4,json"},
	} {
		var want, got rowDigest
		var errD, errP error
		t0 := time.Now()
		e2e.Both(func() { want, errD = digestRows(ctx, dbDirect, tc.sql, tc.encoding) },
			func() { got, errP = digestRows(ctx, dbProxy, tc.sql, tc.encoding) })
		if errD != nil || errP != nil {
			t.Fatalf("%s: direct %v, proxy %v", tc.name, errD, errP)
		}
		if want.rows == 0 || want != got {
			t.Errorf("%s: through the proxy %+v, direct %+v", tc.name, got, want)
			continue
		}
		t.Logf("%s: %d rows identical through the proxy and directly (%s)", tc.name, got.rows, time.Since(t0).Round(time.Millisecond))
	}
	// The Go client really spooled through the proxy: segments were
	// downloaded (and acked) via the recorder, which only the proxy uses.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.recorder.mu.Lock()
		n, acks, downloads := c.recorder.downloadsOK-downloadsBefore, len(c.recorder.acks), len(c.recorder.downloads)
		c.recorder.mu.Unlock()
		if n > 0 && acks >= downloads {
			t.Logf("go client: %d segments downloaded through the proxy; %d of %d downloads acked", n, acks, downloads)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("go client through the proxy: %d segment downloads, %d acks of %d downloads", n, acks, downloads)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Every download carried the headers Trino listed for its segment.
	c.recorder.mu.Lock()
	defer c.recorder.mu.Unlock()
	for p, h := range c.recorder.downloads {
		listed, ok := c.recorder.listed[p]
		if !ok {
			t.Errorf("download of %s, a segment Trino never listed", p)
			continue
		}
		for k, vs := range listed {
			if got := h.Values(k); !reflect.DeepEqual(got, vs) {
				t.Errorf("download of %s reached Trino with %s=%q, want %q", p, k, got, vs)
			}
		}
	}
}

// rowDigest identifies a multiset of rows: its size and the sum of the
// rows' FNV-1a hashes, independent of row order.
type rowDigest struct {
	cols string
	rows int
	sum  uint64
}

func digestRows(ctx context.Context, db *sql.DB, q, encoding string) (rowDigest, error) {
	var args []any
	if encoding != "" {
		args = append(args, sql.Named("encoding", encoding))
	}
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return rowDigest{}, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return rowDigest{}, err
	}
	d := rowDigest{cols: strings.Join(cols, ",")}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var buf []byte
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return rowDigest{}, err
		}
		buf = buf[:0]
		for _, v := range vals {
			buf = fmt.Appendf(buf, "%v\x00", v)
		}
		h := fnv.New64a()
		h.Write(buf)
		d.sum += h.Sum64()
		d.rows++
	}
	return d, rows.Err()
}
