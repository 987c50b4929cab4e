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

// emitted is a token as normalize wrote it.
type emitted struct {
	text string
	kind Kind
}

func normalize(sql string, keepLiterals bool) string {
	out := make([]emitted, 0, len(sql)/4)
	sc := NewScanner(Statement, sql)
	for t := sc.Next(); t.Kind != EOF; t = sc.Next() {
		switch t.Kind {
		case String, Number:
			if keepLiterals {
				out = append(out, emitted{t.Text, t.Kind})
				continue
			}
			// -5: the sign is the literal's when it follows no operand.
			if n := len(out); t.Kind == Number && n > 0 && (out[n-1].text == "-" || out[n-1].text == "+") && !operand(out[:n-1]) {
				out = out[:n-1]
			}
			out = append(out, emitted{"?", t.Kind})
		case Word:
			out = append(out, emitted{strings.ToLower(t.Text), Word})
		default: // quoted identifiers as written, punctuation
			out = append(out, emitted{t.Text, t.Kind})
			// (?) that groups a literal is the literal.
			if n := len(out); !keepLiterals && t.Text == ")" && n >= 3 && out[n-2].text == "?" && out[n-3].text == "(" && !operand(out[:n-3]) {
				out = append(out[:n-3], out[n-2])
			}
		}
	}
	for n := len(out); n > 0 && out[n-1].text == ";"; n = len(out) {
		out = out[:n-1]
	}
	var b strings.Builder
	b.Grow(len(sql))
	for i, e := range out {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(e.text)
	}
	return b.String()
}

// operand reports whether the last of the tokens written ends an operand
// (endsOperand); false when none was written.
func operand(out []emitted) bool {
	return len(out) > 0 && endsOperand(out[len(out)-1].kind, out[len(out)-1].text)
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
