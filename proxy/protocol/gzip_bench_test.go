package protocol

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"testing"
)

// realPage is a real Trino 476 page: the first data page of
// SELECT * FROM tpch.sf1.lineitem (978,291 bytes, 6,859 rows), kept
// gzip-compressed in testdata.
func realPage(tb testing.TB) []byte {
	tb.Helper()
	f, err := os.Open("testdata/lineitem-page.json.gz")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// BenchmarkGzipPage is the CPU cost of gzip-encoding one real result page
// at each level, and what it saves (B/page is the encoded size; the page
// is 978,291 bytes). BENCHMARKS.md, "gzip to clients".
func BenchmarkGzipPage(b *testing.B) {
	page := realPage(b)
	for _, level := range []int{1, 2, 5, 9} {
		b.Run(fmt.Sprintf("level=%d", level), func(b *testing.B) {
			var out bytes.Buffer
			b.SetBytes(int64(len(page)))
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				out.Reset()
				zw := GzipWriter(&out, level)
				zw.Write(page)
				zw.Close()
				PutGzipWriter(zw, level)
			}
			b.ReportMetric(float64(out.Len()), "B/page")
		})
	}
}

// BenchmarkRewritePage is the CPU cost of scanning and rewriting one real
// result page (BENCHMARKS.md, "Large results").
func BenchmarkRewritePage(b *testing.B) {
	page := realPage(b)
	sg, err := NewSigner(nil)
	if err != nil {
		b.Fatal(err)
	}
	m := &URIMapper{Signer: sg, Cluster: "default", UpstreamBase: "http://127.0.0.1:8093", PublicBase: "http://proxy:8080"}
	var out bytes.Buffer
	b.SetBytes(int64(len(page)))
	b.ReportAllocs()
	for b.Loop() {
		out.Reset()
		var info PageInfo
		if _, err := out.ReadFrom(NewJSONRewriter(bytes.NewReader(page), nil, m, &info)); err != nil {
			b.Fatal(err)
		}
		if !info.HasData || info.NextTarget == "" {
			b.Fatalf("page info %+v", info)
		}
	}
}
