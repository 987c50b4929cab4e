package estimator

import (
	"fmt"
	"math"
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
	pos   int
	count int // nodes decoded so far
	max   int // node limit
	lean  bool
	depth int
	frag  string
}

// maxPlanDepth bounds JSON nesting (encoding/json's own limit is 10,000).
const maxPlanDepth = 10_000

func (d *planDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrBadPlan, fmt.Sprintf(format, args...), d.pos)
}

var jsonSpace = [256]bool{' ': true, '\n': true, '\t': true, '\r': true}

func (d *planDecoder) ws() {
	i, s := d.pos, d.src
	for i < len(s) && jsonSpace[s[i]] {
		i++
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

// str reads a JSON string at pos. Strings without escapes or invalid UTF-8
// are substrings of src (no allocation).
func (d *planDecoder) str() (string, error) {
	start := d.pos + 1 // after the opening quote
	i := start
	for i < len(d.src) {
		c := d.src[i]
		switch {
		case c == '"':
			d.pos = i + 1
			return d.src[start:i], nil
		case c == '\\' || c >= utf8.RuneSelf:
			return d.strSlow(start)
		case c < 0x20:
			d.pos = i
			return "", d.errorf("control character in string")
		}
		i++
	}
	d.pos = i
	return "", d.errorf("unterminated string")
}

// strSlow decodes a string with escapes or non-ASCII bytes; invalid UTF-8
// becomes U+FFFD, as encoding/json does.
func (d *planDecoder) strSlow(start int) (string, error) {
	var b []byte
	i := start
	for i < len(d.src) {
		c := d.src[i]
		switch {
		case c == '"':
			d.pos = i + 1
			if b == nil {
				return d.src[start:i], nil // valid UTF-8, no escapes
			}
			return string(b), nil
		case c < 0x20:
			d.pos = i
			return "", d.errorf("control character in string")
		case c == '\\':
			if b == nil {
				b = append(make([]byte, 0, i-start+16), d.src[start:i]...)
			}
			if i+1 >= len(d.src) {
				d.pos = i
				return "", d.errorf("unterminated string")
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
					return "", d.errorf("bad \\u escape")
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
				return "", d.errorf("bad escape \\%c", e)
			}
			i++
		case c < utf8.RuneSelf:
			if b != nil {
				b = append(b, c)
			}
			i++
		default:
			r, size := utf8.DecodeRuneInString(d.src[i:])
			if r == utf8.RuneError && size == 1 {
				if b == nil {
					b = append(make([]byte, 0, i-start+16), d.src[start:i]...)
				}
				b = utf8.AppendRune(b, utf8.RuneError)
			} else if b != nil {
				b = append(b, d.src[i:i+size]...)
			}
			i += size
		}
	}
	d.pos = i
	return "", d.errorf("unterminated string")
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
	v, perr := strconv.ParseFloat(raw, 64) // accepts NaN, Infinity, -Infinity
	if perr != nil {
		return math.NaN(), nil
	}
	return v, nil
}

func (d *planDecoder) node() (*PlanNode, error) {
	if d.peek() != '{' {
		return nil, d.errorf("plan node is not an object")
	}
	d.count++
	if d.count > d.max {
		return nil, fmt.Errorf("%w: more than %d nodes", ErrPlanTooLarge, d.max)
	}
	n := &PlanNode{Fragment: d.frag}
	nameSeen := false
	err := d.object(func(key string) error {
		if d.lean && (key == "outputs" || key == "details") {
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
			n.Descriptor = map[string]string{}
			err = d.object(func(k string) error {
				v, err := d.text()
				n.Descriptor[k] = v
				return err
			})
			if len(n.Descriptor) == 0 {
				n.Descriptor = nil
			}
		case "outputs":
			err = d.list(func() error {
				s, err := d.symbol()
				n.Outputs = append(n.Outputs, s)
				return err
			})
		case "details":
			err = d.list(func() error {
				s, err := d.text()
				n.Details = append(n.Details, s)
				return err
			})
		case "estimates":
			err = d.list(func() error {
				e, err := d.estimate()
				n.Estimates = append(n.Estimates, e)
				return err
			})
		case "children":
			err = d.list(func() error {
				c, err := d.node()
				if c != nil {
					n.Children = append(n.Children, c)
				}
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
		case "outputSizeInBytes":
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
	d := &planDecoder{src: string(b), max: lim.MaxNodes, lean: lim.Lean}
	frags = map[string]*PlanNode{}
	err = d.object(func(key string) error {
		if key == "name" {
			return errSingleNode
		}
		d.frag = key
		n, err := d.node()
		if err != nil {
			return fmt.Errorf("%w (fragment %q)", err, key)
		}
		frags[key] = n
		return nil
	})
	if err == errSingleNode || (err != nil && hasTopKey(b, "name")) {
		d = &planDecoder{src: d.src, max: lim.MaxNodes, lean: lim.Lean}
		root, err = d.node()
		frags = nil
	}
	if err == nil {
		if d.peek() != 0 {
			err = d.errorf("data after the plan")
		}
	}
	if err != nil {
		return nil, nil, 0, err
	}
	return frags, root, d.count, nil
}

var errSingleNode = fmt.Errorf("single node")

// hasTopKey reports whether the top-level object of b has the key.
func hasTopKey(b []byte, key string) bool {
	d := &planDecoder{src: string(b)}
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
