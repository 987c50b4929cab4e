package plan

import (
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		sql  string
		want StatementKind
	}{
		{"SELECT 1", StmtQuery},
		{"  select * from t", StmtQuery},
		{"-- comment; with a semicolon\nSELECT 1", StmtQuery},
		{"/* block */ /* two */ WITH x AS (SELECT 1) SELECT * FROM x", StmtQuery},
		{"((SELECT 1) UNION ALL (SELECT 2))", StmtQuery},
		{"VALUES 1, 2", StmtQuery},
		{"TABLE tpch.tiny.nation", StmtQuery},
		{"INSERT INTO t SELECT * FROM s", StmtInsert},
		{"CREATE TABLE t AS SELECT * FROM s", StmtCreateTableAs},
		{"create or replace table t comment 'x AS y' with (format = 'ORC') as (select 1)", StmtCreateTableAs},
		{"CREATE TABLE t (a bigint, b varchar) WITH (format = 'ORC')", StmtDDL},
		{"CREATE TABLE t (a bigint) COMMENT 'AS SELECT'", StmtDDL},
		{"CREATE TABLE t -- AS SELECT\n(a bigint) /* AS SELECT */", StmtDDL},
		{"CREATE TABLE \"x -- y\" /* c */ AS -- c\nSELECT 1", StmtCreateTableAs},
		{"CREATE VIEW v AS SELECT 1", StmtDDL},
		{"CREATE MATERIALIZED VIEW v AS SELECT 1", StmtDDL},
		{"DROP TABLE t", StmtDDL},
		{"ALTER TABLE t ADD COLUMN c bigint", StmtDDL},
		{"MERGE INTO t USING s ON t.k = s.k WHEN MATCHED THEN DELETE", StmtMerge},
		{"UPDATE t SET a = 1 WHERE b = 2", StmtUpdate},
		{"DELETE FROM t WHERE a = 1", StmtDelete},
		{"EXECUTE q1 USING 1, 'a'", StmtExecute},
		{"EXECUTE IMMEDIATE 'SELECT 1'", StmtExecute},
		{"EXPLAIN SELECT 1", StmtExplain},
		{"EXPLAIN ANALYZE SELECT 1", StmtExplain},
		{"SET SESSION query_max_run_time = '1h'", StmtSetSession},
		{"RESET SESSION query_max_run_time", StmtSetSession},
		{"SET ROLE admin", StmtSetSession},
		{"SET TIME ZONE 'UTC'", StmtSetSession},
		{"USE tpch.tiny", StmtUse},
		{"SHOW TABLES", StmtShow},
		{"DESCRIBE t", StmtDescribe},
		{"DESCRIBE OUTPUT q1", StmtDescribe},
		{"PREPARE q1 FROM SELECT 1", StmtPrepare},
		{"DEALLOCATE PREPARE q1", StmtDeallocate},
		{"START TRANSACTION", StmtTransaction},
		{"COMMIT", StmtTransaction},
		{"ROLLBACK", StmtTransaction},
		{"CALL system.sync_partition_metadata('a', 'b', 'ADD')", StmtCall},
		{"GRANT SELECT ON t TO alice", StmtAccessControl},
		{"REVOKE SELECT ON t FROM alice", StmtAccessControl},
		{"ANALYZE t", StmtAnalyze},
		{"", StmtUnknown},
		{"   -- only a comment", StmtUnknown},
		{"/* unterminated", StmtUnknown},
		{"FOO BAR", StmtUnknown},
	}
	for _, c := range cases {
		t.Run(c.sql, func(t *testing.T) {
			if got := Classify(c.sql); got != c.want {
				t.Errorf("Classify(%q) = %v, want %v", c.sql, got, c.want)
			}
			want := c.want == StmtQuery || c.want == StmtInsert || c.want == StmtCreateTableAs || c.want == StmtMerge ||
				c.want == StmtUpdate || c.want == StmtDelete || c.want == StmtExecute
			if got := Explainable(c.sql); got != want {
				t.Errorf("Explainable(%q) = %v, want %v", c.sql, got, want)
			}
		})
	}
}

func TestClassifyWorkloads(t *testing.T) {
	for _, q := range trinotest.Workloads(t, "tiny") {
		if k := Classify(q.SQL); k != StmtQuery {
			t.Errorf("%s: %v", q.Name, k)
		}
	}
}

func TestSafeToExplain(t *testing.T) {
	for _, tc := range []struct {
		kind   StatementKind
		ok     bool
		reason string
	}{
		{StmtQuery, true, ""},
		{StmtInsert, true, ""},
		{StmtExecute, true, ""},
		{StmtCreateTableAs, false, "CREATE TABLE AS is not explained (EXPLAIN creates the table on some connectors, trinodb/trino#130)"},
		{StmtSetSession, false, "a set-session statement is not estimated"},
		{StmtExplain, false, "a explain statement is not estimated"},
		{StmtUnknown, false, "a unknown statement is not estimated"},
	} {
		t.Run(tc.kind.String(), func(t *testing.T) {
			ok, reason := tc.kind.SafeToExplain()
			if ok != tc.ok || reason != tc.reason {
				t.Errorf("SafeToExplain() = %v, %q; want %v, %q", ok, reason, tc.ok, tc.reason)
			}
			if ok && !tc.kind.Explainable() {
				t.Error("safe to explain but not explainable")
			}
		})
	}
}
