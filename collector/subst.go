package collector

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Literal substitution, the way TPC's dsqgen makes query variants: every
// literal that a query compares with a column (col = v, col <> v, col < v,
// col IN (v, ...), col BETWEEN v AND w, with v possibly parenthesised,
// followed by arithmetic such as (2001 + 1), or typed: DATE '...',
// CAST('...' AS DATE)) is replaced by a value drawn from that column's real
// domain, read from the connector (Domains). One original literal of one
// column maps to one new value everywhere in the query, so related literals
// stay related ("dyear" = 2001 ... "dyear" = (2001 + 1)); different originals
// of one column get different values where the domain allows it. A BETWEEN
// keeps its width. Columns are resolved through table aliases, column
// aliases ("d_year" "dyear") and, for unqualified names, the catalog's
// tables. Surrogate keys (*_sk, TPC-H *key) are never substituted.

// litSpan is a literal in the token stream: tokens [start, end] are
// replaced as a whole; value is its value as text (no quotes).
type litSpan struct {
	start, end int
	kind       string // "num", "str" or "date"
	value      string
	quoted     bool // the replaced token is a string literal ('...')
}

// litGroup is a set of literals compared with one column.
type litGroup struct {
	column string // "table.column"
	op     string // "=", "<", "in", "between", ...
	lits   []litSpan
}

// analyzeSQL finds the substitutable literal groups of a query whose tables
// belong to catalog cols (table -> column -> type).
func analyzeSQL(toks []token, cols map[string]map[string]string) []litGroup {
	sig := sigIndex(toks)
	at := func(p int) token {
		if p < 0 || p >= len(sig) {
			return token{kind: tkSpace}
		}
		return toks[sig[p]]
	}
	// Table aliases and column aliases.
	tableAlias := map[string]string{}
	colAlias := map[string]string{}
	inQuery := map[string]bool{}
	colTables := map[string][]string{}
	for t, cs := range cols {
		for c := range cs {
			colTables[c] = append(colTables[c], t)
		}
	}
	for _, ts := range colTables {
		sort.Strings(ts)
	}
	aliasAfter := func(p int) string { // alias following position p, if any
		n := at(p + 1)
		if n.keyword("as") {
			n = at(p + 2)
		}
		if n.kind == tkIdent && !sqlKeywords[n.word()] {
			return n.word()
		}
		return ""
	}
	for p := range sig {
		t := at(p)
		if t.kind != tkIdent || at(p+1).text == "." || at(p+1).text == "(" {
			continue
		}
		w := t.word()
		if _, ok := cols[w]; ok && at(p-1).text != "." || ok && at(p-2).kind == tkIdent {
			inQuery[w] = true
			tableAlias[w] = w
			if a := aliasAfter(p); a != "" {
				tableAlias[a] = w
			}
			continue
		}
		if ts, ok := colTables[w]; ok {
			if a := aliasAfter(p); a != "" && a != w {
				if len(ts) == 1 {
					colAlias[a] = ts[0] + "." + w
				} else {
					colAlias[a] = "?." + w
				}
			}
		}
	}
	resolve := func(p int) string {
		w := at(p).word()
		if at(p-1).text == "." && at(p-2).kind == tkIdent {
			q := at(p - 2).word()
			if tbl, ok := tableAlias[q]; ok {
				if _, ok := cols[tbl][w]; ok {
					return tbl + "." + w
				}
			}
		}
		if ts := colTables[w]; len(ts) == 1 {
			return ts[0] + "." + w
		} else if len(ts) > 1 {
			var hit []string
			for _, t := range ts {
				if inQuery[t] {
					hit = append(hit, t)
				}
			}
			if len(hit) == 1 {
				return hit[0] + "." + w
			}
			return ""
		}
		if c, ok := colAlias[w]; ok && !strings.HasPrefix(c, "?.") {
			return c
		}
		return ""
	}
	// literal parses a literal starting at sig position p (after optional
	// opening parentheses); it returns the span and the position after it.
	literal := func(p int) (litSpan, int, bool) {
		for at(p).text == "(" {
			p++
		}
		t := at(p)
		switch {
		case t.kind == tkNumber:
			return litSpan{start: sig[p], end: sig[p], kind: "num", value: t.text}, p + 1, true
		case t.text == "-" && at(p+1).kind == tkNumber:
			return litSpan{start: sig[p], end: sig[p+1], kind: "num", value: "-" + at(p+1).text}, p + 2, true
		case t.kind == tkString:
			return litSpan{start: sig[p], end: sig[p], kind: "str", value: t.stringValue(), quoted: true}, p + 1, true
		case (t.keyword("date") || t.keyword("decimal")) && at(p+1).kind == tkString:
			k := "date"
			if t.keyword("decimal") {
				k = "num"
			}
			return litSpan{start: sig[p+1], end: sig[p+1], kind: k, value: at(p + 1).stringValue(), quoted: true}, p + 2, true
		case t.keyword("cast") && at(p+1).text == "(" && at(p+2).kind == tkString && at(p+3).keyword("as") && at(p+4).keyword("date"):
			return litSpan{start: sig[p+2], end: sig[p+2], kind: "date", value: at(p + 2).stringValue(), quoted: true}, p + 6, true
		}
		return litSpan{}, p, false
	}
	// skipExpr advances to the next "," ")" or stop keyword at depth 0.
	skipExpr := func(p int, stopAnd bool) int {
		depth := 0
		for p < len(sig) {
			t := at(p)
			switch {
			case t.text == "(":
				depth++
			case t.text == ")":
				if depth == 0 {
					return p
				}
				depth--
			case depth == 0 && t.text == ",":
				return p
			case depth == 0 && t.kind == tkIdent && (stopAnd && t.keyword("and") || t.keyword("or") || t.keyword("then") || t.keyword("when") || t.keyword("group") || t.keyword("order") || t.keyword("else") || t.keyword("end")):
				return p
			}
			p++
		}
		return p
	}
	var groups []litGroup
	for p := range sig {
		t := at(p)
		if t.kind != tkIdent || sqlKeywords[t.word()] && !strings.HasPrefix(t.text, `"`) {
			continue
		}
		if n := at(p + 1); n.text == "." || n.text == "(" {
			continue
		}
		q := p + 1
		op := strings.ToLower(at(q).text)
		if at(q).keyword("not") {
			q++
			op = strings.ToLower(at(q).text)
		}
		var g litGroup
		switch op {
		case "=", "<>", "!=", "<", ">", "<=", ">=":
			if s, _, ok := literal(q + 1); ok {
				g.lits = append(g.lits, s)
			}
		case "in":
			if at(q+1).text != "(" {
				continue
			}
			r := q + 2
			for {
				s, next, ok := literal(r)
				if !ok {
					g.lits = nil
					break
				}
				g.lits = append(g.lits, s)
				r = skipExpr(next, false)
				if at(r).text != "," {
					break
				}
				r++
			}
		case "between":
			s1, next, ok := literal(q + 1)
			if !ok {
				continue
			}
			r := skipExpr(next, true)
			if !at(r).keyword("and") {
				continue
			}
			s2, _, ok := literal(r + 1)
			if !ok {
				continue
			}
			g.lits = []litSpan{s1, s2}
		default:
			continue
		}
		if len(g.lits) == 0 {
			continue
		}
		col := resolve(p)
		if col == "" || skipColumn(col) {
			continue
		}
		g.column, g.op = col, op
		groups = append(groups, g)
	}
	return groups
}

// skipColumn reports columns that are never substituted: surrogate and
// foreign keys compare with other keys, not with meaningful values.
func skipColumn(col string) bool {
	c := col[strings.IndexByte(col, '.')+1:]
	return strings.HasSuffix(c, "_sk") || strings.HasSuffix(c, "key")
}

// substitution is one variant's choice of values.
type substitution struct {
	rng    *rand.Rand
	dom    func(column string) *Domain
	chosen map[string]string          // column + "\x00" + original -> new value
	used   map[string]map[string]bool // column -> values already chosen
	params map[string]string
}

// choose returns the new value of original literal orig of column col,
// consistently within the query.
func (s *substitution) choose(col, orig string, d *Domain) string {
	k := col + "\x00" + orig
	if v, ok := s.chosen[k]; ok {
		return v
	}
	var v string
	if d.Kind == "date" {
		v = d.randomDate(s.rng)
	} else {
		v = d.Values[s.rng.IntN(len(d.Values))]
		if len(d.Values) > len(s.used[col])+1 {
			for tries := 0; s.used[col][v] && tries < 50; tries++ {
				v = d.Values[s.rng.IntN(len(d.Values))]
			}
		}
	}
	s.set(col, orig, v)
	return v
}

func (s *substitution) set(col, orig, v string) {
	s.chosen[col+"\x00"+orig] = v
	if s.used[col] == nil {
		s.used[col] = map[string]bool{}
	}
	s.used[col][v] = true
	s.params[col+"["+orig+"]"] = v
}

// Substitute returns a variant of sql (placeholders already filled) with
// the literals of groups replaced by values drawn with rng from the domains,
// and the chosen parameters ("table.column[original]" -> new value).
// Literals whose column has no usable domain stay as they are.
func substitute(sql string, cols map[string]map[string]string, dom func(string) *Domain, rng *rand.Rand) (string, map[string]string) {
	toks := tokenize(sql)
	groups := analyzeSQL(toks, cols)
	s := &substitution{rng: rng, dom: dom, chosen: map[string]string{}, used: map[string]map[string]bool{}, params: map[string]string{}}
	repl := map[int]litSpan{}
	newText := map[int]string{}
	for _, g := range groups {
		d := dom(g.column)
		if d == nil || d.empty() {
			continue
		}
		ok := true
		for _, l := range g.lits {
			if !d.accepts(l.kind) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		if g.op == "between" && len(g.lits) == 2 {
			lo, hi := g.lits[0], g.lits[1]
			nlo := s.choose(g.column, lo.value, d)
			nhi, ok := s.chosen[g.column+"\x00"+hi.value]
			if !ok {
				nhi = shiftLike(lo.value, hi.value, nlo, d.Kind)
				s.set(g.column, hi.value, nhi)
			}
			repl[lo.start], newText[lo.start] = lo, render(lo, nlo)
			repl[hi.start], newText[hi.start] = hi, render(hi, nhi)
			continue
		}
		for _, l := range g.lits {
			repl[l.start], newText[l.start] = l, render(l, s.choose(g.column, l.value, d))
		}
	}
	var b strings.Builder
	for i := 0; i < len(toks); i++ {
		if l, ok := repl[i]; ok {
			b.WriteString(newText[i])
			i = l.end
			continue
		}
		b.WriteString(toks[i].text)
	}
	return b.String(), s.params
}

// render writes value v in the syntax of the literal it replaces.
func render(l litSpan, v string) string {
	if l.quoted {
		return quoteString(v)
	}
	if strings.HasPrefix(v, "-") {
		return "(" + v + ")"
	}
	return v
}

// shiftLike computes the upper bound of a BETWEEN whose lower bound moved
// from lo to nlo, keeping the width hi - lo.
func shiftLike(lo, hi, nlo, kind string) string {
	if kind == "date" {
		a, err1 := time.Parse(time.DateOnly, lo)
		b, err2 := time.Parse(time.DateOnly, hi)
		n, err3 := time.Parse(time.DateOnly, nlo)
		if err1 != nil || err2 != nil || err3 != nil {
			return nlo
		}
		return n.Add(b.Sub(a)).Format(time.DateOnly)
	}
	a, err1 := strconv.ParseFloat(lo, 64)
	b, err2 := strconv.ParseFloat(hi, 64)
	n, err3 := strconv.ParseFloat(nlo, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return nlo
	}
	dec := 0
	for _, s := range []string{hi, nlo} {
		if i := strings.IndexByte(s, '.'); i >= 0 && len(s)-i-1 > dec {
			dec = len(s) - i - 1
		}
	}
	return strconv.FormatFloat(n+(b-a), 'f', dec, 64)
}

// Domain is the set of values of one column, read from the connector.
type Domain struct {
	Kind   string   `json:"kind"`             // "num", "str" or "date"
	Values []string `json:"values,omitempty"` // num and str: distinct values (a sample for large domains), sorted
	Min    string   `json:"min,omitempty"`    // date: first day
	Max    string   `json:"max,omitempty"`    // date: last day
}

func (d *Domain) empty() bool {
	if d.Kind == "date" {
		return d.Min == "" || d.Max == ""
	}
	return len(d.Values) == 0
}

// accepts reports whether a literal of kind k can take this domain's values.
func (d *Domain) accepts(k string) bool {
	switch d.Kind {
	case "date":
		return k == "date" || k == "str"
	default:
		return k == d.Kind
	}
}

// randomDate draws a day uniformly from [Min, Max - 1 year] (so that
// intervals added by the query mostly stay inside the data).
func (d *Domain) randomDate(rng *rand.Rand) string {
	a, err1 := time.Parse(time.DateOnly, d.Min)
	b, err2 := time.Parse(time.DateOnly, d.Max)
	if err1 != nil || err2 != nil {
		return d.Min
	}
	if b.Sub(a) > 2*365*24*time.Hour {
		b = b.AddDate(-1, 0, 0)
	}
	days := int(b.Sub(a).Hours() / 24)
	if days <= 0 {
		return d.Min
	}
	return a.AddDate(0, 0, rng.IntN(days+1)).Format(time.DateOnly)
}

// String is for debugging.
func (g litGroup) String() string {
	var vs []string
	for _, l := range g.lits {
		vs = append(vs, l.kind+":"+l.value)
	}
	return fmt.Sprintf("%s %s %v", g.column, g.op, vs)
}
