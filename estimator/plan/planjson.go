package plan

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// planDecoder is a single-pass decoder for Trino's rendered plan JSON
// (JsonRenderedNode trees). It builds PlanNodes directly instead of going
// through reflection, and it slices every string that needs no unescaping
// out of one copy of the input, so a plan costs a handful of allocations per
// node. It accepts any JSON value where Trino writes a string (non-string
// values are kept as their JSON text) and tolerates unknown keys.
type planDecoder struct {
	src   string // the whole input, copied once; strings are sliced out of it
	raw   []byte // the caller's input, the same bytes, scanned a word at a time; never written
	pos   int
	count int // nodes decoded so far
	max   int // node limit
	lean  bool
	depth int
	frag  string

	// Slabs: a plan's nodes, child lists and estimates are carved out of a
	// few chunks instead of one allocation each.
	nodes slab[PlanNode]
	kids  slab[*PlanNode]
	ests  slab[Estimate]
	// Scratch reused across nodes: the children read so far (a stack, as
	// children nest) and one node's estimates.
	kidStack []*PlanNode
	estBuf   []Estimate
}

// newPlanDecoder decodes raw, whose bytes src holds as a string (the same
// bytes: strings are sliced out of src, raw is scanned a word at a time).
func newPlanDecoder(src string, raw []byte, lim Limits) *planDecoder {
	return &planDecoder{src: src, raw: raw, max: lim.MaxNodes, lean: lim.Lean}
}

// slab hands out slices carved from chunks that grow from 16 to 1,024
// elements. The slices have no spare capacity, so an append reallocates
// instead of writing into a neighbour.
type slab[T any] struct {
	free []T
	next int
}

func (s *slab[T]) take(n int) []T {
	if n > len(s.free) {
		size := max(s.next, 16, n)
		s.next = min(2*size, 1024)
		s.free = make([]T, size)
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}

// keep copies src into the slab (nil when empty).
func (s *slab[T]) keep(src []T) []T {
	if len(src) == 0 {
		return nil
	}
	out := s.take(len(src))
	copy(out, src)
	return out
}

// maxPlanDepth bounds JSON nesting (encoding/json's own limit is 10,000).
const maxPlanDepth = 10_000

func (d *planDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrBadPlan, fmt.Sprintf(format, args...), d.pos)
}

var jsonSpace = [256]bool{' ': true, '\n': true, '\t': true, '\r': true}

// Word-at-a-time scanning (SWAR): eight input bytes as one little-endian
// word, bytes of interest flagged in their top bit.
const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// lessThan flags the bytes of v below c (c ≤ 0x80). Bytes above the first
// flagged one may be flagged wrongly (borrows); the first is exact, and only
// the first is used.
func lessThan(v uint64, c byte) uint64 { return (v - uint64(c)*lsb) &^ v & msb }

// equalTo flags the bytes of v equal to c, with the same caveat.
func equalTo(v uint64, c byte) uint64 { return lessThan(v^(uint64(c)*lsb), 1) }

// ws skips white space. Trino indents its plan JSON by two spaces a level,
// so deep plans are mostly runs of spaces, skipped eight bytes at a time.
func (d *planDecoder) ws() {
	i, s := d.pos, d.raw
	for i < len(s) && jsonSpace[s[i]] {
		i++
		for i+8 <= len(s) {
			if x := binary.LittleEndian.Uint64(s[i:]) ^ ' '*lsb; x != 0 {
				i += bits.TrailingZeros64(x) / 8
				break
			}
			i += 8
		}
	}
	d.pos = i
}

// peek returns the next non-space byte (0 at the end).
func (d *planDecoder) peek() byte {
	d.ws()
	if d.pos < len(d.src) {
		return d.src[d.pos]
	}
	return 0
}

// atEnd reports whether only white space is left (peek's 0 is also a NUL byte).
func (d *planDecoder) atEnd() bool {
	d.ws()
	return d.pos >= len(d.src)
}

func (d *planDecoder) expect(c byte) error {
	if d.peek() != c {
		if d.pos >= len(d.src) {
			return d.errorf("unexpected end of input, want %q", c)
		}
		return d.errorf("unexpected %q, want %q", d.src[d.pos], c)
	}
	d.pos++
	return nil
}

func (d *planDecoder) enter() error {
	d.depth++
	if d.depth > maxPlanDepth {
		return d.errorf("nested deeper than %d", maxPlanDepth)
	}
	return nil
}

// object calls f for every key of the object at pos; f must consume the value.
func (d *planDecoder) object(f func(key string) error) error {
	return d.seq('{', '}', func() error {
		if d.peek() != '"' {
			return d.errorf("object key is not a string")
		}
		key, err := d.str()
		if err != nil {
			return err
		}
		if err := d.expect(':'); err != nil {
			return err
		}
		return f(key)
	})
}

// array calls f for every element of the array at pos; f must consume it.
func (d *planDecoder) array(f func() error) error { return d.seq('[', ']', f) }

// seq reads open, elements separated by ',' (each consumed by elem), close.
func (d *planDecoder) seq(open, close byte, elem func() error) error {
	if err := d.expect(open); err != nil {
		return err
	}
	if err := d.enter(); err != nil {
		return err
	}
	if d.peek() == close {
		d.pos++
		d.depth--
		return nil
	}
	for {
		if err := elem(); err != nil {
			return err
		}
		switch d.peek() {
		case ',':
			d.pos++
		case close:
			d.pos++
			d.depth--
			return nil
		default:
			return d.errorf("expected ',' or %q", close)
		}
	}
}

// strStop marks the bytes that end the plain part of a JSON string: the
// closing quote, escapes, control characters and non-ASCII bytes.
var strStop = func() (t [256]bool) {
	for c := range t {
		t[c] = c == '"' || c == '\\' || c < 0x20 || c >= utf8.RuneSelf
	}
	return t
}()

// str reads a JSON string at pos. Strings without escapes or invalid UTF-8
// are substrings of src (no allocation).
func (d *planDecoder) str() (string, error) {
	start := d.pos + 1 // after the opening quote
	i := d.plainEnd(start)
	if i < len(d.raw) && d.raw[i] == '"' {
		d.pos = i + 1
		return d.src[start:i], nil
	}
	b, err := d.unescape(start, i, 0)
	switch {
	case err != nil:
		return "", err
	case b == nil:
		return d.src[start : d.pos-1], nil
	}
	return string(b), nil
}

// bytes reads a JSON string at pos as a new byte slice. For a string that
// is most of the input (an escaped document): its buffer is sized to the
// rest of the input at once.
func (d *planDecoder) bytes() ([]byte, error) {
	start := d.pos + 1
	b, err := d.unescape(start, start, len(d.raw)-start)
	if b == nil && err == nil {
		b = []byte(d.src[start : d.pos-1])
	}
	return b, err
}

// plainEnd returns the index of the first byte at or after i that ends the
// plain part of a string (strStop), or len(raw).
func (d *planDecoder) plainEnd(i int) int {
	s := d.raw
	for i+8 <= len(s) {
		v := binary.LittleEndian.Uint64(s[i:])
		if m := lessThan(v, 0x20) | equalTo(v, '"') | equalTo(v, '\\') | v&msb; m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
		i += 8
	}
	for i < len(s) && !strStop[s[i]] {
		i++
	}
	return i
}

// unescape decodes the string whose content starts at start (the bytes
// before i are known plain) and leaves pos after its closing quote. It
// returns nil when the content needs no decoding (no escapes, valid UTF-8:
// the caller slices src). Invalid UTF-8 becomes U+FFFD, as encoding/json
// does. sizeHint is the capacity of the buffer, if one is needed (0: sized
// from the prefix and grown as needed).
func (d *planDecoder) unescape(start, i, sizeHint int) ([]byte, error) {
	var b []byte
	// buffer starts the decoded copy with the plain prefix before i.
	buffer := func(i int) []byte {
		return append(make([]byte, 0, max(sizeHint, 2*(i-start)+64)), d.src[start:i]...)
	}
	for {
		j := d.plainEnd(i)
		if b != nil {
			b = append(b, d.raw[i:j]...)
		}
		i = j
		if i >= len(d.src) {
			d.pos = i
			return nil, d.errorf("unterminated string")
		}
		c := d.src[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return b, nil
		case c < 0x20:
			d.pos = i
			return nil, d.errorf("control character in string")
		case c == '\\':
			if b == nil {
				b = buffer(i)
			}
			if i+1 >= len(d.src) {
				d.pos = i
				return nil, d.errorf("unterminated string")
			}
			i++
			switch e := d.src[i]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, n := d.hex4(i + 1)
				if n < 0 {
					d.pos = i
					return nil, d.errorf("bad \\u escape")
				}
				i += 4
				if utf16.IsSurrogate(r) {
					r2, n2 := rune(-1), -1
					if i+6 < len(d.src) && d.src[i+1] == '\\' && d.src[i+2] == 'u' {
						r2, n2 = d.hex4(i + 3)
					}
					if dec := utf16.DecodeRune(r, r2); n2 >= 0 && dec != utf8.RuneError {
						r = dec
						i += 6
					} else {
						r = utf8.RuneError
					}
				}
				b = utf8.AppendRune(b, r)
			default:
				d.pos = i
				return nil, d.errorf("bad escape \\%c", e)
			}
			i++
		default: // non-ASCII
			r, size := utf8.DecodeRuneInString(d.src[i:])
			if r == utf8.RuneError && size == 1 {
				if b == nil {
					b = buffer(i)
				}
				b = utf8.AppendRune(b, utf8.RuneError)
			} else if b != nil {
				b = append(b, d.src[i:i+size]...)
			}
			i += size
		}
	}
}

func (d *planDecoder) hex4(i int) (rune, int) {
	if i+4 > len(d.src) {
		return 0, -1
	}
	v, err := strconv.ParseUint(d.src[i:i+4], 16, 32)
	if err != nil {
		return 0, -1
	}
	return rune(v), 4
}

// skip consumes any JSON value and returns its raw text.
func (d *planDecoder) skip() (string, error) {
	c := d.peek()
	start := d.pos
	var err error
	switch c {
	case '"':
		_, err = d.str()
	case '{':
		err = d.object(func(string) error { _, err := d.skip(); return err })
	case '[':
		err = d.array(func() error { _, err := d.skip(); return err })
	case 't', 'f', 'n':
		for _, lit := range [...]string{"true", "false", "null"} {
			if strings.HasPrefix(d.src[d.pos:], lit) {
				d.pos += len(lit)
				return lit, nil
			}
		}
		return "", d.errorf("invalid literal")
	default:
		err = d.number()
	}
	if err != nil {
		return "", err
	}
	return d.src[start:d.pos], nil
}

// number consumes a JSON number, checking its grammar.
func (d *planDecoder) number() error {
	s, i := d.src, d.pos
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return d.errorf("invalid value")
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			d.pos = i
			return d.errorf("invalid number")
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			d.pos = i
			return d.errorf("invalid number")
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	d.pos = i
	return nil
}

// text reads any value as a string: a JSON string's value, "" for null, and
// the raw JSON text of anything else.
func (d *planDecoder) text() (string, error) {
	if d.peek() == '"' {
		return d.str()
	}
	raw, err := d.skip()
	if raw == "null" {
		raw = ""
	}
	return raw, err
}

// float reads an estimate: a number, Jackson's "NaN"/"Infinity" strings, or
// null / anything unparseable as NaN (unknown).
func (d *planDecoder) float() (float64, error) {
	var raw string
	var err error
	if d.peek() == '"' {
		raw, err = d.str()
	} else {
		raw, err = d.skip()
	}
	if err != nil {
		return 0, err
	}
	if v, ok := exactDecimal(raw); ok {
		return v, nil
	}
	v, perr := strconv.ParseFloat(raw, 64) // accepts NaN, Infinity, -Infinity
	if perr != nil {
		return math.NaN(), nil
	}
	return v, nil
}

// pow10 holds the powers of ten a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10,
	1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// exactDecimal parses the common estimate shape [-]digits[.digits] with at
// most 15 digits. The value is then an integer below 2^53 over an exact power
// of ten, so one correctly rounded division gives exactly what
// strconv.ParseFloat gives (Clinger's fast path) at a fraction of its cost.
// Anything else (exponents, more digits, NaN) reports false.
func exactDecimal(s string) (float64, bool) {
	neg := len(s) > 0 && s[0] == '-'
	if neg {
		s = s[1:]
	}
	var m uint64
	digits, frac, dot := 0, 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			m = m*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			return 0, false
		}
	}
	if digits == 0 || digits > 15 {
		return 0, false
	}
	v := float64(m) / pow10[frac]
	if neg {
		v = -v
	}
	return v, true
}

func (d *planDecoder) node() (*PlanNode, error) {
	if d.peek() != '{' {
		return nil, d.errorf("plan node is not an object")
	}
	d.count++
	if d.count > d.max {
		return nil, fmt.Errorf("%w: more than %d nodes", ErrPlanTooLarge, d.max)
	}
	n := &d.nodes.take(1)[0]
	n.Fragment = d.frag
	nameSeen := false
	var px prestoNode // PrestoDB's keys (presto.go)
	err := d.object(func(key string) error {
		if d.lean && (key == "outputs" || key == "details" && d.peek() != '"') {
			_, err := d.skip() // checked, not kept
			return err
		}
		var err error
		switch key {
		case "id":
			n.ID, err = d.text()
		case "name":
			if d.peek() != '"' {
				if raw, err := d.skip(); err != nil || raw != "null" {
					return d.errorf("node name is not a string")
				}
				return nil
			}
			n.Name, err = d.str()
			nameSeen = true
		case "descriptor":
			if d.peek() == 'n' {
				_, err = d.skip()
				return err
			}
			err = d.object(func(k string) error {
				if d.lean && !leanDescriptorKey(k) {
					_, err := d.skip()
					return err
				}
				v, err := d.text()
				if n.Descriptor == nil {
					n.Descriptor = map[string]string{}
				}
				n.Descriptor[k] = v
				return err
			})
		case "outputs":
			err = d.list(func() error {
				s, err := d.symbol()
				n.Outputs = append(n.Outputs, s)
				return err
			})
		case "details":
			if d.peek() == '"' { // PrestoDB: one newline-joined string
				if d.lean { // only a join's distribution is kept: sliced from the raw text, no unescaping
					var raw string
					raw, err = d.skip()
					px.details = leanDetails(raw)
					return err
				}
				px.details, err = d.str()
				return err
			}
			err = d.list(func() error {
				s, err := d.text()
				n.Details = append(n.Details, s)
				return err
			})
		case "estimates":
			d.estBuf = d.estBuf[:0]
			err = d.list(func() error {
				e, err := d.estimate()
				d.estBuf = append(d.estBuf, e)
				return err
			})
			n.Estimates = d.ests.keep(d.estBuf) // a repeated key replaces, as in encoding/json
		case "children":
			base := len(d.kidStack)
			err = d.list(func() error {
				c, err := d.node()
				if c != nil {
					d.kidStack = append(d.kidStack, c)
				}
				return err
			})
			n.Children = d.kids.keep(d.kidStack[base:])
			d.kidStack = d.kidStack[:base]
		case "identifier": // PrestoDB
			px.seen = true
			px.ident, err = d.text()
		case "remoteSources": // PrestoDB
			px.seen = true
			px.sources = px.sources[:0] // a repeated key replaces
			err = d.list(func() error {
				s, err := d.text()
				px.sources = append(px.sources, s)
				return err
			})
		default:
			_, err = d.skip()
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if !nameSeen || n.Name == "" {
		return nil, fmt.Errorf("%w: node %s has no name", ErrBadPlan, n.ID)
	}
	if px.seen {
		px.apply(n, d.lean)
	} else if px.details != "" && !d.lean { // a string of details without PrestoDB's other keys
		n.Details = append(n.Details, px.details)
	}
	return n, nil
}

// list reads an array (null: empty).
func (d *planDecoder) list(f func() error) error {
	if d.peek() == 'n' {
		_, err := d.skip()
		return err
	}
	return d.array(f)
}

// symbol reads an output symbol: {"type","name"} (Trino ≥ 445),
// {"symbol","type"} (older), a bare string, or anything else as its text.
func (d *planDecoder) symbol() (Symbol, error) {
	if d.peek() != '{' {
		s, err := d.text()
		return Symbol{Name: s}, err
	}
	var s Symbol
	var sym string
	err := d.object(func(key string) error {
		var err error
		switch key {
		case "name":
			s.Name, err = d.text()
		case "symbol":
			sym, err = d.text()
		case "type":
			s.Type, err = d.text()
		default:
			_, err = d.skip()
		}
		return err
	})
	if s.Name == "" {
		s.Name = sym
	}
	return s, err
}

func (d *planDecoder) estimate() (Estimate, error) {
	nan := math.NaN()
	e := Estimate{nan, nan, nan, nan, nan}
	if d.peek() != '{' {
		raw, err := d.skip()
		if err == nil && raw != "null" {
			err = d.errorf("estimate is not an object")
		}
		return e, err
	}
	err := d.object(func(key string) error {
		var dst *float64
		switch key {
		case "outputRowCount":
			dst = &e.OutputRowCount
		case "outputSizeInBytes", "totalSize": // Trino, PrestoDB
			dst = &e.OutputSizeInBytes
		case "cpuCost":
			dst = &e.CPUCost
		case "memoryCost":
			dst = &e.MemoryCost
		case "networkCost":
			dst = &e.NetworkCost
		default:
			_, err := d.skip()
			return err
		}
		v, err := d.float()
		*dst = v
		return err
	})
	return e, err
}

// decodePlanJSON decodes the distributed form (an object mapping fragment id
// to fragment root) or, when the top object has a "name" key, a single root
// node (TYPE LOGICAL in Trino ≤ 478), which is returned as root.
func decodePlanJSON(b []byte, lim Limits) (frags map[string]*PlanNode, root *PlanNode, count int, err error) {
	d := newPlanDecoder(string(b), b, lim)
	frags = map[string]*PlanNode{}
	err = d.object(func(key string) error {
		if key == "name" {
			return errSingleNode
		}
		d.frag = key
		n, err := d.fragment()
		if err != nil {
			return fmt.Errorf("%w (fragment %q)", err, key)
		}
		frags[key] = n
		return nil
	})
	if err == errSingleNode || (err != nil && hasTopKey(b, "name")) {
		d = newPlanDecoder(d.src, d.raw, lim)
		root, err = d.node()
		frags = nil
	}
	if err == nil {
		if !d.atEnd() {
			err = d.errorf("data after the plan")
		}
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return frags, root, d.count, nil
}

var errSingleNode = fmt.Errorf("single node")

// fragment reads a fragment's root: a plan node (Trino), or PrestoDB's
// {"plan": node} (told by its first key; other keys beside "plan" are
// checked as JSON and dropped).
func (d *planDecoder) fragment() (*PlanNode, error) {
	if !d.wrapped() {
		return d.node()
	}
	var n *PlanNode
	err := d.object(func(key string) error {
		if key == "plan" && n == nil {
			var err error
			n, err = d.node()
			return err
		}
		_, err := d.skip()
		return err
	})
	if err == nil && n == nil {
		err = fmt.Errorf("%w: fragment has no plan", ErrBadPlan)
	}
	return n, err
}

// wrapped reports whether the value at pos is an object whose first key is
// "plan" (PrestoDB's fragment); pos is left where it was.
func (d *planDecoder) wrapped() bool {
	start := d.pos
	defer func() { d.pos = start }()
	if d.peek() != '{' {
		return false
	}
	d.pos++
	if d.peek() != '"' {
		return false
	}
	k, err := d.str()
	return err == nil && k == "plan"
}

// hasTopKey reports whether the top-level object of b has the key.
func hasTopKey(b []byte, key string) bool {
	d := newPlanDecoder(string(b), b, Limits{})
	found := false
	_ = d.object(func(k string) error {
		if k == key {
			found = true
		}
		_, err := d.skip()
		return err
	})
	return found
}
