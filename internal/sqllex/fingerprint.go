package sqllex

import "strings"

// Fingerprint normalizes a SQL statement: comments dropped, tokens
// separated by one space, unquoted words lower-cased, string and numeric
// literals replaced by "?" (quoted identifiers are kept as written). Two
// statements that differ only in literals share a fingerprint: their plans
// have the same shape. The estimator keys its caches and the history's
// shapes on it, the collector the query shapes whose code a Trino JVM has
// compiled.
func Fingerprint(sql string) string { return normalize(sql, false) }

// Normalize is Fingerprint with the literals kept: two statements that
// differ only in spacing, comments or the case of unquoted words share it
// (the history's exact-statement key).
func Normalize(sql string) string { return normalize(sql, true) }

func normalize(sql string, keepLiterals bool) string {
	var b strings.Builder
	b.Grow(len(sql))
	// Tokens are separated by one space whatever the original spacing.
	emit := func(s string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	sc := NewScanner(Statement, sql)
	for t := sc.Next(); t.Kind != EOF; t = sc.Next() {
		switch t.Kind {
		case String, Number:
			if keepLiterals {
				emit(t.Text)
			} else {
				emit("?")
			}
		case Word:
			emit(strings.ToLower(t.Text))
		default: // quoted identifiers as written, punctuation
			emit(t.Text)
		}
	}
	out := b.String()
	for strings.HasSuffix(out, " ;") || out == ";" {
		out = strings.TrimSuffix(strings.TrimSuffix(out, ";"), " ")
	}
	return out
}
