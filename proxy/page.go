package proxy

import (
	"bytes"
	"errors"
	"io"

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
// Reading the whole page costs the client no time when the proxy has
// read it ahead (readahead.go): once a client has a page of rows, the
// next one is fetched, rewritten (and gzipped) while the client reads.
//
// Clients that accept gzip get the page gzip-encoded (klauspost/compress,
// Options.GzipLevel), as Trino itself answers them; pages under
// protocol.GzipMinBytes go as they are.

// errPageFailed ends a page that did not fit in the buffer and failed
// upstream while streaming; nothing else can be done once bytes are out.
var errPageFailed = errors.New("proxy: page failed upstream after it started streaming")

// sendPage reads the rewritten page rw and hands it to fasthttp, gzipped
// when the client accepts it. It returns the upstream error when the page
// failed before any of it was sent; rw is closed (and the upstream
// response released) either way, its completion callbacks run only for a
// whole page (abort is called instead when it failed). whole, when not
// nil, is called with a page read whole (as sent, before gzip), after
// the callbacks and before the page goes out; it must not keep the bytes.
func (s *Server) sendPage(ctx *fasthttp.RequestCtx, rw *protocol.JSONRewriter, abort func(), whole func([]byte)) error {
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
		if whole != nil {
			whole(buf.B)
		}
		s.writeBody(ctx, buf.B)
		return nil
	}
	// Over the buffer: stream what was read, then the rest.
	head := append([]byte(nil), buf.B...)
	bytebufferpool.Put(buf)
	var body io.Reader = io.MultiReader(bytes.NewReader(head), rw)
	if s.gzipTo(ctx) {
		ctx.Response.Header.Set(fasthttp.HeaderContentEncoding, "gzip")
		ctx.Response.Header.Add(fasthttp.HeaderVary, "Accept-Encoding")
		body = protocol.NewGzipReader(body, s.opts.GzipLevel)
	}
	ctx.SetBodyStream(&pageStream{r: body, rw: rw, abort: abort}, -1)
	return nil
}

// gzipTo reports whether the page goes gzip-encoded to ctx's client.
func (s *Server) gzipTo(ctx *fasthttp.RequestCtx) bool {
	return s.opts.GzipLevel > 0 && protocol.AcceptsGzip(&ctx.Request.Header)
}

// writeBody sets a whole page b as the response body (copied), gzipped
// when the client accepts it and the page is worth it.
func (s *Server) writeBody(ctx *fasthttp.RequestCtx, b []byte) {
	if !s.gzipTo(ctx) || len(b) < protocol.GzipMinBytes {
		ctx.SetBody(b)
		return
	}
	ctx.Response.Header.Set(fasthttp.HeaderContentEncoding, "gzip")
	ctx.Response.Header.Add(fasthttp.HeaderVary, "Accept-Encoding")
	zw := protocol.GzipWriter(ctx.Response.BodyWriter(), s.opts.GzipLevel)
	_, _ = zw.Write(b)
	_ = zw.Close()
	protocol.PutGzipWriter(zw, s.opts.GzipLevel)
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
	if z, ok := p.r.(*protocol.GzipReader); ok {
		z.Release()
	}
	return p.rw.Close()
}
