package frontdoor

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
)

// The client connection's edge: what fasthttp does before a request reaches
// the Handler (parse errors, body limits, logging) made safe and prompt.

// ErrBareLF: a request header block ended by a bare LF blank line.
var ErrBareLF = errors.New("proxy: request header lines must end in CRLF (RFC 9112 §2.2)")

// GuardListener wraps the client listener's connections in guardConn.
type GuardListener struct{ net.Listener }

func (l GuardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	g := &guardConn{Conn: c}
	if tc, ok := c.(*tls.Conn); ok {
		return &guardTLSConn{guardConn: g, tc: tc}, nil
	}
	return g, nil
}

// guardConn fails a request whose header block is terminated by a bare LF
// blank line ("\n\n" before any "\r\n\r\n"). fasthttp, to keep framing
// unambiguous (a peer that accepts only CRLFCRLF would see another
// request), waits for a CRLFCRLF that such a client never sends, holding
// the connection until the read timeout (minutes) without an answer. The
// scan covers only the header block: it starts on a new connection and
// after each response (a Write that is not a 100 Continue) and stops at the
// first CRLFCRLF, so "\n\n" in SQL text in a body is never looked at. (A
// pipelined request sent before the previous response is not scanned: it
// gets fasthttp's own behaviour.) The error reaches the client as 400
// through Server.errorHandler.
type guardConn struct {
	net.Conn
	inBody bool
	tail   [3]byte // the last bytes of the header block read so far
	nTail  int
}

func (c *guardConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 && !c.inBody {
		if c.scan(p[:n]) {
			return 0, ErrBareLF
		}
	}
	return n, err
}

// scan looks at a chunk of the header block; true means a bare-LF blank
// line came before any CRLFCRLF. It scans b in place (no copy per read):
// only a match that straddles the previous chunk is looked for in a small
// joint of the kept tail and b's first bytes.
func (c *guardConn) scan(b []byte) bool {
	const none = int(^uint(0) >> 1)
	crlf, lf := none, none
	if i := bytes.Index(b, crlfcrlf); i >= 0 {
		crlf = i
	}
	if i := bytes.Index(b, lflf); i >= 0 {
		lf = i
	}
	if c.nTail > 0 {
		var j [6]byte
		n := copy(j[:], c.tail[:c.nTail])
		n += copy(j[n:], b[:min(len(b), 3)])
		// Offsets relative to b: negative ones start in the tail.
		if i := bytes.Index(j[:n], crlfcrlf); i >= 0 {
			crlf = min(crlf, i-c.nTail)
		}
		if i := bytes.Index(j[:n], lflf); i >= 0 {
			lf = min(lf, i-c.nTail)
		}
	}
	switch {
	case lf != none && lf < crlf:
		return true
	case crlf != none:
		c.inBody, c.nTail = true, 0
		return false
	}
	// Keep the last 3 bytes of the block read so far.
	if len(b) >= len(c.tail) {
		c.nTail = copy(c.tail[:], b[len(b)-len(c.tail):])
	} else {
		var j [6]byte
		n := copy(j[:], c.tail[:c.nTail])
		n += copy(j[n:], b)
		c.nTail = copy(c.tail[:], j[max(0, n-len(c.tail)):n])
	}
	return false
}

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

func (c *guardConn) Write(p []byte) (int, error) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 100 ")) {
		c.inBody, c.nTail = false, 0 // a response: the next bytes are a new request
	}
	return c.Conn.Write(p)
}

// guardTLSConn keeps the TLS methods visible, so that fasthttp's
// RequestCtx.IsTLS still sees a TLS connection.
type guardTLSConn struct {
	*guardConn
	tc *tls.Conn
}

func (c *guardTLSConn) Handshake() error                     { return c.tc.Handshake() }
func (c *guardTLSConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// FastHTTPLogger receives fasthttp's own messages (connection errors) at
// debug level. fasthttp is told not to quote request bytes in them
// (Server.SecureErrorLogMessage); as a second line of defence every
// message is redacted: credential headers and route tokens (bearer
// capabilities) never reach the log.
type FastHTTPLogger struct{ L *slog.Logger }

func (f FastHTTPLogger) Printf(format string, args ...any) {
	f.L.Debug(RedactLog(fmt.Sprintf(format, args...)))
}

var (
	credHeaderRE = regexp.MustCompile(`(?i)((?:proxy-)?authorization|cookie|set-cookie|x-trino-extra-credential|x-trino-prepared-statement)(\s*:\s*|\\?"?\s*:\s*)[^\r\n\\"]*`)
	routedRE     = regexp.MustCompile(`/r/[A-Za-z0-9_~.\-]+`)
	slugRE       = regexp.MustCompile(`(/v1/statement/(?:queued|executing)(?:/partialCancel)?/[^/\s"\\]+)/[^\s"\\]*`)
	segmentRE    = regexp.MustCompile(`(/v1/spooled/(?:download|ack))/[^\s"\\]*`)
)

// RedactLog removes credentials, route tokens and slugs from a log line.
func RedactLog(m string) string {
	m = credHeaderRE.ReplaceAllString(m, "${1}${2}[redacted]")
	m = routedRE.ReplaceAllString(m, "/r/[redacted]")
	m = slugRE.ReplaceAllString(m, "${1}/…")
	return segmentRE.ReplaceAllString(m, "${1}/…")
}
