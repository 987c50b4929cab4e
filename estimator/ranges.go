package estimator

import (
	"strings"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// rangeLiterals are the literals of sql that bound a range — the operands
// of <, <=, >, >= and BETWEEN … AND …, with what is computed with them
// (DATE '1994-01-01' + INTERVAL '1' YEAR gives both literals), a number
// with its sign (BETWEEN (-155.25) AND …) — in order, each followed by a
// 0 byte; "" when there are none. On a table
// partitioned or sorted by the column, they decide how much is read: a
// year of lineitem by month(shipdate) reads 12 of its 83 partitions, a
// window over the data's last months fewer. Equality and IN literals are
// left out: they pick a value, not how many.
//
// The estimate cache keys on them (cacheFingerprint): a statement whose
// range moved gets its own estimate instead of the one made for the first
// range of its shape, for as long as the cache's TTL.
func rangeLiterals(sql string) string {
	var b strings.Builder
	in := false                   // inside the operand of a range comparison
	between := false              // the next AND at the operand's depth is BETWEEN's
	depth, start := 0, 0          // parenthesis depth now, and where the operand began
	var before, last sqllex.Token // the two tokens before t
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for t := sc.Next(); t.Kind != sqllex.EOF; before, last, t = last, t, sc.Next() {
		if rangeOp(sql, t) {
			if !in && (last.Kind == sqllex.String || last.Kind == sqllex.Number) {
				b.WriteString(last.Text) // DATE '1994-01-01' <= shipdate
				b.WriteByte(0)
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
			if t.Kind == sqllex.Number && (last.Text == "-" || last.Text == "+") && last.Kind == sqllex.Punct && !sqllex.EndsOperand(before) {
				b.WriteString(last.Text) // BETWEEN (-155.25) AND …: the bound's sign
			}
			b.WriteString(t.Text)
			b.WriteByte(0)
		case t.Is("and") && depth == start && between:
			between = false
		case depth == start && (t.Text == "," || t.Text == ";" || t.Kind == sqllex.Word && endsOperand[strings.ToLower(t.Text)]):
			in, between = false, false
		}
	}
	return b.String()
}

// rangeOp reports whether t, a token of sql, is a range comparison:
// BETWEEN, or < or > (the Statement dialect's operators are one byte: <=
// is < then =) that is not part of <>.
func rangeOp(sql string, t sqllex.Token) bool {
	switch {
	case t.Is("between"):
		return true
	case t.Kind != sqllex.Punct:
		return false
	case t.Text == "<":
		return t.Pos+1 >= len(sql) || sql[t.Pos+1] != '>'
	case t.Text == ">":
		return t.Pos == 0 || sql[t.Pos-1] != '<'
	}
	return false
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
