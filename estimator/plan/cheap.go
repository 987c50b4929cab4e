package plan

import (
	"strings"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// Cheap reports whether a statement is cheap by nature and needs no
// EXPLAIN to be placed: SHOW and DESCRIBE, and queries that read nothing
// but tables of the system catalog, information_schema views and VALUES
// lists (or no table at all: SELECT 1). Table names are resolved against
// the session's catalog and schema (X-Trino-Catalog, X-Trino-Schema) as
// Trino resolves them. The check is conservative: anything it cannot read
// as a plain table reference (a table function, an expression after FROM,
// an unterminated string) makes the statement not cheap, so it is
// explained as before.
//
// Why: a client that polls system.runtime.queries for its own query must
// not wait for an EXPLAIN of every poll.
func Cheap(sql, catalog, schema string) bool {
	switch Classify(sql) {
	case StmtShow, StmtDescribe:
		return true
	case StmtQuery:
	default:
		return false
	}
	var toks []sqllex.Token
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for t := sc.Next(); t.Kind != sqllex.EOF; t = sc.Next() {
		if t.Unterminated {
			return false
		}
		toks = append(toks, t)
	}
	r := cheapReader{toks: toks, ctes: cteNames(toks), catalog: strings.ToLower(catalog), schema: strings.ToLower(schema)}
	return r.cheap()
}

type cheapReader struct {
	toks            []sqllex.Token
	ctes            map[string]bool
	catalog, schema string
}

func (r *cheapReader) punct(i int, p string) bool {
	return i < len(r.toks) && r.toks[i].Kind == sqllex.Punct && r.toks[i].Text == p
}

func (r *cheapReader) name(i int) bool {
	return i < len(r.toks) && (r.toks[i].Kind == sqllex.Word || r.toks[i].Kind == sqllex.Quoted)
}

// fromEnds are the words that end a FROM clause at its depth.
var fromEnds = map[string]bool{"WHERE": true, "GROUP": true, "HAVING": true, "ORDER": true, "LIMIT": true,
	"OFFSET": true, "FETCH": true, "UNION": true, "EXCEPT": true, "INTERSECT": true, "WINDOW": true}

func (r *cheapReader) cheap() bool {
	toks := r.toks
	inFrom := map[int]bool{}
	depth := 0
	expect := len(toks) > 0 && toks[0].Is("TABLE") // TABLE name, a query
	start := 0
	if expect {
		start = 1
	}
	for i := start; i < len(toks); i++ {
		t := toks[i]
		if expect {
			expect = false
			switch {
			case r.punct(i, "("):
				depth++
				// A subquery, or a parenthesized relation (a join).
				if n := i + 1; r.punct(n, "(") || r.name(n) && !toks[n].Is("SELECT") && !toks[n].Is("WITH") && !toks[n].Is("VALUES") {
					expect = true
				}
			case t.Is("UNNEST") || t.Is("LATERAL"):
				// Reads its argument (scanned as usual), no table.
			case t.Is("TABLE"):
				if r.punct(i+1, "(") {
					return false // a table function
				}
				expect = true
			case r.name(i):
				j := i
				parts := []string{strings.ToLower(t.Value())}
				for r.punct(j+1, ".") && r.name(j+2) {
					parts = append(parts, strings.ToLower(toks[j+2].Value()))
					j += 2
				}
				if !r.systemTable(parts) {
					return false
				}
				i = j
			default:
				return false
			}
			continue
		}
		switch {
		case r.punct(i, "("):
			depth++
			if i > 0 && toks[i-1].Is("TABLE") {
				return false // TABLE(...) anywhere: a table function
			}
		case r.punct(i, ")"):
			inFrom[depth] = false
			depth--
		case t.Is("FROM"):
			inFrom[depth], expect = true, true
		case t.Is("JOIN"):
			expect = true
		case r.punct(i, ","):
			expect = inFrom[depth]
		case t.Kind == sqllex.Word && fromEnds[strings.ToUpper(t.Text)]:
			inFrom[depth] = false
		}
	}
	return !expect
}

// systemTable reports whether a table name (lower-cased parts) resolves to
// the system catalog or an information_schema, or names a WITH query.
func (r *cheapReader) systemTable(parts []string) bool {
	catalog, schema := r.catalog, r.schema
	switch len(parts) {
	case 1:
		if r.ctes[parts[0]] {
			return true
		}
	case 2:
		schema = parts[0]
	case 3:
		catalog, schema = parts[0], parts[1]
	default:
		return false
	}
	return catalog == "system" || schema == "information_schema"
}

// cteNames are the names a WITH clause defines (lower case), anywhere in
// the statement.
func cteNames(toks []sqllex.Token) map[string]bool {
	out := map[string]bool{}
	skipParens := func(j int) int { // j at "(": the index after its ")"
		d := 0
		for ; j < len(toks); j++ {
			switch {
			case toks[j].Kind == sqllex.Punct && toks[j].Text == "(":
				d++
			case toks[j].Kind == sqllex.Punct && toks[j].Text == ")":
				d--
				if d == 0 {
					return j + 1
				}
			}
		}
		return j
	}
	isP := func(j int, p string) bool { return j < len(toks) && toks[j].Kind == sqllex.Punct && toks[j].Text == p }
	for i, t := range toks {
		if !t.Is("WITH") {
			continue
		}
		j := i + 1
		if j < len(toks) && toks[j].Is("RECURSIVE") {
			j++
		}
		for j < len(toks) && (toks[j].Kind == sqllex.Word || toks[j].Kind == sqllex.Quoted) {
			out[strings.ToLower(toks[j].Value())] = true
			j++
			if isP(j, "(") {
				j = skipParens(j)
			}
			if j < len(toks) && toks[j].Is("AS") {
				j++
			}
			if isP(j, "(") {
				j = skipParens(j)
			}
			if !isP(j, ",") {
				break
			}
			j++
		}
	}
	return out
}
