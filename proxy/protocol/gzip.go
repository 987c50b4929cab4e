package protocol

import (
	"bytes"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"

	"github.com/valyala/fasthttp"
)

// Result pages to clients that accept gzip are compressed as Trino itself
// answers them (klauspost/compress), with pooled compressors.

// klauspost's gzip, not the standard library's (which took 1.8x the CPU
// for the same page at level 1 and 2.6x at level 2: BENCHMARKS.md, "gzip
// to clients"): only klauspost's has StatelessCompression, so an import
// tool that swaps the package fails the build here.
const _ = gzip.StatelessCompression

// GzipMinBytes: smaller pages (queued and running polls without data) are
// not worth a gzip header and a compressor.
const GzipMinBytes = 1024

// gzipPools hold gzip writers by level (a writer's state is ~1 MB at the
// higher levels, so they are reused, not made per page).
var gzipPools sync.Map // int -> *sync.Pool

// GzipWriter is a pooled gzip writer at level onto w; PutGzipWriter
// returns it.
func GzipWriter(w io.Writer, level int) *gzip.Writer {
	p, _ := gzipPools.LoadOrStore(level, &sync.Pool{New: func() any {
		zw, err := gzip.NewWriterLevel(io.Discard, level)
		if err != nil {
			zw = gzip.NewWriter(io.Discard)
		}
		return zw
	}})
	zw := p.(*sync.Pool).Get().(*gzip.Writer)
	zw.Reset(w)
	return zw
}

// PutGzipWriter returns zw (from GzipWriter at level) to its pool.
func PutGzipWriter(zw *gzip.Writer, level int) {
	zw.Reset(io.Discard)
	if p, ok := gzipPools.Load(level); ok {
		p.(*sync.Pool).Put(zw)
	}
}

// AcceptsGzip reports whether the client named gzip in Accept-Encoding
// (without q=0).
func AcceptsGzip(h *fasthttp.RequestHeader) bool {
	for _, v := range h.PeekAll(fasthttp.HeaderAcceptEncoding) {
		for _, part := range bytes.Split(v, []byte{','}) {
			name, params, _ := bytes.Cut(bytes.TrimSpace(part), []byte{';'})
			if !bytes.EqualFold(bytes.TrimSpace(name), []byte("gzip")) {
				continue
			}
			q := bytes.ReplaceAll(params, []byte(" "), nil)
			if bytes.HasPrefix(q, []byte("q=0")) && !bytes.ContainsAny(q[3:], "123456789") {
				return false
			}
			return true
		}
	}
	return false
}

// GzipReader compresses src as it is read, holding only the compressor's
// state and what it has emitted but not yet been read.
type GzipReader struct {
	src   io.Reader
	level int
	zw    *gzip.Writer
	out   bytes.Buffer
	chunk []byte
	err   error
}

// NewGzipReader compresses src at level as it is read; Release returns
// its compressor.
func NewGzipReader(src io.Reader, level int) *GzipReader {
	g := &GzipReader{src: src, level: level, chunk: make([]byte, 32<<10)}
	g.zw = GzipWriter(&g.out, level)
	return g
}

func (g *GzipReader) Read(p []byte) (int, error) {
	for g.out.Len() == 0 {
		if g.err != nil {
			return 0, g.err
		}
		n, err := g.src.Read(g.chunk)
		if n > 0 {
			_, _ = g.zw.Write(g.chunk[:n])
		}
		if err == io.EOF {
			_ = g.zw.Close()
			g.err = io.EOF
		} else if err != nil {
			g.err = err
			return 0, err // no gzip trailer: the client sees a broken stream
		}
	}
	return g.out.Read(p)
}

// Release returns the reader's compressor to its pool.
func (g *GzipReader) Release() {
	if g.zw != nil {
		PutGzipWriter(g.zw, g.level)
		g.zw = nil
	}
}
