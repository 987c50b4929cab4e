package collector

import (
	"strings"
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

// tokenize splits SQL into tokens. It never fails: an unterminated string or
// comment runs to the end of the input.
func tokenize(s string) []token {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		j := i + 1
		var k tokKind
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			for j < len(s) && strings.IndexByte(" \t\n\r", s[j]) >= 0 {
				j++
			}
			k = tkSpace
		case c == '-' && j < len(s) && s[j] == '-':
			for j < len(s) && s[j] != '\n' {
				j++
			}
			k = tkComment
		case c == '/' && j < len(s) && s[j] == '*':
			e := strings.Index(s[j+1:], "*/")
			if e < 0 {
				j = len(s)
			} else {
				j = j + 1 + e + 2
			}
			k = tkComment
		case c == '\'' || c == '"':
			for j < len(s) {
				if s[j] == c {
					if j+1 < len(s) && s[j+1] == c {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			if c == '\'' {
				k = tkString
			} else {
				k = tkIdent
			}
		case isDigit(c) || (c == '.' && j < len(s) && isDigit(s[j])):
			for j < len(s) && (isDigit(s[j]) || s[j] == '.') {
				j++
			}
			if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
				j++
				if j < len(s) && (s[j] == '+' || s[j] == '-') {
					j++
				}
				for j < len(s) && isDigit(s[j]) {
					j++
				}
			}
			k = tkNumber
		case isIdentStart(c):
			for j < len(s) && (isIdentStart(s[j]) || isDigit(s[j]) || s[j] == '$' || s[j] == '{' || s[j] == '}') {
				j++
			}
			k = tkIdent
		case c == '$' && j < len(s) && s[j] == '{':
			e := strings.IndexByte(s[j:], '}')
			if e < 0 {
				j = len(s)
			} else {
				j += e + 1
			}
			k = tkIdent
		default:
			if j < len(s) {
				two := s[i : j+1]
				switch two {
				case "<>", "!=", "<=", ">=", "||", "=>", "->":
					j++
				}
			}
			k = tkPunct
		}
		out = append(out, token{kind: k, text: s[i:j]})
		i = j
	}
	return out
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') }

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
