package protocol

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The statement endpoints answer with QueryResults JSON whose URIs point at
// the cluster. JSONRewriter streams such a body to the client, replacing those
// URIs with routed proxy URIs, without ever holding the whole page: it is a
// byte-level JSON scanner that tracks only the key path of the value it is
// in. Rewritten values are the top-level nextUri, partialCancelUri and
// infoUri, and the uri/ackUri of spooled segments (data.segments[*]) when
// they point at the coordinator's /v1/spooled/ endpoints; pre-signed storage
// URIs (any other host) are never touched. Row data passes through unchanged
// even when it holds strings that look like URIs, because only those key
// paths are rewritten.
//
// While streaming it also records a PageInfo (query id, whether a nextUri
// was present, state, error name and the numeric stats), which the proxy
// uses for its query map and, on the last page, for final statistics.

// PageInfo is what the proxy learns from one QueryResults page.
type PageInfo struct {
	ID         string
	HasNextURI bool
	// NextTarget is the path (and query) of the nextUri as Trino wrote it,
	// when it points at the cluster itself: what the client polls next.
	NextTarget string
	// HasData says the page carried a data field (rows, or spooled
	// segments): the query is handing out its results.
	HasData    bool
	HasError   bool
	ErrorName  string
	ErrorType  string
	State      string
	UpdateType string
	Stats      PageStats
}

// PageStats are the numeric fields of StatementStats the proxy records.
type PageStats struct {
	CPUTimeMillis      int64
	WallTimeMillis     int64
	ElapsedTimeMillis  int64
	QueuedTimeMillis   int64
	PlanningTimeMillis int64
	AnalysisTimeMillis int64
	PeakMemoryBytes    int64
	ProcessedRows      int64
	ProcessedBytes     int64
	PhysicalInputBytes int64
	SpilledBytes       int64
	TotalSplits        int64
	CompletedSplits    int64
}

// RolledUp reports whether a final page's figures include its tasks': a
// loaded Trino can send FINISHED before the tasks' statistics are rolled
// up, with 0 ms of CPU and of wall time and 0 rows processed after splits
// ran. Such a page must not teach the history a free query. (A tiny query
// can take 0 ms of CPU and of wall time, but it processes its rows.)
func (s *PageStats) RolledUp() bool {
	return s.CPUTimeMillis > 0 || s.WallTimeMillis > 0 || s.ProcessedRows > 0 ||
		(s.TotalSplits == 0 && s.CompletedSplits == 0)
}

func (s *PageStats) set(key string, v int64) {
	switch key {
	case "cpuTimeMillis":
		s.CPUTimeMillis = v
	case "wallTimeMillis":
		s.WallTimeMillis = v
	case "elapsedTimeMillis":
		s.ElapsedTimeMillis = v
	case "queuedTimeMillis":
		s.QueuedTimeMillis = v
	case "planningTimeMillis":
		s.PlanningTimeMillis = v
	case "analysisTimeMillis":
		s.AnalysisTimeMillis = v
	case "peakMemoryBytes":
		s.PeakMemoryBytes = v
	case "processedRows":
		s.ProcessedRows = v
	case "processedBytes":
		s.ProcessedBytes = v
	case "physicalInputBytes":
		s.PhysicalInputBytes = v
	case "spilledBytes":
		s.SpilledBytes = v
	case "totalSplits":
		s.TotalSplits = v
	case "completedSplits":
		s.CompletedSplits = v
	}
}

// URIMapper turns an upstream URI into the URI handed to the client.
type URIMapper struct {
	Signer       *Signer
	Cluster      string
	UpstreamBase string // scheme://host[:port] of the cluster, lower case
	PublicBase   string // scheme://host[:port] of the proxy as clients see it
}

// SplitBase splits an absolute http(s) URI into scheme://host[:port] and the
// rest (path and query). ok is false for anything else.
func SplitBase(u string) (base, target string, ok bool) {
	var rest string
	switch {
	case strings.HasPrefix(u, "http://"):
		rest = u[len("http://"):]
	case strings.HasPrefix(u, "https://"):
		rest = u[len("https://"):]
	default:
		return "", "", false
	}
	i := strings.IndexAny(rest, "/?#")
	if i < 0 {
		return u, "/", true
	}
	if rest[i] != '/' {
		return "", "", false
	}
	n := len(u) - len(rest) + i
	return u[:n], u[n:], true
}

// mapTopLevel rewrites nextUri, partialCancelUri and infoUri. nextUri and
// partialCancelUri are always coordinator URIs, so they are routed whatever
// host Trino wrote; infoUri only when it points at the cluster itself
// (query.info-url-template may point at an outside UI).
func (m *URIMapper) mapTopLevel(key, v string) (string, bool) {
	base, target, ok := SplitBase(v)
	if !ok {
		return "", false
	}
	if key == "infoUri" && !strings.EqualFold(base, m.UpstreamBase) {
		return "", false
	}
	return m.PublicBase + m.Signer.RoutedPath(m.Cluster, target), true
}

// mapSegment rewrites a spooled segment's uri/ackUri when it is a
// coordinator endpoint of this cluster; pre-signed storage URIs are left
// alone (their signature covers them).
func (m *URIMapper) mapSegment(v string) (string, bool) {
	base, target, ok := SplitBase(v)
	if !ok || !strings.EqualFold(base, m.UpstreamBase) || !strings.HasPrefix(target, "/v1/spooled/") {
		return "", false
	}
	return m.PublicBase + m.Signer.RoutedPath(m.Cluster, target), true
}

// Limits that keep the rewriter's memory bounded whatever the page holds.
const (
	maxKeyLen      = 32       // longer keys are never interesting
	maxCaptureLen  = 256      // captured ids, states, numbers
	maxURILen      = 16 << 10 // a longer "URI" is passed through unchanged
	maxDepth       = 4096     // deeper nesting is passed through untracked
	rewriteReadBuf = 32 << 10
)

type scanState uint8

const (
	stValue  scanState = iota // between tokens
	stString                  // inside a string
	stScalar                  // inside a number or literal
)

// strMode says what happens to the bytes of the current string.
type strMode uint8

const (
	strPass    strMode = iota // emit as read
	strKey                    // emit and capture as the current key
	strCapture                // emit and capture as an observed value
	strRewrite                // hold back; emit the rewritten URI at the end
)

type frame struct {
	obj       bool
	expectKey bool
	keyLen    uint8 // 255: key longer than maxKeyLen
	key       [maxKeyLen]byte
}

func (f *frame) keyIs(s string) bool {
	return f.keyLen != 255 && int(f.keyLen) == len(s) && string(f.key[:f.keyLen]) == s
}

func (f *frame) keyString() string {
	if f.keyLen == 255 {
		return ""
	}
	return string(f.key[:f.keyLen])
}

// JSONRewriter is an io.ReadCloser streaming src through the rewrite.
type JSONRewriter struct {
	src    io.Reader
	closer func() error
	m      *URIMapper
	info   *PageInfo

	in  []byte
	out []byte
	off int // read offset into out
	err error

	state     scanState
	esc       bool
	mode      strMode
	rewriteOf string // which key the held-back URI belongs to ("" = segment)
	buf       []byte // captured or held-back bytes
	overflow  bool
	capKey    string // what a strCapture/scalar capture is for
	scalarCap bool

	stack   []frame
	untrack int // nesting levels beyond maxDepth
	// skip is the bracket depth inside the top-level data array (rows:
	// nothing in them is rewritten or observed), 0 outside it: there the
	// scan jumps from one quote or bracket to the next.
	skip int
}

func NewJSONRewriter(src io.Reader, closer func() error, m *URIMapper, info *PageInfo) *JSONRewriter {
	return &JSONRewriter{src: src, closer: closer, m: m, info: info, in: make([]byte, rewriteReadBuf)}
}

// Read implements io.Reader.
func (r *JSONRewriter) Read(p []byte) (int, error) {
	for r.off == len(r.out) {
		if r.err != nil {
			if r.err == io.EOF {
				r.flushPending()
				if r.off < len(r.out) {
					break
				}
			}
			return 0, r.err
		}
		r.out, r.off = r.out[:0], 0
		n, err := r.src.Read(r.in)
		r.feed(r.in[:n])
		if err != nil {
			r.err = err
		}
	}
	n := copy(p, r.out[r.off:])
	r.off += n
	return n, nil
}

// Close implements io.Closer; it releases the upstream response.
func (r *JSONRewriter) Close() error {
	if r.closer != nil {
		c := r.closer
		r.closer = nil
		return c()
	}
	return nil
}

// flushPending emits anything held back when the input ends mid-token.
func (r *JSONRewriter) flushPending() {
	if r.state == stString && r.mode == strRewrite {
		r.out = append(r.out, '"')
		r.out = append(r.out, r.buf...)
		r.mode = strPass
	}
	if r.state == stScalar {
		r.endScalar()
	}
}

func (r *JSONRewriter) top() *frame {
	if len(r.stack) == 0 {
		return nil
	}
	return &r.stack[len(r.stack)-1]
}

func (r *JSONRewriter) push(obj bool) {
	if r.untrack > 0 || len(r.stack) >= maxDepth {
		r.untrack++
		return
	}
	r.stack = append(r.stack, frame{obj: obj, expectKey: obj})
}

func (r *JSONRewriter) pop() {
	if r.untrack > 0 {
		r.untrack--
		return
	}
	if len(r.stack) > 0 {
		r.stack = r.stack[:len(r.stack)-1]
	}
}

// valueKind classifies the value starting now by its key path.
type valueKind uint8

const (
	vkNone valueKind = iota
	vkTopURI
	vkSegmentURI
	vkID
	vkNextURI
	vkError
	vkStatsField
	vkErrorField
	vkUpdateType
)

func (r *JSONRewriter) classify() valueKind {
	if r.untrack > 0 {
		return vkNone
	}
	d := len(r.stack)
	if d == 0 {
		return vkNone
	}
	t := &r.stack[d-1]
	if !t.obj {
		return vkNone
	}
	switch d {
	case 1:
		switch {
		case t.keyIs("nextUri"):
			return vkNextURI
		case t.keyIs("partialCancelUri"), t.keyIs("infoUri"):
			return vkTopURI
		case t.keyIs("id"):
			return vkID
		case t.keyIs("error"):
			return vkError
		case t.keyIs("updateType"):
			return vkUpdateType
		}
	case 2:
		switch {
		case r.stack[0].keyIs("stats"):
			return vkStatsField
		case r.stack[0].keyIs("error") && (t.keyIs("errorName") || t.keyIs("errorType")):
			return vkErrorField
		}
	case 4:
		if (t.keyIs("uri") || t.keyIs("ackUri")) && r.stack[0].keyIs("data") &&
			r.stack[1].obj && r.stack[1].keyIs("segments") && !r.stack[2].obj {
			return vkSegmentURI
		}
	}
	return vkNone
}

// feed scans one chunk of input, appending output to r.out.
func (r *JSONRewriter) feed(b []byte) {
	for i := 0; i < len(b); i++ {
		if r.skip > 0 && r.state == stValue {
			j := rowsStop(b[i:])
			if j < 0 {
				r.out = append(r.out, b[i:]...)
				return
			}
			r.out = append(r.out, b[i:i+j+1]...)
			i += j
			switch b[i] {
			case '"':
				r.state, r.esc, r.mode = stString, false, strPass
			case '[':
				r.skip++
			case ']':
				if r.skip--; r.skip == 0 {
					r.pop()
				}
			}
			continue
		}
		c := b[i]
		switch r.state {
		case stString:
			if r.mode == strPass && !r.esc {
				// Fast path: copy up to the next quote or backslash.
				j := stringEnd(b[i:])
				if j < 0 {
					r.out = append(r.out, b[i:]...)
					return
				}
				r.out = append(r.out, b[i:i+j]...)
				i += j
				c = b[i]
			}
			if r.esc {
				r.esc = false
				r.strByte(c)
				continue
			}
			switch c {
			case '\\':
				r.esc = true
				r.strByte(c)
			case '"':
				r.endString()
			default:
				r.strByte(c)
			}
		case stScalar:
			switch c {
			case ',', '}', ']', ':', ' ', '\t', '\r', '\n':
				r.endScalar()
				i-- // reprocess c as structure
			default:
				r.out = append(r.out, c)
				if r.scalarCap {
					r.capture(c)
				}
			}
		default:
			r.structural(c)
		}
	}
}

// stringEnd is the index of the first quote or backslash in b, or -1
// (two vectorized scans: bytes.IndexAny tests byte by byte).
func stringEnd(b []byte) int {
	j := bytes.IndexByte(b, '"')
	seg := b
	if j >= 0 {
		seg = b[:j]
	}
	if k := bytes.IndexByte(seg, '\\'); k >= 0 {
		return k
	}
	return j
}

// rowStops are the bytes that matter inside the rows of data.
var rowStops = [256]bool{'"': true, '[': true, ']': true}

// rowsStop is the index of the first quote or bracket in b, or -1.
func rowsStop(b []byte) int {
	for j, c := range b {
		if rowStops[c] {
			return j
		}
	}
	return -1
}

func (r *JSONRewriter) structural(c byte) {
	switch c {
	case ' ', '\t', '\r', '\n', ':':
		r.out = append(r.out, c)
	case ',':
		r.out = append(r.out, c)
		if t := r.top(); t != nil && r.untrack == 0 && t.obj {
			t.expectKey = true
		}
	case '{', '[':
		if r.classify() == vkError && c == '{' {
			r.info.HasError = true
		}
		rows := false
		if len(r.stack) == 1 && r.untrack == 0 && r.stack[0].obj && r.stack[0].keyIs("data") {
			r.info.HasData = true
			rows = c == '['
		}
		r.out = append(r.out, c)
		r.push(c == '{')
		if rows {
			r.skip = 1
		}
	case '}', ']':
		r.out = append(r.out, c)
		r.pop()
	case '"':
		r.state = stString
		r.esc = false
		r.buf = r.buf[:0]
		r.overflow = false
		r.mode = strPass
		if t := r.top(); t != nil && r.untrack == 0 && t.obj && t.expectKey {
			r.mode = strKey
			r.out = append(r.out, c)
			return
		}
		switch k := r.classify(); k {
		case vkNextURI:
			r.info.HasNextURI = true
			r.mode, r.rewriteOf = strRewrite, "nextUri"
		case vkTopURI:
			r.mode, r.rewriteOf = strRewrite, r.top().keyString()
		case vkSegmentURI:
			r.mode, r.rewriteOf = strRewrite, ""
		case vkID, vkStatsField, vkErrorField, vkUpdateType:
			r.mode, r.capKey = strCapture, r.top().keyString()
			if k == vkStatsField && r.capKey != "state" {
				r.mode = strPass
			}
		}
		if r.mode != strRewrite {
			r.out = append(r.out, c)
		}
	default:
		r.state = stScalar
		r.scalarCap = false
		if r.classify() == vkStatsField {
			r.scalarCap, r.capKey = true, r.top().keyString()
			r.buf, r.overflow = r.buf[:0], false
		}
		r.out = append(r.out, c)
		if r.scalarCap {
			r.capture(c)
		}
	}
}

func (r *JSONRewriter) capture(c byte) {
	if len(r.buf) >= maxCaptureLen {
		r.overflow = true
		return
	}
	r.buf = append(r.buf, c)
}

func (r *JSONRewriter) strByte(c byte) {
	switch r.mode {
	case strPass:
		r.out = append(r.out, c)
	case strKey, strCapture:
		r.out = append(r.out, c)
		if len(r.buf) < maxCaptureLen {
			r.buf = append(r.buf, c)
		} else {
			r.overflow = true
		}
	case strRewrite:
		if len(r.buf) >= maxURILen {
			// Not a URI we handle: give up and pass the value through.
			r.out = append(r.out, '"')
			r.out = append(r.out, r.buf...)
			r.out = append(r.out, c)
			r.mode = strPass
			return
		}
		r.buf = append(r.buf, c)
	}
}

func (r *JSONRewriter) endString() {
	r.state = stString // for clarity; reset below
	switch r.mode {
	case strKey:
		t := r.top()
		key := r.buf
		if !r.overflow && bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(r.unescape(key)) // rare: Trino never escapes keys
		}
		if len(key) > maxKeyLen || r.overflow {
			t.keyLen = 255
		} else {
			t.keyLen = uint8(copy(t.key[:], key))
		}
		t.expectKey = false
		r.out = append(r.out, '"')
	case strCapture:
		r.out = append(r.out, '"')
		if !r.overflow {
			r.observeString(r.capKey, r.unescape(r.buf))
		}
	case strRewrite:
		v := r.unescape(r.buf)
		var nv string
		var ok bool
		if r.rewriteOf == "" {
			nv, ok = r.m.mapSegment(v)
		} else {
			nv, ok = r.m.mapTopLevel(r.rewriteOf, v)
			if base, target, isURI := SplitBase(v); ok && isURI && r.rewriteOf == "nextUri" && strings.EqualFold(base, r.m.UpstreamBase) {
				r.info.NextTarget = target
			}
		}
		r.out = append(r.out, '"')
		if ok {
			r.out = appendJSONString(r.out, nv)
		} else {
			r.out = append(r.out, r.buf...)
		}
		r.out = append(r.out, '"')
	default:
		r.out = append(r.out, '"')
	}
	r.state = stValue
	r.mode = strPass
}

func (r *JSONRewriter) endScalar() {
	r.state = stValue
	if r.scalarCap && !r.overflow {
		if v, err := strconv.ParseInt(string(r.buf), 10, 64); err == nil {
			r.info.Stats.set(r.capKey, v)
		} else if f, err := strconv.ParseFloat(string(r.buf), 64); err == nil {
			r.info.Stats.set(r.capKey, int64(f))
		}
	}
	r.scalarCap = false
}

func (r *JSONRewriter) observeString(key, v string) {
	d := len(r.stack)
	switch {
	case d == 1 && key == "id":
		r.info.ID = v
	case d == 1 && key == "updateType":
		r.info.UpdateType = v
	case d == 2 && key == "state":
		r.info.State = v
	case d == 2 && key == "errorName":
		r.info.ErrorName = v
	case d == 2 && key == "errorType":
		r.info.ErrorType = v
	}
}

// unescape decodes the raw bytes of a JSON string (without quotes) as a
// client's JSON decoder does: escapes resolved, and each byte that is not
// valid UTF-8 replaced by U+FFFD (encoding/json's rule).
// A rewritten URI is signed over this decoded form, because it is what a
// client sends back, and written out as valid UTF-8 (Trino never writes
// such bytes; FuzzRewriteURIs checks the two agree).
func (r *JSONRewriter) unescape(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw)
	}
	var s string
	q := make([]byte, 0, len(raw)+2)
	q = append(append(append(q, '"'), raw...), '"')
	if err := json.Unmarshal(q, &s); err != nil {
		return string(raw)
	}
	return s
}

// appendJSONString appends s escaped for use inside JSON quotes.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20:
			dst = append(dst, `\u00`...)
			dst = append(dst, "0123456789abcdef"[c>>4], "0123456789abcdef"[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return dst
}
