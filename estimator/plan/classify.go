package plan

import (
	"fmt"
	"strings"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// StatementKind classifies a SQL statement (docs/design.md §2.1): which statements get
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

// SafeToExplain reports whether Prestroid may EXPLAIN a statement of this
// kind on a caller's behalf to estimate it, and when not, why not (a reason
// for the caller, e.g. in the X-Prestroid-Decision header). It is
// Explainable without CREATE TABLE AS: on Trino 476, EXPLAIN of CREATE TABLE
// ... AS creates the (empty) target table on some connectors (memory;
// trinodb/trino#130), and the client's own statement then fails with
// TABLE_ALREADY_EXISTS. The proxy must never change what a statement does,
// so it does not explain CTAS. (An EXECUTE of a prepared CTAS is not
// recognized here.)
func (k StatementKind) SafeToExplain() (ok bool, reason string) {
	switch {
	case k == StmtCreateTableAs:
		return false, "CREATE TABLE AS is not explained (EXPLAIN creates the table on some connectors, trinodb/trino#130)"
	case !k.Explainable():
		return false, fmt.Sprintf("a %s statement is not estimated", k)
	}
	return true, ""
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
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for len(out) < n {
		t := sc.NextTrivia()
		switch {
		case t.Kind == sqllex.Comment && t.Unterminated:
			return out
		case t.Trivia():
		case t.Kind == sqllex.Punct && t.Text == "(" && len(out) == 0:
		case t.Kind == sqllex.Word:
			out = append(out, strings.ToUpper(t.Text))
		default:
			return out
		}
	}
	return out
}

// createHasQuery reports whether a CREATE TABLE statement has a top-level
// "AS" followed by a query (SELECT, WITH, VALUES, TABLE or a parenthesis).
// A statement with an unterminated string or quoted identifier has none.
func createHasQuery(sql string) bool {
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	depth, afterAS, found := 0, false, false
	for t := sc.Next(); t.Kind != sqllex.EOF; t = sc.Next() {
		if t.Unterminated {
			return false
		}
		if afterAS && (t.Kind == sqllex.Punct && t.Text == "(" ||
			t.Is("SELECT") || t.Is("WITH") || t.Is("VALUES") || t.Is("TABLE")) {
			found = true
		}
		afterAS = false
		switch {
		case t.Kind == sqllex.Punct && t.Text == "(":
			depth++
		case t.Kind == sqllex.Punct && t.Text == ")":
			depth--
		case depth == 0 && t.Is("AS"):
			afterAS = true
		}
	}
	return found
}
