package collector

import (
	"strings"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// tokKind is the lexical class of a SQL token.
type tokKind int

const (
	tkSpace   tokKind = iota // whitespace
	tkComment                // -- ... or /* ... */
	tkIdent                  // bare word (keyword or identifier) or "quoted identifier"
	tkString                 // '...' with '' escapes
	tkNumber                 // 12, 1.5, .06
	tkPunct                  // operators and punctuation
)

// token is one lexical token; concatenating the Text of all tokens gives
// back the input exactly.
type token struct {
	kind tokKind
	text string
}

// word is the identifier's name: unquoted and lower-cased; "" for others.
func (t token) word() string {
	if t.kind != tkIdent {
		return ""
	}
	if strings.HasPrefix(t.text, `"`) {
		return strings.ToLower(strings.ReplaceAll(t.text[1:len(t.text)-1], `""`, `"`))
	}
	return strings.ToLower(t.text)
}

// keyword reports whether t is the bare (unquoted) keyword kw.
func (t token) keyword(kw string) bool {
	return t.kind == tkIdent && !strings.HasPrefix(t.text, `"`) && strings.EqualFold(t.text, kw)
}

// stringValue is the content of a string literal token.
func (t token) stringValue() string {
	return strings.ReplaceAll(t.text[1:len(t.text)-1], "''", "'")
}

// quoteString renders s as a SQL string literal.
func quoteString(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// tokenize splits SQL into tokens (internal/sqllex's Template dialect). It
// never fails: an unterminated string or comment runs to the end of the
// input.
func tokenize(s string) []token {
	var out []token
	for i := 0; ; {
		t := sqllex.Template.Next(s, i)
		if t.Kind == sqllex.EOF {
			return out
		}
		i += len(t.Text)
		out = append(out, token{kind: tokKinds[t.Kind], text: t.Text})
	}
}

// tokKinds maps the scanner's kinds to the collector's (a quoted identifier
// is an identifier).
var tokKinds = [...]tokKind{
	sqllex.Space: tkSpace, sqllex.Comment: tkComment, sqllex.Word: tkIdent, sqllex.Quoted: tkIdent,
	sqllex.String: tkString, sqllex.Number: tkNumber, sqllex.Punct: tkPunct,
}

// sigIndex lists the indexes of the significant tokens (no space, no comment).
func sigIndex(toks []token) []int {
	idx := make([]int, 0, len(toks)/2)
	for i, t := range toks {
		if t.kind != tkSpace && t.kind != tkComment {
			idx = append(idx, i)
		}
	}
	return idx
}

// sqlKeywords are words that can follow a table or column without being an
// alias of it.
var sqlKeywords = map[string]bool{
	"select": true, "from": true, "where": true, "group": true, "order": true, "by": true, "having": true,
	"limit": true, "join": true, "inner": true, "left": true, "right": true, "full": true, "outer": true,
	"cross": true, "on": true, "using": true, "and": true, "or": true, "not": true, "in": true, "between": true,
	"like": true, "is": true, "null": true, "as": true, "asc": true, "desc": true, "union": true, "all": true,
	"intersect": true, "except": true, "with": true, "case": true, "when": true, "then": true, "else": true,
	"end": true, "over": true, "partition": true, "rows": true, "range": true, "window": true, "distinct": true,
	"exists": true, "lateral": true, "natural": true, "fetch": true, "offset": true, "nulls": true, "first": true,
	"last": true, "escape": true, "filter": true, "within": true,
}
