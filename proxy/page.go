package proxy

import (
	"bytes"
	"errors"
	"io"
	"sync"

	"github.com/klauspost/compress/gzip"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"
)

// Sending a rewritten QueryResults page to the client.
//
// A page is read whole (through the URI rewriter) before its first byte is
// sent, up to Options.PageBufferBytes: Trino writes a page only once it has
// it (at most its target result size, 1 MB unless a client asks for more),
// so holding it costs no latency, and it is what lets the proxy answer an
// upstream that dies or stalls halfway through a page with a well-formed
// Trino error instead of truncated JSON after the status line. A page
// larger than the buffer streams on from what was read, with memory still
// bounded, and such a failure then truncates it (the connection is closed,
// so no client takes the fragment for a page).
//
// Clients that accept gzip get the page gzip-encoded (klauspost/compress,
// Options.GzipLevel), as Trino itself answers them; pages under
// gzipMinBytes go as they are.

// gzipMinBytes: smaller pages (queued and running polls without data) are
// not worth a gzip header and a compressor.
const gzipMinBytes = 1024

// gzipPools hold gzip writers by level (a writer's state is ~1 MB at the
// higher levels, so they are reused, not made per page).
var gzipPools sync.Map // int -> *sync.Pool

func gzipWriter(w io.Writer, level int) *gzip.Writer {
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

func putGzipWriter(zw *gzip.Writer, level int) {
	zw.Reset(io.Discard)
	if p, ok := gzipPools.Load(level); ok {
		p.(*sync.Pool).Put(zw)
	}
}

// acceptsGzip reports whether the client named gzip in Accept-Encoding
// (without q=0).
func acceptsGzip(h *fasthttp.RequestHeader) bool {
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

// errPageFailed ends a page that did not fit in the buffer and failed
// upstream while streaming; nothing else can be done once bytes are out.
var errPageFailed = errors.New("proxy: page failed upstream after it started streaming")

// sendPage reads the rewritten page rw and hands it to fasthttp, gzipped
// when the client accepts it. It returns the upstream error when the page
// failed before any of it was sent; rw is closed (and the upstream
// response released) either way, its completion callbacks run only for a
// whole page (abort is called instead when it failed).
func (s *Server) sendPage(ctx *fasthttp.RequestCtx, rw *protocol.JSONRewriter, abort func()) error {
	gz := s.opts.GzipLevel > 0 && acceptsGzip(&ctx.Request.Header)
	buf := bytebufferpool.Get()
	_, err := io.CopyN(buf, rw, int64(s.opts.PageBufferBytes)+1)
	switch {
	case err != nil && err != io.EOF:
		bytebufferpool.Put(buf)
		abort()
		_ = rw.Close()
		return err
	case err == io.EOF:
		// The whole page is here: run the completion callbacks now.
		_ = rw.Close()
		defer bytebufferpool.Put(buf)
		if !gz || len(buf.B) < gzipMinBytes {
			ctx.SetBody(buf.B)
			return nil
		}
		ctx.Response.Header.Set(fasthttp.HeaderContentEncoding, "gzip")
		ctx.Response.Header.Add(fasthttp.HeaderVary, "Accept-Encoding")
		zw := gzipWriter(ctx.Response.BodyWriter(), s.opts.GzipLevel)
		_, _ = zw.Write(buf.B)
		_ = zw.Close()
		putGzipWriter(zw, s.opts.GzipLevel)
		return nil
	}
	// Over the buffer: stream what was read, then the rest.
	head := append([]byte(nil), buf.B...)
	bytebufferpool.Put(buf)
	var body io.Reader = io.MultiReader(bytes.NewReader(head), rw)
	if gz {
		ctx.Response.Header.Set(fasthttp.HeaderContentEncoding, "gzip")
		ctx.Response.Header.Add(fasthttp.HeaderVary, "Accept-Encoding")
		body = newGzipReader(body, s.opts.GzipLevel)
	}
	ctx.SetBodyStream(&pageStream{r: body, rw: rw, abort: abort}, -1)
	return nil
}

// pageStream is a page streamed past the buffer. A read error upstream
// aborts the page's callbacks, and fasthttp closes the connection.
type pageStream struct {
	r     io.Reader
	rw    *protocol.JSONRewriter
	abort func()
	bad   bool
}

func (p *pageStream) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF && !p.bad {
		p.bad = true
		p.abort()
		err = errors.Join(errPageFailed, err)
	}
	return n, err
}

func (p *pageStream) Close() error {
	if z, ok := p.r.(*gzipReader); ok {
		z.release()
	}
	return p.rw.Close()
}

// gzipReader compresses src as it is read, holding only the compressor's
// state and what it has emitted but not yet been read.
type gzipReader struct {
	src   io.Reader
	level int
	zw    *gzip.Writer
	out   bytes.Buffer
	chunk []byte
	err   error
}

func newGzipReader(src io.Reader, level int) *gzipReader {
	g := &gzipReader{src: src, level: level, chunk: make([]byte, 32<<10)}
	g.zw = gzipWriter(&g.out, level)
	return g
}

func (g *gzipReader) Read(p []byte) (int, error) {
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

func (g *gzipReader) release() {
	if g.zw != nil {
		putGzipWriter(g.zw, g.level)
		g.zw = nil
	}
}
