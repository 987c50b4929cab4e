package featurize

import (
	"errors"
	"fmt"
	"strings"
	"sync"
)

// PredKind says what a Pred node is.
type PredKind uint8

const (
	PredClause PredKind = iota // a leaf: Columns + Operator
	PredAnd
	PredOr
	PredNot
)

// Pred is a parsed predicate (docs/design.md §2.3): a tree of AND / OR / NOT over
// clauses. A clause keeps its column names and its comparison operator and
// drops values and literal types:
//
//	(d_year = integer '2000') AND (d_moy BETWEEN 1 AND 3)  →  AND([d_year =], [d_moy BETWEEN])
//
// Column names are normalized by normalizeSymbol (lower case, Trino's
// "_<n>" symbol-allocator suffix removed), so `d_date_sk_98` is `d_date_sk`.
// A Pred is immutable once returned: it may be shared (cached).
type Pred struct {
	Kind     PredKind
	Children []*Pred  // AND / OR: two or more; NOT: one
	Columns  []string // clause: columns in order of appearance (duplicates kept)
	Operator string   // clause: "=", "<>", "<", "<=", ">", ">=", "BETWEEN", "IN", "LIKE", "IS_NULL", "IS_DISTINCT_FROM", a function name, "CASE", or "" for a bare column / literal
}

// Clause operators that are not plain comparison symbols.
const (
	OpBetween  = "BETWEEN"
	OpIn       = "IN"
	OpLike     = "LIKE"
	OpIsNull   = "IS_NULL"
	OpDistinct = "IS_DISTINCT_FROM"
	OpCase     = "CASE"
)

// Limits of the predicate parser (untrusted input: fuzzed, bounded).
const (
	MaxPredicateBytes = 1 << 20
	maxPredDepth      = 256
)

// ErrPredicate is wrapped by every predicate parse error.
var ErrPredicate = errors.New("estimator: bad predicate")

// ParsePredicate parses one rendered Trino expression. An empty (or blank)
// string means TRUE and returns (nil, nil).
func ParsePredicate(s string) (*Pred, error) {
	pp := predParserPool.Get().(*predParser)
	defer pp.release()
	return pp.parse(s)
}

// predParser parses many predicates and reuses its buffers: tokens and
// expressions are scratch, reset for every predicate; Pred nodes, child lists
// and column lists come from chunks that the returned trees keep (a chunk
// is never written again once handed out). Not safe for concurrent use.
type predParser struct {
	toks  []token
	p     parser
	preds []Pred
	kids  []*Pred
	cols  []string
	tmp   []string
}

var predParserPool = sync.Pool{New: func() any { return new(predParser) }}

// release drops the result chunks (they belong to returned trees) and puts
// the scratch buffers back in the pool.
func (pp *predParser) release() {
	pp.preds, pp.kids, pp.cols = nil, nil, nil
	if cap(pp.toks) <= 4096 && cap(pp.p.slab) <= 1024 {
		predParserPool.Put(pp)
	}
}

func (pp *predParser) parse(s string) (*Pred, error) {
	if len(s) > MaxPredicateBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPredicate, len(s), MaxPredicateBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	toks, err := lex(s, pp.toks[:0])
	pp.toks = toks[:0]
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPredicate, err)
	}
	// The expression slabs of the previous predicate are dead: reuse them.
	pp.p = parser{toks: toks, slab: pp.p.slab[:0], ptrs: pp.p.ptrs[:0]}
	e, err := pp.p.parseExpr()
	if err == nil && pp.p.peek().Kind != tEOF {
		err = pp.p.errorf("unexpected %q", pp.p.peek().Text)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPredicate, err)
	}
	return pp.toPred(e), nil
}

// newPred returns a zeroed Pred from the current chunk.
func (pp *predParser) newPred(k PredKind) *Pred {
	if len(pp.preds) == cap(pp.preds) {
		pp.preds = make([]Pred, 0, min(2*cap(pp.preds)+4, 128))
	}
	pp.preds = append(pp.preds, Pred{Kind: k})
	return &pp.preds[len(pp.preds)-1]
}

// keepKids copies kids into the chunk (a full slice: appends reallocate).
func (pp *predParser) keepKids(kids []*Pred) []*Pred {
	if cap(pp.kids)-len(pp.kids) < len(kids) {
		pp.kids = make([]*Pred, 0, max(min(2*cap(pp.kids)+4, 256), len(kids)))
	}
	n := len(pp.kids)
	pp.kids = append(pp.kids, kids...)
	return pp.kids[n:len(pp.kids):len(pp.kids)]
}

// keepCols copies cols into the chunk (a full slice).
func (pp *predParser) keepCols(cols []string) []string {
	if len(cols) == 0 {
		return nil
	}
	if cap(pp.cols)-len(pp.cols) < len(cols) {
		pp.cols = make([]string, 0, max(min(2*cap(pp.cols)+4, 256), len(cols)))
	}
	n := len(pp.cols)
	pp.cols = append(pp.cols, cols...)
	return pp.cols[n:len(pp.cols):len(pp.cols)]
}

// Tokens returns the predicate's token sentence: every clause's columns then
// its operator, depth first, left to right (the Word2Vec corpus line).
func (p *Pred) Tokens() []string {
	if p == nil {
		return nil
	}
	var out []string
	p.appendTokens(&out)
	return out
}

func (p *Pred) appendTokens(out *[]string) {
	if p.Kind == PredClause {
		*out = append(*out, p.Columns...)
		if p.Operator != "" {
			*out = append(*out, p.Operator)
		}
		return
	}
	for _, c := range p.Children {
		c.appendTokens(out)
	}
}

// ClauseTokens returns a clause's tokens (columns then operator).
func (p *Pred) ClauseTokens() []string {
	out := make([]string, 0, len(p.Columns)+1)
	out = append(out, p.Columns...)
	if p.Operator != "" {
		out = append(out, p.Operator)
	}
	return out
}

// String is the normalized predicate text: values stripped, symbols
// normalized, one canonical spelling. It is the predicate-vector cache key.
// A nil Pred prints as "TRUE".
func (p *Pred) String() string {
	if p == nil {
		return "TRUE"
	}
	var b strings.Builder
	p.write(&b)
	return b.String()
}

func (p *Pred) write(b *strings.Builder) {
	switch p.Kind {
	case PredClause:
		b.WriteByte('[')
		for i, t := range p.Columns {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(t)
		}
		if p.Operator != "" {
			if len(p.Columns) > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(p.Operator)
		}
		b.WriteByte(']')
		return
	case PredAnd:
		b.WriteString("AND(")
	case PredOr:
		b.WriteString("OR(")
	default:
		b.WriteString("NOT(")
	}
	for i, c := range p.Children {
		if i > 0 {
			b.WriteString(", ")
		}
		c.write(b)
	}
	b.WriteByte(')')
}

// Clauses returns the number of clauses (leaves).
func (p *Pred) Clauses() int {
	if p == nil {
		return 0
	}
	if p.Kind == PredClause {
		return 1
	}
	n := 0
	for _, c := range p.Children {
		n += c.Clauses()
	}
	return n
}

// keywords maps the lower-case spelling of every keyword the parser
// switches on to its upper-case form.
var keywords = func() map[string]string {
	m := map[string]string{}
	for _, k := range []string{"NULL", "TRUE", "FALSE", "CAST", "TRY_CAST", "CASE", "INTERVAL", "ARRAY", "EXISTS",
		"WITH", "WITHOUT", "TIME", "ZONE", "PRECISION", "LOCAL", "VARYING",
		"YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "TO"} {
		m[strings.ToLower(k)] = k
	}
	return m
}()

// kwUpper returns the upper-case keyword s spells (in any case), or "" when
// s is no keyword the parser switches on. It does not allocate.
func kwUpper(s string) string {
	var buf [16]byte
	if len(s) < 2 || len(s) > len(buf) {
		return ""
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		case c >= 'a' && c <= 'z' || c == '_':
		default:
			return "" // keywords are letters and '_'; symbols like d_year_6 end here
		}
		buf[i] = c
	}
	return keywords[string(buf[:len(s)])]
}

// lowerASCII lower-cases s, allocating only when s has upper-case letters.
func lowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}

// normalizeSymbol lower-cases a symbol and removes one trailing "_<digits>",
// the suffix Trino's SymbolAllocator adds to keep symbols unique (it strips
// the same suffix from name hints before adding a new one).
func normalizeSymbol(s string) string {
	if i := strings.LastIndexByte(s, '_'); i > 0 && i < len(s)-1 {
		digits := true
		for j := i + 1; j < len(s); j++ {
			if s[j] < '0' || s[j] > '9' {
				digits = false
				break
			}
		}
		if digits {
			s = s[:i]
		}
	}
	return lowerASCII(s)
}

// toPred turns an expression into the AND/OR/NOT tree of clauses.
func (pp *predParser) toPred(e *expr) *Pred {
	switch e.kind {
	case eAnd, eOr:
		k := PredAnd
		if e.kind == eOr {
			k = PredOr
		}
		var buf [8]*Pred
		kids := buf[:0]
		for _, a := range e.args {
			c := pp.toPred(a)
			if c.Kind == k { // flatten (a AND (b AND c))
				kids = append(kids, c.Children...)
			} else {
				kids = append(kids, c)
			}
		}
		p := pp.newPred(k)
		p.Children = pp.keepKids(kids)
		return p
	case eNot:
		return pp.not(pp.toPred(e.args[0]))
	case eCall:
		switch e.name {
		case "$not", "not":
			if len(e.args) == 1 {
				return pp.not(pp.toPred(e.args[0]))
			}
		case "$like", "like":
			return pp.clause(e, OpLike)
		case "$is_null", "is_null":
			return pp.clause(e, OpIsNull)
		}
		return pp.clause(e, e.name)
	case eCol:
		return pp.clause(e, "")
	case eLit:
		return pp.newPred(PredClause)
	case eCase:
		return pp.clause(e, OpCase)
	}
	return pp.clause(e, e.name) // comparison, BETWEEN, IN, LIKE, IS NULL, arithmetic...
}

func (pp *predParser) not(c *Pred) *Pred {
	p := pp.newPred(PredNot)
	p.Children = pp.keepKids([]*Pred{c})
	return p
}

func (pp *predParser) clause(e *expr, op string) *Pred {
	p := pp.newPred(PredClause)
	p.Operator = op
	pp.tmp = pp.tmp[:0]
	collectColumns(e, &pp.tmp)
	p.Columns = pp.keepCols(pp.tmp)
	return p
}

func collectColumns(e *expr, out *[]string) {
	if e.kind == eCol {
		*out = append(*out, e.name)
		return
	}
	for _, a := range e.args {
		collectColumns(a, out)
	}
}
