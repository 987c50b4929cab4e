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
	r, ok := newRelationReader(sql, catalog, schema)
	if !ok {
		return false
	}
	cheap := true
	complete := r.walk(func(parts []string) {
		if !r.systemTable(parts) {
			cheap = false
		}
	})
	return complete && cheap
}

// TableName is a table a statement reads, resolved against the session's
// catalog and schema, lower case.
type TableName struct {
	Catalog, Schema, Table string
}

// String is the name as catalog.schema.table (unquoted).
func (n TableName) String() string { return n.Catalog + "." + n.Schema + "." + n.Table }

// Tables lists the tables a query statement names in its FROM and JOIN
// clauses (any depth, WITH queries excluded), resolved against the
// session's catalog and schema, each once, in order of first appearance.
// It reads the text only (no catalog): a name the session cannot resolve
// (a one-part name without a session schema) is left out, and so is
// anything that is not a plain table reference (a table function, UNNEST,
// a subquery: their tables are read inside). complete is false when some
// relation could not be read as a name (the list may miss tables).
// Statements other than queries (and EXPLAIN, SHOW, DDL) give none.
func Tables(sql, catalog, schema string) (tables []TableName, complete bool) {
	if Classify(sql) != StmtQuery {
		return nil, false
	}
	r, ok := newRelationReader(sql, catalog, schema)
	if !ok {
		return nil, false
	}
	resolved := true
	complete = r.walk(func(parts []string) {
		n, ok := r.resolve(parts)
		if !ok {
			if len(parts) != 1 || !r.ctes[parts[0]] {
				resolved = false
			}
			return
		}
		for _, t := range tables {
			if t == n {
				return
			}
		}
		tables = append(tables, n)
	})
	return tables, complete && resolved
}

// relationReader walks the relations of a query's text.
type relationReader struct {
	toks            []sqllex.Token
	ctes            map[string]bool
	catalog, schema string
}

// newRelationReader scans sql; false when a token is unterminated.
func newRelationReader(sql, catalog, schema string) (*relationReader, bool) {
	var toks []sqllex.Token
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for t := sc.Next(); t.Kind != sqllex.EOF; t = sc.Next() {
		if t.Unterminated {
			return nil, false
		}
		toks = append(toks, t)
	}
	return &relationReader{toks: toks, ctes: cteNames(toks), catalog: strings.ToLower(catalog), schema: strings.ToLower(schema)}, true
}

func (r *relationReader) punct(i int, p string) bool {
	return i < len(r.toks) && r.toks[i].Kind == sqllex.Punct && r.toks[i].Text == p
}

func (r *relationReader) name(i int) bool {
	return i < len(r.toks) && (r.toks[i].Kind == sqllex.Word || r.toks[i].Kind == sqllex.Quoted)
}

// fromEnds are the words that end a FROM clause at its depth.
var fromEnds = map[string]bool{"WHERE": true, "GROUP": true, "HAVING": true, "ORDER": true, "LIMIT": true,
	"OFFSET": true, "FETCH": true, "UNION": true, "EXCEPT": true, "INTERSECT": true, "WINDOW": true}

// notCalls are the words a parenthesis may follow without being a
// function call's.
var notCalls = map[string]bool{"IN": true, "EXISTS": true, "AS": true, "FROM": true, "JOIN": true, "ON": true,
	"SELECT": true, "WHERE": true, "AND": true, "OR": true, "NOT": true, "ALL": true, "ANY": true, "SOME": true,
	"LATERAL": true, "USING": true, "BY": true, "HAVING": true, "WHEN": true, "THEN": true, "ELSE": true,
	"UNION": true, "EXCEPT": true, "INTERSECT": true, "VALUES": true, "WITH": true, "TABLE": true}

// walk calls visit with the name (lower-cased parts) of every plain table
// reference after FROM, JOIN or a FROM list's comma (WITH queries
// included: visit tells them apart). It reports whether every relation
// was readable: false for a table function, an expression after FROM
// (e.g. a FROM inside a function call, as in extract(year FROM d), whose
// operand is not visited), or a dangling FROM.
func (r *relationReader) walk(visit func(parts []string)) (complete bool) {
	toks := r.toks
	complete = true
	inFrom := map[int]bool{}
	call := map[int]bool{} // depths opened by a function call's parenthesis
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
				call[depth] = false
				// A subquery, or a parenthesized relation (a join).
				if n := i + 1; r.punct(n, "(") || r.name(n) && !toks[n].Is("SELECT") && !toks[n].Is("WITH") && !toks[n].Is("VALUES") {
					expect = true
				}
			case t.Is("UNNEST") || t.Is("LATERAL"):
				// Reads its argument (scanned as usual), no table.
			case t.Is("TABLE"):
				if r.punct(i+1, "(") {
					complete = false // a table function
					continue
				}
				expect = true
			case r.name(i):
				j := i
				parts := []string{strings.ToLower(t.Value())}
				for r.punct(j+1, ".") && r.name(j+2) {
					parts = append(parts, strings.ToLower(toks[j+2].Value()))
					j += 2
				}
				visit(parts)
				i = j
			default:
				complete = false
			}
			continue
		}
		switch {
		case r.punct(i, "("):
			depth++
			call[depth] = i > 0 && toks[i-1].Kind == sqllex.Word && !notCalls[strings.ToUpper(toks[i-1].Text)] &&
				!toks[min(i+1, len(toks)-1)].Is("SELECT") && !toks[min(i+1, len(toks)-1)].Is("WITH")
			if i > 0 && toks[i-1].Is("TABLE") {
				complete = false // TABLE(...) anywhere: a table function
			}
		case r.punct(i, ")"):
			inFrom[depth], call[depth] = false, false
			depth--
		case t.Is("FROM"):
			if call[depth] {
				complete = false // extract(x FROM y), substring(s FROM n): no relation
				continue
			}
			inFrom[depth], expect = true, true
		case t.Is("JOIN"):
			expect = true
		case r.punct(i, ","):
			expect = inFrom[depth]
		case t.Kind == sqllex.Word && fromEnds[strings.ToUpper(t.Text)]:
			inFrom[depth] = false
		}
	}
	if expect {
		complete = false
	}
	return complete
}

// resolve turns a table reference (lower-cased parts) into a full name;
// false for a WITH query's name, a name the session cannot complete, or
// one of more than three parts.
func (r *relationReader) resolve(parts []string) (TableName, bool) {
	n := TableName{Catalog: r.catalog, Schema: r.schema}
	switch len(parts) {
	case 1:
		if r.ctes[parts[0]] {
			return n, false
		}
		n.Table = parts[0]
	case 2:
		n.Schema, n.Table = parts[0], parts[1]
	case 3:
		n.Catalog, n.Schema, n.Table = parts[0], parts[1], parts[2]
	default:
		return n, false
	}
	return n, n.Catalog != "" && n.Schema != ""
}

// systemTable reports whether a table name (lower-cased parts) resolves to
// the system catalog or an information_schema, or names a WITH query.
func (r *relationReader) systemTable(parts []string) bool {
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
