package sqllex

import "strings"

// Kind is the lexical class of a token.
type Kind uint8

const (
	EOF     Kind = iota // end of input (Text is empty)
	Space               // a run of white space
	Comment             // -- to the end of the line (newline excluded), or /* ... */
	Word                // a bare word: keyword or identifier (and ${var} in Template)
	Quoted              // "quoted identifier", "" inside for a quote
	String              // 'string literal', '' inside for a quote
	Number              // 12, 1.5, .5, 1e3 (the dialect says what else a number holds)
	Punct               // an operator or punctuation: one byte, or a two-byte operator of the dialect
)

var kindNames = [...]string{EOF: "EOF", Space: "space", Comment: "comment", Word: "word", Quoted: "quoted",
	String: "string", Number: "number", Punct: "punct"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Token is one token of the input.
type Token struct {
	Kind Kind
	// Unterminated marks a String, Quoted or block Comment that runs to the
	// end of the input without its closing quote or */.
	Unterminated bool
	// Text is the token's source text, quotes included: the Text of all
	// tokens (Space and Comment included) put together is the input.
	Text string
	// Pos is the byte offset of Text in the input.
	Pos int
}

// Value is the content of a String or Quoted token, quotes removed and
// doubled quotes undone; for other kinds it is Text.
func (t Token) Value() string {
	if t.Kind != String && t.Kind != Quoted {
		return t.Text
	}
	s := t.Text[1:]
	if !t.Unterminated {
		s = s[:len(s)-1]
	}
	q := t.Text[:1]
	if strings.Contains(s, q+q) {
		s = strings.ReplaceAll(s, q+q, q)
	}
	return s
}

// Inner is the text between the quotes of a String or Quoted token, doubled
// quotes kept as they are; for other kinds it is Text.
func (t Token) Inner() string {
	if t.Kind != String && t.Kind != Quoted {
		return t.Text
	}
	if t.Unterminated {
		return t.Text[1:]
	}
	return t.Text[1 : len(t.Text)-1]
}

// Is reports whether t is the bare word kw, compared without regard to
// ASCII case. Quoted identifiers are never keywords.
func (t Token) Is(kw string) bool { return t.Kind == Word && strings.EqualFold(t.Text, kw) }

// Trivia reports whether t is white space or a comment.
func (t Token) Trivia() bool { return t.Kind == Space || t.Kind == Comment }

// Character classes of a dialect.
const (
	cSpace     uint8 = 1 << iota // white space
	cWordStart                   // may start a word
	cWordPart                    // may continue a word
	cOp2First                    // first byte of a two-byte operator
)

// numberRule is how far a number runs once it has started (a digit, or a
// '.' followed by a digit).
type numberRule uint8

const (
	// numSQL: digits and dots, then an optional exponent e[+-]digits.
	numSQL numberRule = iota
	// numWord: word bytes and dots, and a sign right after an e or E: the
	// whole of 1e-5, 12abc or 0x1F is one number.
	numWord
	// numExpr: digits, dots and underscores (1_000); an e or E that is not
	// the last byte of the input is taken with the sign after it.
	numExpr
)

// Dialect is what counts as a word, a number and an operator in one kind of
// SQL text. The three dialects of the package are the only ones; a Dialect
// is read-only.
type Dialect struct {
	class     [256]uint8
	ops2      []string // two-byte operators
	number    numberRule
	comments  bool // -- and /* */ are comments (else they are operators)
	templates bool // ${...} is a word
}

func newDialect(space, wordStart, wordPart string, high bool, ops2 []string) *Dialect {
	d := &Dialect{ops2: ops2}
	for i := 0; i < len(space); i++ {
		d.class[space[i]] |= cSpace
	}
	letters := "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
	for _, s := range []string{letters, wordStart} {
		for i := 0; i < len(s); i++ {
			d.class[s[i]] |= cWordStart | cWordPart
		}
	}
	for _, s := range []string{"0123456789", wordPart} {
		for i := 0; i < len(s); i++ {
			d.class[s[i]] |= cWordPart
		}
	}
	if high {
		for c := 0x80; c < 0x100; c++ {
			d.class[c] |= cWordStart | cWordPart
		}
	}
	for _, op := range ops2 {
		d.class[op[0]] |= cOp2First
	}
	return d
}

var (
	// Statement is SQL as clients send it: comments; words of ASCII letters,
	// digits, _ and any byte ≥ 0x80; a number runs through the word bytes
	// after it; every operator is one byte.
	Statement = func() *Dialect {
		d := newDialect(" \t\n\r\f", "", "", true, nil)
		d.comments, d.number = true, numWord
		return d
	}()
	// Expr is an expression as Trino renders it in a plan (filterPredicate,
	// join criteria): no comments; words may also start with $ # @ and hold
	// bytes ≥ 0x80; numbers may hold _; the two-byte operators are
	// <> != <= >= || :: ->.
	Expr = func() *Dialect {
		d := newDialect(" \t\n\r", "$#@", "", true, []string{"<>", "!=", "<=", ">=", "||", "::", "->"})
		d.number = numExpr
		return d
	}()
	// Template is workload SQL with ${var} placeholders: comments; words of
	// ASCII letters, digits and _ that may also hold $ { }; a ${...} on its
	// own is a word; a byte ≥ 0x80 is a one-byte Punct; the two-byte
	// operators are <> != <= >= || => ->.
	Template = func() *Dialect {
		d := newDialect(" \t\n\r", "", "${}", false, []string{"<>", "!=", "<=", ">=", "||", "=>", "->"})
		d.comments, d.templates = true, true
		return d
	}()
)

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// Next returns the token at byte offset i of src (Space and Comment
// included), or an EOF token when i is at the end. The next token starts at
// i + len(tok.Text).
func (d *Dialect) Next(src string, i int) Token {
	if i >= len(src) {
		return Token{Kind: EOF, Pos: len(src)}
	}
	c := src[i]
	j := i + 1
	k := Punct
	unterminated := false
	switch {
	case d.class[c]&cSpace != 0:
		j, k = d.run(src, j, cSpace), Space
	case c == '-' && d.comments && j < len(src) && src[j] == '-':
		if e, found := through(src, j, "\n"); found {
			j = e - 1 // the newline is not the comment's
		} else {
			j = e
		}
		k = Comment
	case c == '/' && d.comments && j < len(src) && src[j] == '*':
		var found bool
		j, found = through(src, j+1, "*/")
		k, unterminated = Comment, !found
	case c == '\'' || c == '"':
		unterminated = true
		for j < len(src) {
			if src[j] == c {
				if j+1 < len(src) && src[j+1] == c {
					j += 2
					continue
				}
				j++
				unterminated = false
				break
			}
			j++
		}
		k = String
		if c == '"' {
			k = Quoted
		}
	case isDigit(c) || c == '.' && j < len(src) && isDigit(src[j]):
		j = d.numberEnd(src, i)
		k = Number
	case d.class[c]&cWordStart != 0:
		j, k = d.run(src, j, cWordPart), Word
	case c == '$' && d.templates && j < len(src) && src[j] == '{':
		j, _ = through(src, j, "}")
		k = Word
	case d.class[c]&cOp2First != 0 && j < len(src):
		for _, op := range d.ops2 {
			if op[0] == c && op[1] == src[j] {
				j++
				break
			}
		}
	}
	return Token{Kind: k, Text: src[i:j], Pos: i, Unterminated: unterminated}
}

// run is the end of the run of bytes of class c that starts at src[j].
func (d *Dialect) run(src string, j int, c uint8) int {
	for j < len(src) && d.class[src[j]]&c != 0 {
		j++
	}
	return j
}

// through is the end of the first sep in src[j:], and true; or the end of
// src and false when there is none.
func through(src string, j int, sep string) (int, bool) {
	if e := strings.Index(src[j:], sep); e >= 0 {
		return j + e + len(sep), true
	}
	return len(src), false
}

// numberEnd is the end of the number that starts at src[i].
func (d *Dialect) numberEnd(src string, i int) int {
	j := i + 1
	switch d.number {
	case numExpr:
		for j < len(src) {
			c := src[j]
			if isDigit(c) || c == '.' || c == '_' {
				j++
			} else if (c == 'e' || c == 'E') && j+1 < len(src) {
				j++
				if src[j] == '+' || src[j] == '-' {
					j++
				}
			} else {
				break
			}
		}
	case numWord:
		for j < len(src) && (d.class[src[j]]&cWordPart != 0 || src[j] == '.' ||
			(src[j] == '+' || src[j] == '-') && (src[j-1] == 'e' || src[j-1] == 'E')) {
			j++
		}
	default:
		for j < len(src) && (isDigit(src[j]) || src[j] == '.') {
			j++
		}
		if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
			j++
			if j < len(src) && (src[j] == '+' || src[j] == '-') {
				j++
			}
			for j < len(src) && isDigit(src[j]) {
				j++
			}
		}
	}
	return j
}

// Append appends the tokens of src to dst and returns it, ending with an
// EOF token. With trivia false, Space and Comment tokens are left out.
func (d *Dialect) Append(dst []Token, src string, trivia bool) []Token {
	for i := 0; ; {
		t := d.Next(src, i)
		if t.Kind == EOF {
			return append(dst, t)
		}
		i += len(t.Text)
		if trivia || !t.Trivia() {
			dst = append(dst, t)
		}
	}
}

// Scanner reads the tokens of one text in order, for callers that stop
// early (the classifier reads a statement's first words).
type Scanner struct {
	d   *Dialect
	src string
	pos int
}

// NewScanner scans src in dialect d.
func NewScanner(d *Dialect, src string) *Scanner { return &Scanner{d: d, src: src} }

// Next returns the next token that is not Space or Comment, or EOF.
// (An unterminated block comment is skipped like any other: check
// NextTrivia for it.)
func (s *Scanner) Next() Token {
	for {
		t := s.NextTrivia()
		if !t.Trivia() {
			return t
		}
	}
}

// NextTrivia returns the next token, Space and Comment included, or EOF.
func (s *Scanner) NextTrivia() Token {
	t := s.d.Next(s.src, s.pos)
	s.pos += len(t.Text)
	return t
}
