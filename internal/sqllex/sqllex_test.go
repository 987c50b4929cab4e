package sqllex

import (
	"strings"
	"testing"
)

// render writes tokens as "kind:text" separated by spaces, trivia left out.
func render(d *Dialect, src string) string {
	var b strings.Builder
	for _, t := range d.Append(nil, src, false) {
		if t.Kind == EOF {
			break
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.Kind.String() + ":" + t.Text)
		if t.Unterminated {
			b.WriteString("(unterminated)")
		}
	}
	return b.String()
}

func TestDialects(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    *Dialect
		src  string
		want string
	}{
		// quoting, the same in every dialect
		{"a string literal keeps its doubled quotes", Statement, `'it''s'`, `string:'it''s'`},
		{"a quoted identifier keeps its doubled quotes", Expr, `"a""b" x`, `quoted:"a""b" word:x`},
		{"an unterminated string runs to the end", Template, `'abc -- not a comment`, `string:'abc -- not a comment(unterminated)`},
		{"an unterminated quoted identifier runs to the end", Statement, `SELECT "x`, `word:SELECT quoted:"x(unterminated)`},
		{"quotes hide comment markers", Statement, `'--' "/*" x`, `string:'--' quoted:"/*" word:x`},
		// comments
		{"a line comment ends before the newline", Statement, "a -- c\nb", `word:a word:b`},
		{"a block comment", Template, "a /* c */ b", `word:a word:b`},
		{"an unterminated block comment runs to the end", Statement, "a /* c", `word:a`},
		{"Expr has no comments", Expr, "a--b /*c*/", `word:a punct:- punct:- word:b punct:/ punct:* word:c punct:* punct:/`},
		// words
		{"Statement words", Statement, `Sélect $x #y @z t.c`, `word:Sélect punct:$ word:x punct:# word:y punct:@ word:z word:t punct:. word:c`},
		{"Expr words may start with $ # @", Expr, `$like(x) #a @b é`, `word:$like punct:( word:x punct:) word:#a word:@b word:é`},
		{"Template words hold $ { } and ${var} is a word", Template, `t_${scale} ${database}.x`, `word:t_${scale} word:${database} punct:. word:x`},
		{"Template: a byte ≥ 0x80 is punctuation", Template, "é", "punct:\xc3 punct:\xa9"},
		// numbers
		{"Statement numbers run through word bytes", Statement, `1e-5 12abc .5 0x1F`, `number:1e-5 number:12abc number:.5 number:0x1F`},
		{"Expr numbers hold _ and an exponent", Expr, `1_000 1.5E+3 2e`, `number:1_000 number:1.5E+3 number:2 word:e`},
		{"Template numbers: digits, dots, exponent", Template, `1.5e+10x .06`, `number:1.5e+10 word:x number:.06`},
		// operators
		{"Expr two-byte operators", Expr, `a<>b!=c<=d>=e||f::g->h`, `word:a punct:<> word:b punct:!= word:c punct:<= word:d punct:>= word:e punct:|| word:f punct::: word:g punct:-> word:h`},
		{"Template two-byte operators", Template, `f(a=>1)<>2`, `word:f punct:( word:a punct:=> number:1 punct:) punct:<> number:2`},
		{"Statement operators are one byte", Statement, `a<>b;`, `word:a punct:< punct:> word:b punct:;`},
		// white space
		{"Statement: form feed is space", Statement, "a\fb", `word:a word:b`},
		{"Expr: form feed is not", Expr, "a\fb", "word:a punct:\f word:b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(tc.d, tc.src); got != tc.want {
				t.Errorf("%q:\n got %s\nwant %s", tc.src, got, tc.want)
			}
		})
	}
}

func TestTokenValues(t *testing.T) {
	for _, tc := range []struct {
		src          string
		value, inner string
	}{
		{`'it''s'`, `it's`, `it''s`},
		{`"a""b"`, `a"b`, `a""b`},
		{`'abc`, `abc`, `abc`},
		{`''`, ``, ``},
		{`x`, `x`, `x`},
	} {
		tok := Statement.Next(tc.src, 0)
		if tok.Value() != tc.value || tok.Inner() != tc.inner {
			t.Errorf("%q: Value %q Inner %q, want %q %q", tc.src, tok.Value(), tok.Inner(), tc.value, tc.inner)
		}
	}
	if tok := Statement.Next("select", 0); !tok.Is("SELECT") {
		t.Error(`"select" is not the keyword SELECT`)
	}
	if tok := Statement.Next(`"select"`, 0); tok.Is("SELECT") {
		t.Error(`a quoted identifier is a keyword`)
	}
}

func TestScannerSkipsTrivia(t *testing.T) {
	sc := NewScanner(Statement, " /* a */ SELECT -- b\n 1")
	var got []string
	for tok := sc.Next(); tok.Kind != EOF; tok = sc.Next() {
		got = append(got, tok.Text)
	}
	if strings.Join(got, "|") != "SELECT|1" {
		t.Errorf("got %q", got)
	}
}

// checkTokens: the tokens cover the input exactly, in order, with
// consistent positions; only the last may be unterminated.
func checkTokens(t *testing.T, d *Dialect, src string) {
	toks := d.Append(nil, src, true)
	var b strings.Builder
	for i, tok := range toks {
		if tok.Pos != b.Len() {
			t.Fatalf("%q: token %d at %d, want %d", src, i, tok.Pos, b.Len())
		}
		if tok.Kind == EOF {
			if i != len(toks)-1 || tok.Text != "" {
				t.Fatalf("%q: EOF at %d of %d", src, i, len(toks))
			}
			break
		}
		if tok.Text == "" {
			t.Fatalf("%q: empty %s token at %d", src, tok.Kind, tok.Pos)
		}
		if tok.Unterminated && i != len(toks)-2 {
			t.Fatalf("%q: unterminated %s token %d is not the last", src, tok.Kind, i)
		}
		b.WriteString(tok.Text)
		_ = tok.Value()
		_ = tok.Inner()
	}
	if b.String() != src {
		t.Fatalf("tokens give back %q, not %q", b.String(), src)
	}
}

func FuzzScan(f *testing.F) {
	for _, s := range []string{"SELECT 'a''b', \"c\"\"d\" FROM t -- x\n/* y */ WHERE a <> 1e-5",
		"(d_year = integer '2000') AND $like(x, LikePattern '[a%]')", "t_${scale} ${database}", "'", `"`, "/*", "--", "1e", "é.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, d := range []*Dialect{Statement, Expr, Template} {
			checkTokens(t, d, s)
		}
	})
}
