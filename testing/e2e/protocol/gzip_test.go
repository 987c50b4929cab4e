package protocol

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/testing/e2e"
)

// firstDataPage runs sql on base by hand, asking for pages with
// acceptEncoding (Go's transparent decoding off), and returns the first
// page that holds rows: its size on the wire, its Content-Encoding and the
// decoded page. The query is cancelled afterwards.
func firstDataPage(t *testing.T, base, sql, acceptEncoding string) (wire int, encoding string, page e2e.Page) {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	do := func(method, uri, body string) (*http.Response, []byte) {
		req, _ := http.NewRequest(method, uri, strings.NewReader(body))
		req.Header.Set("X-Trino-User", "e2e")
		if acceptEncoding != "" {
			req.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := tr.RoundTrip(req)
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
	resp, b := do("POST", base+"/v1/statement", sql)
	for {
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
		}
		wire, encoding = len(b), resp.Header.Get("Content-Encoding")
		raw := b
		if encoding == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatal(err)
			}
			if raw, err = io.ReadAll(zr); err != nil {
				t.Fatalf("broken gzip page: %v", err)
			}
		}
		page = e2e.Page{}
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatalf("page is not JSON: %v", err)
		}
		if page.NextURI == "" || len(page.Data) > 0 {
			break
		}
		resp, b = do("GET", page.NextURI, "")
	}
	if page.NextURI != "" {
		do("DELETE", page.NextURI, "")
	}
	if len(page.Data) == 0 {
		t.Fatal("the query ended without a data page")
	}
	return wire, encoding, page
}

// TestPagesAreGzippedToClientsThatAcceptIt: a real Trino page of
// tpch.tiny.lineitem reaches a client that sends Accept-Encoding: gzip
// gzip-encoded (the proxy decodes upstream pages to rewrite their URIs and
// encodes them again), close to the size Trino itself sends, and plain to
// a client that does not.
func TestPagesAreGzippedToClientsThatAcceptIt(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	const q = "SELECT * FROM tpch.tiny.lineitem"
	directGz, enc, _ := firstDataPage(t, direct, q, "gzip")
	if enc != "gzip" {
		t.Logf("Trino itself answered with Content-Encoding %q", enc)
	}
	gz, enc, page := firstDataPage(t, proxied, q, "gzip")
	if enc != "gzip" {
		t.Fatalf("through the proxy: Content-Encoding %q, want gzip", enc)
	}
	if !strings.HasPrefix(page.NextURI, proxied+"/r/") {
		t.Errorf("nextUri %q not routed through the proxy", page.NextURI)
	}
	plain, enc, _ := firstDataPage(t, proxied, q, "")
	if enc != "" {
		t.Errorf("without Accept-Encoding: Content-Encoding %q", enc)
	}
	t.Logf("first lineitem page: %d bytes plain, %d gzip through the proxy, %d gzip from Trino directly", plain, gz, directGz)
	if gz*2 > plain {
		t.Errorf("gzip page %d bytes for %d plain: not even halved", gz, plain)
	}
}
