package featurize

import (
	"fmt"
	"strings"
)

// The expression parser behind ParsePredicate: a recursive-descent parser
// for Trino's rendered expressions (IR text and SQL spellings). It builds a
// scratch expression tree that toPred turns into the AND/OR/NOT tree of
// clauses.

type exprKind uint8

const (
	eCol exprKind = iota
	eLit
	eCall    // name = function name (lower case)
	eCompare // name = operator; also BETWEEN, IN, LIKE, IS_NULL, IS_DISTINCT_FROM
	eAnd
	eOr
	eNot
	eArith // name = operator
	eCase
)

type expr struct {
	kind exprKind
	name string
	args []*expr
}

type parser struct {
	toks  []token
	i     int
	depth int
	slab  []expr  // expressions are allocated from here, a chunk at a time
	ptrs  []*expr // and argument lists from here
}

// litExpr is the shared (immutable) literal expression.
var litExpr = &expr{kind: eLit}

// mk allocates an expression with args.
func (p *parser) mk(k exprKind, name string, args ...*expr) *expr {
	if len(p.slab) == cap(p.slab) {
		p.slab = make([]expr, 0, 32)
	}
	p.slab = append(p.slab, expr{kind: k, name: name})
	e := &p.slab[len(p.slab)-1]
	if len(args) > 0 {
		if cap(p.ptrs)-len(p.ptrs) < len(args) {
			p.ptrs = make([]*expr, 0, max(32, len(args)))
		}
		n := len(p.ptrs)
		p.ptrs = append(p.ptrs, args...)
		e.args = p.ptrs[n:len(p.ptrs):len(p.ptrs)] // full slice: appends reallocate
	}
	return e
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) peekN(n int) token {
	if p.i+n < len(p.toks) {
		return p.toks[p.i+n]
	}
	return p.toks[len(p.toks)-1]
}
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.Kind != tEOF {
		p.i++
	}
	return t
}
func (p *parser) isKw(kw string) bool {
	t := p.toks[p.i]
	return t.Kind == tIdent && strings.EqualFold(t.Text, kw)
}
func (p *parser) isOp(op string) bool {
	t := p.toks[p.i]
	return t.Kind == tOp && t.Text == op
}
func (p *parser) acceptKw(kw string) bool {
	if p.isKw(kw) {
		p.i++
		return true
	}
	return false
}
func (p *parser) acceptOp(op string) bool {
	if p.isOp(op) {
		p.i++
		return true
	}
	return false
}
func (p *parser) expectOp(op string) error {
	if !p.acceptOp(op) {
		return p.errorf("expected %q, found %q", op, p.peek().Text)
	}
	return nil
}
func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.peek().Pos, fmt.Sprintf(format, args...))
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxPredDepth {
		return p.errorf("nested deeper than %d", maxPredDepth)
	}
	return nil
}

func (p *parser) parseExpr() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	return p.parseBinaryBool("OR", eOr, p.parseAnd)
}

func (p *parser) parseAnd() (*expr, error) { return p.parseBinaryBool("AND", eAnd, p.parseNot) }

func (p *parser) parseBinaryBool(kw string, k exprKind, sub func() (*expr, error)) (*expr, error) {
	l, err := sub()
	if err != nil {
		return nil, err
	}
	if !p.isKw(kw) {
		return l, nil
	}
	e := p.mk(k, "", l)
	for p.acceptKw(kw) {
		r, err := sub()
		if err != nil {
			return nil, err
		}
		e.args = append(e.args, r)
	}
	return e, nil
}

func (p *parser) parseNot() (*expr, error) {
	if p.acceptKw("NOT") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		e, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return p.mk(eNot, "", e), nil
	}
	return p.parsePredicate()
}

var comparisonOps = map[string]string{"=": "=", "<>": "<>", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

func (p *parser) parsePredicate() (*expr, error) {
	l, err := p.parseAdditive()
	if err != nil {
		return nil, err
	}
	for {
		t := p.peek()
		if t.Kind == tOp {
			if op, ok := comparisonOps[t.Text]; ok {
				p.i++
				// quantified comparison: = ANY / ALL / SOME (subquery)
				if p.isKw("ANY") || p.isKw("ALL") || p.isKw("SOME") {
					p.i++
				}
				r, err := p.parseAdditive()
				if err != nil {
					return nil, err
				}
				l = p.mk(eCompare, op, l, r)
				continue
			}
			return l, nil
		}
		if t.Kind != tIdent {
			return l, nil
		}
		negate := false
		if strings.EqualFold(t.Text, "NOT") {
			n := p.peekN(1)
			if n.Kind == tIdent && (strings.EqualFold(n.Text, "BETWEEN") || strings.EqualFold(n.Text, "IN") || strings.EqualFold(n.Text, "LIKE")) {
				p.i++
				negate = true
			} else {
				return l, nil
			}
		}
		var e *expr
		switch {
		case p.acceptKw("BETWEEN"):
			lo, err := p.parseAdditive()
			if err != nil {
				return nil, err
			}
			if !p.acceptKw("AND") {
				return nil, p.errorf("expected AND in BETWEEN")
			}
			hi, err := p.parseAdditive()
			if err != nil {
				return nil, err
			}
			e = p.mk(eCompare, OpBetween, l, lo, hi)
		case p.acceptKw("IN"):
			if err := p.expectOp("("); err != nil {
				return nil, err
			}
			if p.skipLiteralList() { // fast path: IN (varchar(10) '1', ...) of hundreds of literals
				e = p.mk(eCompare, OpIn, l)
				break
			}
			args, err := p.parseList(")")
			if err != nil {
				return nil, err
			}
			e = p.mk(eCompare, OpIn, append([]*expr{l}, args...)...)
		case p.acceptKw("LIKE"):
			pat, err := p.parseAdditive()
			if err != nil {
				return nil, err
			}
			args := []*expr{l, pat}
			if p.acceptKw("ESCAPE") {
				esc, err := p.parseAdditive()
				if err != nil {
					return nil, err
				}
				args = append(args, esc)
			}
			e = p.mk(eCompare, OpLike, args...)
		case p.acceptKw("IS"):
			not := p.acceptKw("NOT")
			switch {
			case p.acceptKw("NULL"):
				e = p.mk(eCompare, OpIsNull, l)
			case p.acceptKw("DISTINCT"):
				if !p.acceptKw("FROM") {
					return nil, p.errorf("expected FROM after IS DISTINCT")
				}
				r, err := p.parseAdditive()
				if err != nil {
					return nil, err
				}
				e = p.mk(eCompare, OpDistinct, l, r)
			case p.acceptKw("TRUE"), p.acceptKw("FALSE"), p.acceptKw("UNKNOWN"):
				e = p.mk(eCompare, "=", l)
			default:
				return nil, p.errorf("unexpected %q after IS", p.peek().Text)
			}
			negate = not
		default:
			return l, nil
		}
		if negate {
			e = p.mk(eNot, "", e)
		}
		l = e
	}
}

func (p *parser) parseAdditive() (*expr, error) {
	l, err := p.parseMultiplicative()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") || p.isOp("||") {
		op := p.next().Text
		r, err := p.parseMultiplicative()
		if err != nil {
			return nil, err
		}
		l = p.mk(eArith, op, l, r)
	}
	return l, nil
}

func (p *parser) parseMultiplicative() (*expr, error) {
	l, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("%") {
		op := p.next().Text
		r, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		l = p.mk(eArith, op, l, r)
	}
	return l, nil
}

func (p *parser) parseUnary() (*expr, error) {
	if p.isOp("-") || p.isOp("+") {
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer func() { p.depth-- }()
		p.i++
		return p.parseUnary()
	}
	e, err := p.parsePrimary()
	if err != nil {
		return nil, err
	}
	// postfix: ::type, [subscript], .field, AT TIME ZONE
	for {
		switch {
		case p.acceptOp("::"):
			if err := p.skipType(); err != nil {
				return nil, err
			}
		case p.acceptOp("["):
			idx, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if err := p.expectOp("]"); err != nil {
				return nil, err
			}
			e = p.mk(eCall, "subscript", e, idx)
		case p.isOp(".") && (p.peekN(1).Kind == tIdent || p.peekN(1).Kind == tQuoted):
			p.i++
			f := p.next()
			if e.kind == eCol { // qualified name t.col: keep the last part
				e = p.mk(eCol, normalizeSymbol(f.Text))
			}
		case p.isKw("AT") && strings.EqualFold(p.peekN(1).Text, "TIME"):
			p.i += 2
			if !p.acceptKw("ZONE") {
				return nil, p.errorf("expected ZONE")
			}
			z, err := p.parsePrimary()
			if err != nil {
				return nil, err
			}
			e = p.mk(eCall, "at_timezone", e, z)
		default:
			return e, nil
		}
	}
}

// skipLiteralList consumes "lit, lit, ...)" when every item is a literal —
// a number, a string, NULL/TRUE/FALSE, or a typed literal such as
// varchar(10) 'x' or date '2000-01-01' — and reports whether it did; otherwise
// it consumes nothing.
func (p *parser) skipLiteralList() bool {
	start := p.i
	for {
		t := p.peek()
		switch {
		case t.Kind == tNumber || t.Kind == tString:
			p.i++
		case t.Kind == tOp && t.Text == "-" && p.peekN(1).Kind == tNumber:
			p.i += 2
		case t.Kind == tIdent:
			switch kwUpper(t.Text) {
			case "NULL", "TRUE", "FALSE":
				p.i++
			default:
				p.i++
				if p.isOp("(") && p.skipBalanced() != nil {
					p.i = start
					return false
				}
				for isTypeWord(p.peek()) {
					p.i++
				}
				if p.peek().Kind != tString {
					p.i = start
					return false
				}
				p.i++
			}
		default:
			p.i = start
			return false
		}
		if p.acceptOp(")") {
			return true
		}
		if !p.acceptOp(",") {
			p.i = start
			return false
		}
	}
}

// typeWords may follow a type name: `timestamp(3) with time zone`, `double precision`.
func isTypeWord(t token) bool {
	if t.Kind != tIdent {
		return false
	}
	switch kwUpper(t.Text) {
	case "WITH", "WITHOUT", "TIME", "ZONE", "PRECISION", "LOCAL", "VARYING":
		return true
	}
	return false
}

// skipType consumes a type: name, optional balanced (...), trailing words.
func (p *parser) skipType() error {
	t := p.next()
	if t.Kind != tIdent && t.Kind != tQuoted {
		return p.errorf("expected a type, found %q", t.Text)
	}
	for {
		if p.isOp("(") {
			if err := p.skipBalanced(); err != nil {
				return err
			}
			continue
		}
		if isTypeWord(p.peek()) {
			p.i++
			continue
		}
		return nil
	}
}

// skipBalanced consumes a parenthesized group starting at "(".
func (p *parser) skipBalanced() error {
	depth := 0
	for {
		t := p.next()
		switch {
		case t.Kind == tEOF:
			return p.errorf("unbalanced parentheses")
		case t.Kind == tOp && t.Text == "(":
			depth++
		case t.Kind == tOp && t.Text == ")":
			depth--
			if depth == 0 {
				return nil
			}
		}
	}
}

// parseList parses comma-separated expressions (lambdas allowed) up to close.
func (p *parser) parseList(close string) ([]*expr, error) {
	var args []*expr
	if p.acceptOp(close) {
		return args, nil
	}
	for {
		a, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if p.acceptOp("->") { // lambda: x -> body
			body, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			a = p.mk(eCall, "lambda", body)
		}
		args = append(args, a)
		if p.acceptOp(close) {
			return args, nil
		}
		if err := p.expectOp(","); err != nil {
			return nil, err
		}
	}
}

func (p *parser) parsePrimary() (*expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t := p.next()
	switch t.Kind {
	case tNumber, tString:
		return litExpr, nil
	case tQuoted:
		return p.mk(eCol, normalizeSymbol(t.Text)), nil
	case tOp:
		switch t.Text {
		case "(":
			args, err := p.parseList(")")
			if err != nil {
				return nil, err
			}
			if len(args) == 1 {
				return args[0], nil
			}
			return p.mk(eCall, "row", args...), nil // (a, b) row or lambda params
		case "?":
			return litExpr, nil
		}
		return nil, fmt.Errorf("offset %d: unexpected %q", t.Pos, t.Text)
	case tEOF:
		return nil, fmt.Errorf("offset %d: unexpected end of expression", t.Pos)
	}
	// identifier or keyword
	switch kwUpper(t.Text) {
	case "NULL", "TRUE", "FALSE":
		return litExpr, nil
	case "CAST", "TRY_CAST":
		if p.isOp("(") {
			p.i++
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			if !p.acceptKw("AS") {
				return nil, p.errorf("expected AS in CAST")
			}
			if err := p.skipType(); err != nil {
				return nil, err
			}
			if err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return e, nil // the cast itself is a type: dropped
		}
	case "CASE":
		return p.parseCase()
	case "INTERVAL":
		if p.peek().Kind == tString || p.isOp("-") || p.isOp("+") {
			if !p.acceptOp("-") {
				p.acceptOp("+")
			}
			if p.next().Kind != tString {
				return nil, p.errorf("expected an interval string")
			}
			for p.peek().Kind == tIdent && isIntervalUnit(p.peek().Text) {
				p.i++
			}
			return litExpr, nil
		}
	case "ARRAY":
		if p.acceptOp("[") {
			args, err := p.parseList("]")
			if err != nil {
				return nil, err
			}
			return p.mk(eCall, "array", args...), nil
		}
	case "EXISTS":
		if p.isOp("(") {
			return nil, p.errorf("subqueries are not supported")
		}
	}
	// typed literal: type 'value' (date '2000-01-01', LikePattern '[a%]', bigint '3')
	if p.peek().Kind == tString {
		p.i++
		return litExpr, nil
	}
	if isTypeWord(p.peek()) && typedLiteralAhead(p.toks[p.i:]) {
		for isTypeWord(p.peek()) {
			p.i++
		}
		p.i++ // the string
		return litExpr, nil
	}
	if p.isOp("(") {
		// function call, or a parameterized type before a literal: varchar(25) 'X'
		start := p.i
		if err := p.skipBalanced(); err != nil {
			return nil, err
		}
		for isTypeWord(p.peek()) {
			p.i++
		}
		if p.peek().Kind == tString {
			p.i++
			return litExpr, nil
		}
		p.i = start + 1
		p.acceptKw("DISTINCT")
		args, err := p.parseList(")")
		if err != nil {
			return nil, err
		}
		name := lowerASCII(t.Text)
		if p.isKw("FILTER") || p.isKw("OVER") {
			return nil, p.errorf("window or filtered aggregate in a predicate")
		}
		return p.mk(eCall, name, args...), nil
	}
	return p.mk(eCol, normalizeSymbol(t.Text)), nil
}

func typedLiteralAhead(toks []token) bool {
	for _, t := range toks {
		if t.Kind == tString {
			return true
		}
		if !isTypeWord(t) {
			return false
		}
	}
	return false
}

func isIntervalUnit(s string) bool {
	switch kwUpper(s) {
	case "YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND", "TO":
		return true
	}
	return false
}

func (p *parser) parseCase() (*expr, error) {
	e := &expr{kind: eCase}
	if !p.isKw("WHEN") { // simple CASE operand WHEN ...
		op, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		e.args = append(e.args, op)
	}
	for p.acceptKw("WHEN") {
		c, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if !p.acceptKw("THEN") {
			return nil, p.errorf("expected THEN")
		}
		r, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		e.args = append(e.args, c, r)
	}
	if p.acceptKw("ELSE") {
		r, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		e.args = append(e.args, r)
	}
	if !p.acceptKw("END") {
		return nil, p.errorf("expected END in CASE")
	}
	return e, nil
}
