package estimator

import (
	"fmt"
	"strings"
)

// Lexer for Trino's rendered expressions (filterPredicate, criteria, join
// filter): IR text such as `(d_year = integer '2000')`, `$like(x, LikePattern
// '[a%]')`, `CAST(a AS decimal(9,3))`, `null::boolean`, and SQL-style text.

type tokKind uint8

const (
	tEOF    tokKind = iota
	tIdent          // bare identifier or keyword (case kept; compare with strings.EqualFold)
	tQuoted         // "quoted identifier" (value unescaped)
	tString         // 'string literal'
	tNumber         // 12, 1.5, 1E3
	tOp             // = <> != < <= > >= + - * / % || :: -> ( ) , [ ] . ? { } ;
)

type token struct {
	kind tokKind
	text string
	pos  int
}

// lex splits s into tokens. It never panics; unknown bytes become one-byte
// operator tokens that the parser then rejects or skips.
func lex(s string, dst []token) ([]token, error) {
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentPart(s[j]) {
				j++
			}
			dst = append(dst, token{tIdent, s[i:j], i})
			i = j
		case c >= '0' && c <= '9' || (c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9'):
			j := i + 1
			for j < len(s) {
				d := s[j]
				if d >= '0' && d <= '9' || d == '.' || d == '_' {
					j++
				} else if (d == 'e' || d == 'E') && j+1 < len(s) {
					j++
					if s[j] == '+' || s[j] == '-' {
						j++
					}
				} else {
					break
				}
			}
			dst = append(dst, token{tNumber, s[i:j], i})
			i = j
		case c == '\'' || c == '"':
			// String literal values are dropped by the parser: keep the raw
			// text. Quoted identifiers are unescaped ("" → ").
			q := c
			j := i + 1
			closed, escaped := false, false
			for j < len(s) {
				if s[j] == q {
					if j+1 < len(s) && s[j+1] == q {
						escaped = true
						j += 2
						continue
					}
					closed = true
					j++
					break
				}
				j++
			}
			if !closed {
				return dst, fmt.Errorf("unterminated %c at offset %d", q, i)
			}
			k, text := tString, s[i+1:j-1]
			if q == '"' {
				k = tQuoted
				if escaped {
					text = strings.ReplaceAll(text, `""`, `"`)
				}
			}
			dst = append(dst, token{k, text, i})
			i = j
		default:
			if i+1 < len(s) {
				two := s[i : i+2]
				switch two {
				case "<>", "!=", "<=", ">=", "||", "::", "->":
					dst = append(dst, token{tOp, two, i})
					i += 2
					continue
				}
			}
			dst = append(dst, token{tOp, s[i : i+1], i})
			i++
		}
	}
	return append(dst, token{tEOF, "", len(s)}), nil
}

func isIdentStart(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' || c == '#' || c == '@' || c >= 0x80
}

func isIdentPart(c byte) bool {
	return isIdentStart(c) || c >= '0' && c <= '9'
}
