package estimator

import (
	"strings"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// rangeLiterals are the literals of sql that bound a range — the operands
// of <, <=, >, >= and BETWEEN … AND …, with what is computed with them
// (DATE '1994-01-01' + INTERVAL '1' YEAR gives both literals) — in
// order, each followed by a 0 byte; "" when there are none. On a table
// partitioned or sorted by the column, they decide how much is read: a
// year of lineitem by month(shipdate) reads 12 of its 83 partitions, a
// window over the data's last months fewer. Equality and IN literals are
// left out: they pick a value, not how many.
//
// The estimate cache keys on them (cacheFingerprint): a statement whose
// range moved gets its own estimate instead of the one made for the first
// range of its shape, for as long as the cache's TTL.
func rangeLiterals(sql string) string {
	var toks []sqllex.Token
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for t := sc.Next(); t.Kind != sqllex.EOF; t = sc.Next() {
		toks = append(toks, t)
	}
	var b strings.Builder
	lit := func(t sqllex.Token) {
		b.WriteString(t.Text)
		b.WriteByte(0)
	}
	in := false          // inside the operand of a range comparison
	between := false     // the next AND at the operand's depth is BETWEEN's
	depth, start := 0, 0 // parenthesis depth now, and where the operand began
	for i, t := range toks {
		if rangeOp(toks, i) {
			if !in && i > 0 && (toks[i-1].Kind == sqllex.String || toks[i-1].Kind == sqllex.Number) {
				lit(toks[i-1]) // DATE '1994-01-01' <= shipdate
			}
			in, between, start = true, between || t.Is("between"), depth
			continue
		}
		switch {
		case t.Text == "(":
			depth++
		case t.Text == ")":
			if depth--; in && depth < start {
				in, between = false, false
			}
		case !in:
		case t.Kind == sqllex.String || t.Kind == sqllex.Number:
			lit(t)
		case t.Is("and") && depth == start && between:
			between = false
		case depth == start && (t.Text == "," || t.Text == ";" || t.Kind == sqllex.Word && endsOperand[strings.ToLower(t.Text)]):
			in, between = false, false
		}
	}
	return b.String()
}

// rangeOp reports whether toks[i] is a range comparison: BETWEEN, or <
// or > (the Statement dialect's operators are one byte: <= is < then =)
// that is not part of <>.
func rangeOp(toks []sqllex.Token, i int) bool {
	t := toks[i]
	if t.Is("between") {
		return true
	}
	if t.Kind != sqllex.Punct || (t.Text != "<" && t.Text != ">") {
		return false
	}
	adjacent := func(j int) bool {
		return j >= 0 && j < len(toks) && toks[j].Kind == sqllex.Punct && (toks[j].Pos == t.Pos+1 || toks[j].Pos+1 == t.Pos)
	}
	if t.Text == "<" && adjacent(i+1) && toks[i+1].Text == ">" {
		return false
	}
	return !(t.Text == ">" && adjacent(i-1) && toks[i-1].Text == "<")
}

// endsOperand are the keywords that end a range comparison's operand at
// its depth (besides a comma, a semicolon and the closing parenthesis;
// BETWEEN's own AND excepted).
var endsOperand = map[string]bool{
	"and": true, "or": true, "where": true, "group": true, "order": true, "having": true, "limit": true, "offset": true, "fetch": true,
	"union": true, "intersect": true, "except": true, "then": true, "when": true, "else": true, "end": true,
	"on": true, "join": true, "inner": true, "left": true, "right": true, "full": true, "cross": true,
	"from": true, "select": true, "as": true, "is": true, "in": true, "like": true, "not": true,
}

// cacheFingerprint is the statement's part of the estimate cache's key:
// its Fingerprint and, unless shapeOnly (estimator.cache_shape_only), its
// range literals (rangeLiterals) after a 0xfe byte, which never occurs in
// UTF-8 text. A statement without range literals keys on its Fingerprint
// alone either way.
func cacheFingerprint(sql, fp string, shapeOnly bool) string {
	if shapeOnly {
		return fp
	}
	rl := rangeLiterals(sql)
	if rl == "" {
		return fp
	}
	return fp + "\x00\xfe" + rl
}
