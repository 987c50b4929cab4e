package featurize

import (
	"fmt"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// Lexer for Trino's rendered expressions (filterPredicate, criteria, join
// filter): IR text such as `(d_year = integer '2000')`, `$like(x, LikePattern
// '[a%]')`, `CAST(a AS decimal(9,3))`, `null::boolean`, and SQL-style text.
// The scanning is sqllex.Expr's; the parser sees string literals without
// their quotes and quoted identifiers unescaped.

type tokKind = sqllex.Kind

const (
	tEOF    = sqllex.EOF
	tIdent  = sqllex.Word   // bare identifier or keyword (case kept; compare with strings.EqualFold)
	tQuoted = sqllex.Quoted // "quoted identifier" (value unescaped)
	tString = sqllex.String // 'string literal' (the text between the quotes)
	tNumber = sqllex.Number // 12, 1.5, 1E3
	tOp     = sqllex.Punct  // = <> != < <= > >= + - * / % || :: -> ( ) , [ ] . ? { } ;
)

type token = sqllex.Token

// lex appends the tokens of s to dst, ending with a tEOF token. It never
// panics; unknown bytes become one-byte operator tokens that the parser then
// rejects or skips. An unterminated string or quoted identifier is an error.
func lex(s string, dst []token) ([]token, error) {
	start := len(dst)
	dst = sqllex.Expr.Append(dst, s, false)
	for i := start; i < len(dst); i++ {
		t := &dst[i]
		if t.Kind != tString && t.Kind != tQuoted {
			continue
		}
		if t.Unterminated {
			return dst, fmt.Errorf("unterminated %c at offset %d", t.Text[0], t.Pos)
		}
		if t.Kind == tString {
			t.Text = t.Inner() // values are dropped: no unescaping
		} else {
			t.Text = t.Value()
		}
	}
	return dst, nil
}
