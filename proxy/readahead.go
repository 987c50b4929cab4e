package proxy

import (
	"bytes"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy/protocol"
)

// Reading result pages ahead of the client.
//
// A page is read whole before it is sent (page.go), so through the proxy a
// page costs Trino's time to write it, then the proxy's to read and
// rewrite it, then the client's to read it, one after the other. Once a
// client has a page of rows, the proxy therefore fetches the query's next
// page (the exact nextUri it just handed out, as Trino wrote it) while the
// client reads this one; the client's poll for it then gets the page the
// proxy holds, through the same rewrite and failure handling as a page
// read at the time (respond), so a page that fails upstream is still a
// well-formed failed page.
//
// A poll advances the query in Trino: it drops the previous page, and
// Trino answers a repeated poll of the page it served last from its own
// copy. So a page read ahead that is dropped, or whose fetch failed,
// costs nothing: the client's poll goes to Trino, which serves the same
// page again (or fails, as it would have). What Trino can no longer serve
// is the page before, which a client retries when its connection broke
// while reading it: the proxy keeps that page (as sent) beside the one
// read ahead and answers the retry from it.
//
// Memory: one page read ahead per query plus the page before, both
// counted against Options.PageReadAheadBytes for all queries together
// (no new read ahead starts past it); each is dropped when the client
// polls past it, cancels the query (DELETE), or does not come back within
// readAheadTTL.

// readAheadTTL is how long a page read ahead waits for its client.
const readAheadTTL = time.Minute

// readAhead holds the pages read ahead, by query id.
type readAhead struct {
	limit int64
	held  atomic.Int64
	mu    sync.Mutex
	m     map[string]*ahead
}

// ahead is one query's page read ahead, and the page the client had
// before it.
type ahead struct {
	cluster string
	target  string             // the nextUri's path, as Trino wrote it
	done    chan struct{}      // closed when resp and err are set
	resp    *fasthttp.Response // a page not rewritten ahead (see page)
	err     error
	ra      *readAhead
	timer   *time.Timer

	// A whole JSON page is rewritten as it is read ahead, for the
	// client's publicBase: page is the body to send, header and info
	// Trino's headers and what the page told.
	publicBase string
	page       *bytebufferpool.ByteBuffer
	header     fasthttp.ResponseHeader
	info       protocol.PageInfo
	// For a client that accepts gzip, the page is compressed ahead too
	// (gz; nil when it is not worth it).
	gzip bool
	gz   *bytebufferpool.ByteBuffer

	prevTarget string // the page the client had, for a retry of it
	prev       []byte // as sent, before any gzip; never changed once set
	prevType   []byte
	prevFreed  atomic.Bool
}

// freePrev gives back the memory counted for the page before (once; the
// bytes stay readable to a retry that has them).
func (e *ahead) freePrev() {
	if !e.prevFreed.Swap(true) {
		e.ra.held.Add(-int64(len(e.prev)))
	}
}

func newReadAhead(limit int) *readAhead {
	if limit <= 0 {
		return nil
	}
	return &readAhead{limit: int64(limit), m: map[string]*ahead{}}
}

// take returns what the proxy holds for a poll of target on cluster:
// the page read ahead (next), now the caller's, or the page before it
// (prev), for a retry; neither when it holds nothing for target.
func (ra *readAhead) take(cluster, target string) (next *ahead, prev *ahead) {
	id := protocol.StatementQueryID(target)
	if ra == nil || id == "" {
		return nil, nil
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	e := ra.m[id]
	switch {
	case e == nil || e.cluster != cluster:
		return nil, nil
	case e.target == target:
		delete(ra.m, id)
		e.timer.Stop()
		return e, nil
	case e.prevTarget == target:
		return nil, e
	}
	return nil, nil
}

// drop forgets what is held for query id (a cancel, or its time is up),
// releasing it once its fetch is over.
func (ra *readAhead) drop(id string, only *ahead) {
	if ra == nil || id == "" {
		return
	}
	ra.mu.Lock()
	e := ra.m[id]
	if e != nil && (only == nil || e == only) {
		delete(ra.m, id)
		e.timer.Stop()
	} else {
		e = nil
	}
	ra.mu.Unlock()
	if e != nil {
		go e.discard()
	}
}

// discard waits for the fetch and releases all e holds.
func (e *ahead) discard() {
	<-e.done
	if e.resp != nil {
		_ = e.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(e.resp)
		e.resp = nil
	}
	e.freePage()
	e.freePrev()
}

// freePage gives back the page rewritten ahead.
func (e *ahead) freePage() {
	if e.gz != nil {
		e.ra.held.Add(-int64(len(e.gz.B)))
		bytebufferpool.Put(e.gz)
		e.gz = nil
	}
	if e.page != nil {
		e.ra.held.Add(-int64(len(e.page.B)))
		bytebufferpool.Put(e.page)
		e.page = nil
	}
}

// wait waits for the fetch to end; then e.page (for publicBase) or
// e.resp holds the page, or neither when the fetch failed, and the
// caller then polls Trino itself. The caller owns what e holds: it sends
// e.page and calls freePage, or closes e.resp's body stream.
func (e *ahead) wait() {
	<-e.done
	e.freePrev()
}

// sendAhead answers the client's poll with the page rewritten ahead, and
// reads on ahead of it.
func (s *Server) sendAhead(ctx *fasthttp.RequestCtx, c *cluster, e *ahead) {
	defer e.freePage()
	ctx.Response.Reset()
	ctx.SetStatusCode(e.header.StatusCode())
	protocol.CopyResponseHeaders(&ctx.Response.Header, &e.header, false)
	protocol.TagTransaction(&ctx.Response.Header, c.name)
	s.pageDone(&e.info, c.name)
	// The page's bytes become the next read ahead's page before (a
	// retry's), never changed again: they go out without a copy, and the
	// buffer is not pooled again.
	page := e.page.B
	e.ra.held.Add(-int64(len(page)))
	e.page = nil
	s.readAheadOwned(ctx, c, &e.info, page)
	if e.gz != nil && s.gzipTo(ctx) {
		ctx.Response.Header.Set(fasthttp.HeaderContentEncoding, "gzip")
		ctx.Response.Header.Add(fasthttp.HeaderVary, "Accept-Encoding")
		ctx.SetBody(e.gz.B)
		return
	}
	if s.gzipTo(ctx) {
		s.writeBody(ctx, page)
		return
	}
	ctx.Response.SetBodyRaw(page)
}

// readAheadFrom starts reading ahead the page after the one just sent for
// the client's poll in ctx, when the page was whole and had rows and the
// budget allows. sent is the page as sent (before gzip), kept for a retry.
func (s *Server) readAheadFrom(ctx *fasthttp.RequestCtx, c *cluster, info *protocol.PageInfo, sent []byte) {
	if s.readAheadOK(ctx, info, sent) {
		s.readAheadOwned(ctx, c, info, append([]byte(nil), sent...))
	}
}

// readAheadOK reports whether to read ahead after the page sent.
func (s *Server) readAheadOK(ctx *fasthttp.RequestCtx, info *protocol.PageInfo, sent []byte) bool {
	ra := s.ahead
	if ra == nil || !ctx.IsGet() || !info.HasData || info.HasError || info.NextTarget == "" || info.ID == "" ||
		protocol.StatementQueryID(info.NextTarget) != info.ID {
		return false
	}
	if ra.held.Load()+int64(len(sent))+int64(s.opts.PageBufferBytes) > ra.limit {
		s.metrics.ReadAhead.WithLabelValues("full").Inc()
		return false
	}
	return true
}

// readAheadOwned is readAheadFrom with sent the caller's no more, kept
// as the page before without a copy.
func (s *Server) readAheadOwned(ctx *fasthttp.RequestCtx, c *cluster, info *protocol.PageInfo, sent []byte) {
	if sent == nil || !s.readAheadOK(ctx, info, sent) {
		return
	}
	ra := s.ahead
	e := &ahead{cluster: c.name, target: info.NextTarget, done: make(chan struct{}), ra: ra, publicBase: s.publicBase(ctx), gzip: s.gzipTo(ctx),
		prevTarget: string(ctx.Request.Header.RequestURI()), prev: sent,
		prevType: append([]byte(nil), ctx.Response.Header.ContentType()...)}
	if _, target, ok := protocol.SplitRouted(e.prevTarget); ok {
		e.prevTarget = target
	}
	ra.held.Add(int64(len(e.prev)))
	req := s.upstreamRequest(ctx, c, info.NextTarget, modeJSON)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.ResetBody()
	ra.mu.Lock()
	if old := ra.m[info.ID]; old != nil {
		old.timer.Stop()
		go old.discard()
	}
	ra.m[info.ID] = e
	id := info.ID
	e.timer = time.AfterFunc(readAheadTTL, func() {
		ra.drop(id, e)
		s.metrics.ReadAhead.WithLabelValues("expired").Inc()
	})
	ra.mu.Unlock()
	go s.fetchAhead(c, req, e)
}

// fetchAhead polls Trino for e's page and reads it (up to the page
// buffer; a larger page keeps its upstream connection and streams on).
func (s *Server) fetchAhead(c *cluster, req *fasthttp.Request, e *ahead) {
	defer fasthttp.ReleaseRequest(req)
	defer close(e.done)
	up := fasthttp.AcquireResponse()
	if err := c.client.Do(req, up); err != nil {
		fasthttp.ReleaseResponse(up)
		e.err = err
		s.metrics.ReadAhead.WithLabelValues("failed").Inc()
		return
	}
	buf := bytebufferpool.Get()
	stream := up.BodyStream()
	var err error
	if stream != nil {
		_, err = io.CopyN(buf, stream, int64(s.opts.PageBufferBytes)+1)
	} else {
		_, _ = buf.Write(up.Body())
	}
	if err != nil && err != io.EOF {
		bytebufferpool.Put(buf)
		_ = up.CloseBodyStream()
		fasthttp.ReleaseResponse(up)
		e.err = err
		s.metrics.ReadAhead.WithLabelValues("failed").Inc()
		return
	}
	if err == io.EOF && up.StatusCode() == fasthttp.StatusOK && isJSON(up.Header.ContentType()) && len(up.Header.ContentEncoding()) == 0 {
		// Whole: rewrite it now, off the client's path.
		page := bytebufferpool.Get()
		if need := len(buf.B) + 8<<10; cap(page.B) < need {
			page.B = make([]byte, 0, need) // routed URIs are longer than Trino's by a token each
		}
		m := &protocol.URIMapper{Signer: s.signer, Cluster: c.name, UpstreamBase: c.base, PublicBase: e.publicBase}
		_, rerr := page.ReadFrom(protocol.NewJSONRewriter(bytes.NewReader(buf.B), nil, m, &e.info))
		bytebufferpool.Put(buf)
		_ = up.CloseBodyStream()
		up.Header.CopyTo(&e.header)
		fasthttp.ReleaseResponse(up)
		if rerr != nil {
			bytebufferpool.Put(page)
			e.err = rerr
			s.metrics.ReadAhead.WithLabelValues("failed").Inc()
			return
		}
		e.ra.held.Add(int64(len(page.B)))
		e.page = page
		if e.gzip && len(page.B) >= protocol.GzipMinBytes {
			gz := bytebufferpool.Get()
			zw := protocol.GzipWriter(gz, s.opts.GzipLevel)
			_, _ = zw.Write(page.B)
			_ = zw.Close()
			protocol.PutGzipWriter(zw, s.opts.GzipLevel)
			e.ra.held.Add(int64(len(gz.B)))
			e.gz = gz
		}
		s.metrics.ReadAhead.WithLabelValues("fetched").Inc()
		return
	}
	n := int64(len(buf.B))
	e.ra.held.Add(n)
	h := &heldBody{ra: e.ra, buf: buf, n: n}
	resp := fasthttp.AcquireResponse()
	up.Header.CopyTo(&resp.Header)
	if err == io.EOF || stream == nil {
		_ = up.CloseBodyStream() // read to the end: the connection goes back to the pool
		fasthttp.ReleaseResponse(up)
		h.r = &h.rd
		h.rd.Reset(buf.B)
		resp.SetBodyStream(h, len(buf.B))
	} else {
		h.up = up
		h.rd.Reset(buf.B)
		h.r = io.MultiReader(&h.rd, stream)
		resp.SetBodyStream(h, -1)
	}
	e.resp = resp
	s.metrics.ReadAhead.WithLabelValues("fetched").Inc()
}

// heldBody is the body of a page read ahead: the bytes read, then (for a
// page over the buffer) the rest of its upstream response. Close gives
// back the memory and the upstream response.
type heldBody struct {
	r   io.Reader
	rd  bytes.Reader
	buf *bytebufferpool.ByteBuffer
	up  *fasthttp.Response
	ra  *readAhead
	n   int64
}

func (h *heldBody) Read(p []byte) (int, error) { return h.r.Read(p) }

func (h *heldBody) Close() error {
	if h.buf == nil {
		return nil
	}
	var err error
	if h.up != nil {
		err = h.up.CloseBodyStream()
		fasthttp.ReleaseResponse(h.up)
		h.up = nil
	}
	bytebufferpool.Put(h.buf)
	h.buf = nil
	h.ra.held.Add(-h.n)
	return err
}
