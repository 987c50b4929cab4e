package sqllex

import "strings"

// Fingerprint normalizes a SQL statement: comments dropped, tokens
// separated by one space, unquoted words lower-cased, string and numeric
// literals replaced by "?" (quoted identifiers are kept as written). Two
// statements that differ only in literals share a fingerprint: their plans
// have the same shape. A number's sign is part of the literal (-5 and 5
// are both "?"), and so are parentheses around a lone literal that group
// rather than call ((-155.25) is "?"; f(5) stays "f ( ? )"): clients and
// generators write a negative bound so, and BETWEEN (-155.25) AND 2694.75
// is the same statement as BETWEEN 1006.20 AND 3006.20. The estimator keys
// its caches and the history's shapes on it, the collector the query
// shapes whose code a Trino JVM has compiled.
func Fingerprint(sql string) string { return normalize(sql, false) }

// Normalize is Fingerprint with the literals kept: two statements that
// differ only in spacing, comments or the case of unquoted words share it
// (the history's exact-statement key).
func Normalize(sql string) string { return normalize(sql, true) }

// mark is where a token normalize wrote starts in its buffer, and its
// kind.
type mark struct {
	start int
	kind  Kind
}

func normalize(sql string, keepLiterals bool) string {
	buf := make([]byte, 0, len(sql))
	// The tokens written, for Fingerprint's folds (one may look back past
	// an earlier fold, so all are kept); a statement's first 64 on the
	// stack.
	var small [64]mark
	marks := small[:0]
	text := func(i int) []byte { // the i-th token written
		if i+1 < len(marks) {
			return buf[marks[i].start : marks[i+1].start-1]
		}
		return buf[marks[i].start:]
	}
	is := func(i int, s string) bool { return string(text(i)) == s }
	// operand: the token before the i-th ends an operand (false: none).
	operand := func(i int) bool {
		return i > 0 && endsOperand(marks[i-1].kind, string(text(i-1)))
	}
	// drop removes the tokens from the i-th on.
	drop := func(i int) {
		buf = buf[:max(marks[i].start-1, 0)]
		marks = marks[:i]
	}
	emit := func(s string, k Kind) {
		if len(buf) > 0 {
			buf = append(buf, ' ')
		}
		marks = append(marks, mark{len(buf), k})
		buf = append(buf, s...)
	}
	sc := NewScanner(Statement, sql)
	for t := sc.Next(); t.Kind != EOF; t = sc.Next() {
		switch t.Kind {
		case String, Number:
			if keepLiterals {
				emit(t.Text, t.Kind)
				continue
			}
			// -5: the sign is the literal's when it follows no operand.
			if n := len(marks); t.Kind == Number && n > 0 && (is(n-1, "-") || is(n-1, "+")) && !operand(n-1) {
				drop(n - 1)
			}
			emit("?", t.Kind)
		case Word:
			emit(strings.ToLower(t.Text), Word)
		default: // quoted identifiers as written, punctuation
			emit(t.Text, t.Kind)
			// (?) that groups a literal is the literal.
			if n := len(marks); !keepLiterals && t.Text == ")" && n >= 3 && is(n-2, "?") && is(n-3, "(") && !operand(n-3) {
				k := marks[n-2].kind
				drop(n - 3)
				emit("?", k)
			}
		}
	}
	for n := len(marks); n > 0 && is(n-1, ";"); n = len(marks) {
		drop(n - 1)
	}
	return string(buf)
}

// EndsOperand reports whether t ends an operand: an identifier, a
// literal, a closing bracket. A + or - after it is binary, a ( after it
// calls a function; after a keyword, an operator, an opening bracket or a
// comma (or nothing: the zero Token) it is neither, and a sign before a
// number belongs to the number.
func EndsOperand(t Token) bool { return endsOperand(t.Kind, strings.ToLower(t.Text)) }

// endsOperand is EndsOperand of a token of kind whose text is lower-cased
// when it is a word.
func endsOperand(kind Kind, text string) bool {
	switch kind {
	case EOF, Space, Comment:
		return false
	case Word:
		return !operatorKeywords[text]
	case Punct: // "?": a literal written, or a parameter
		return text == ")" || text == "]" || text == "?"
	}
	return true // a literal, a quoted identifier
}

// operatorKeywords are the keywords after which a sign or a parenthesis
// begins an operand (lower case).
var operatorKeywords = map[string]bool{
	"select": true, "distinct": true, "all": true, "where": true, "and": true, "or": true, "not": true, "between": true,
	"when": true, "then": true, "else": true, "case": true, "in": true, "is": true, "like": true, "escape": true,
	"on": true, "having": true, "by": true, "limit": true, "offset": true, "fetch": true, "values": true, "return": true,
}
