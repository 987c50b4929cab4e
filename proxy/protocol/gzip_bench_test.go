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
