package estimator

import (
	"strings"
)

// StatementKind classifies a SQL statement (DESIGN §2.1): which statements get
// an EXPLAIN and an estimate.
type StatementKind int

const (
	StmtUnknown       StatementKind = iota // empty or unrecognized
	StmtQuery                              // SELECT, WITH, VALUES, TABLE
	StmtInsert                             // INSERT
	StmtCreateTableAs                      // CREATE [OR REPLACE] TABLE ... AS query
	StmtMerge                              // MERGE
	StmtUpdate                             // UPDATE
	StmtDelete                             // DELETE
	StmtExecute                            // EXECUTE name [USING ...], EXECUTE IMMEDIATE
	StmtExplain                            // EXPLAIN [ANALYZE]
	StmtSetSession                         // SET SESSION, RESET SESSION, SET ROLE, SET PATH, SET TIME ZONE, SET SESSION AUTHORIZATION
	StmtUse                                // USE
	StmtShow                               // SHOW ...
	StmtDescribe                           // DESCRIBE / DESC INPUT / OUTPUT
	StmtPrepare                            // PREPARE
	StmtDeallocate                         // DEALLOCATE PREPARE
	StmtTransaction                        // START TRANSACTION, COMMIT, ROLLBACK
	StmtCall                               // CALL
	StmtAccessControl                      // GRANT, REVOKE, DENY
	StmtDDL                                // CREATE / DROP / ALTER / COMMENT / TRUNCATE / REFRESH without a query
	StmtAnalyze                            // ANALYZE (table statistics)
)

var kindNames = [...]string{
	StmtUnknown: "unknown", StmtQuery: "query", StmtInsert: "insert", StmtCreateTableAs: "create-table-as",
	StmtMerge: "merge", StmtUpdate: "update", StmtDelete: "delete", StmtExecute: "execute",
	StmtExplain: "explain", StmtSetSession: "set-session", StmtUse: "use", StmtShow: "show",
	StmtDescribe: "describe", StmtPrepare: "prepare", StmtDeallocate: "deallocate",
	StmtTransaction: "transaction", StmtCall: "call", StmtAccessControl: "access-control",
	StmtDDL: "ddl", StmtAnalyze: "analyze",
}

func (k StatementKind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Explainable reports whether statements of this kind get an EXPLAIN:
// queries, INSERT, CREATE TABLE AS, MERGE, UPDATE, DELETE and EXECUTE.
//
// Caution: EXPLAIN is not side-effect free for CREATE TABLE AS everywhere.
// On Trino's memory connector it creates the (empty) target table, so the
// real statement then fails with TABLE_ALREADY_EXISTS (trinodb/trino#130,
// open; seen on 476). Callers that estimate CTAS on such catalogs must skip
// it (StmtCreateTableAs, or an EXECUTE of a prepared CTAS).
func (k StatementKind) Explainable() bool {
	switch k {
	case StmtQuery, StmtInsert, StmtCreateTableAs, StmtMerge, StmtUpdate, StmtDelete, StmtExecute:
		return true
	}
	return false
}

// Explainable reports whether sql gets an EXPLAIN (see StatementKind.Explainable).
func Explainable(sql string) bool { return Classify(sql).Explainable() }

// Classify returns the kind of a SQL statement. It skips leading white space,
// comments (-- and /* */) and opening parentheses, and looks at the first
// keywords; CREATE TABLE counts as CREATE TABLE AS only when a query follows
// a top-level AS.
func Classify(sql string) StatementKind {
	words := firstWords(sql, 4)
	if len(words) == 0 {
		return StmtUnknown
	}
	w0 := words[0]
	at := func(i int) string {
		if i < len(words) {
			return words[i]
		}
		return ""
	}
	switch w0 {
	case "SELECT", "WITH", "VALUES", "TABLE":
		return StmtQuery
	case "INSERT":
		return StmtInsert
	case "MERGE":
		return StmtMerge
	case "UPDATE":
		return StmtUpdate
	case "DELETE":
		return StmtDelete
	case "EXECUTE":
		return StmtExecute
	case "EXPLAIN":
		return StmtExplain
	case "SET", "RESET":
		return StmtSetSession
	case "USE":
		return StmtUse
	case "SHOW":
		return StmtShow
	case "DESCRIBE", "DESC":
		return StmtDescribe
	case "PREPARE":
		return StmtPrepare
	case "DEALLOCATE":
		return StmtDeallocate
	case "START", "COMMIT", "ROLLBACK", "BEGIN", "ABORT":
		return StmtTransaction
	case "CALL":
		return StmtCall
	case "GRANT", "REVOKE", "DENY":
		return StmtAccessControl
	case "ANALYZE":
		return StmtAnalyze
	case "CREATE":
		i := 1
		if at(i) == "OR" && at(i+1) == "REPLACE" {
			i += 2
		}
		if at(i) == "TABLE" && createHasQuery(sql) {
			return StmtCreateTableAs
		}
		return StmtDDL
	case "DROP", "ALTER", "COMMENT", "TRUNCATE", "REFRESH", "RENAME":
		return StmtDDL
	}
	return StmtUnknown
}

// firstWords returns up to n leading keywords (upper case), skipping white
// space, comments and opening parentheses before the first one.
func firstWords(sql string, n int) []string {
	var out []string
	i := 0
	for i < len(sql) && len(out) < n {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '(' && len(out) == 0:
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				return out
			}
			i += end + 4
		case isIdentStart(c) && c != '$' && c != '#':
			j := i + 1
			for j < len(sql) && isIdentPart(sql[j]) {
				j++
			}
			out = append(out, strings.ToUpper(sql[i:j]))
			i = j
		default:
			return out
		}
	}
	return out
}

// createHasQuery reports whether a CREATE TABLE statement has a top-level
// "AS" followed by a query (SELECT, WITH, VALUES, TABLE or a parenthesis).
func createHasQuery(sql string) bool {
	toks, err := lex(stripComments(sql), nil)
	if err != nil {
		return false
	}
	depth := 0
	for i, t := range toks {
		switch {
		case t.kind == tOp && t.text == "(":
			depth++
		case t.kind == tOp && t.text == ")":
			depth--
		case depth == 0 && t.kind == tIdent && strings.EqualFold(t.text, "AS") && i+1 < len(toks):
			n := toks[i+1]
			if n.kind == tOp && n.text == "(" {
				return true
			}
			if n.kind == tIdent {
				switch strings.ToUpper(n.text) {
				case "SELECT", "WITH", "VALUES", "TABLE":
					return true
				}
			}
		}
	}
	return false
}

// stripComments replaces -- and /* */ comments outside string literals and
// quoted identifiers with spaces.
func stripComments(sql string) string {
	if !strings.Contains(sql, "--") && !strings.Contains(sql, "/*") {
		return sql
	}
	b := []byte(sql)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '\'' || c == '"':
			for i++; i < len(b) && b[i] != c; i++ {
			}
		case c == '-' && i+1 < len(b) && b[i+1] == '-':
			for ; i < len(b) && b[i] != '\n'; i++ {
				b[i] = ' '
			}
		case c == '/' && i+1 < len(b) && b[i+1] == '*':
			j := i
			for ; j < len(b) && !(b[j] == '*' && j+1 < len(b) && b[j+1] == '/'); j++ {
				b[j] = ' '
			}
			if j+1 < len(b) {
				b[j], b[j+1] = ' ', ' '
			}
			i = j + 1
		}
	}
	return string(b)
}
