package plan

import (
	"strings"
	"testing"
)

func TestCheap(t *testing.T) {
	for _, c := range []struct {
		name, sql, catalog, schema string
		want                       bool
	}{
		{"SHOW is cheap", "SHOW CATALOGS", "", "", true},
		{"DESCRIBE is cheap", "DESCRIBE tpch.tiny.nation", "", "", true},
		{"a poll of system.runtime.queries is cheap", "SELECT query_id, state FROM system.runtime.queries WHERE query LIKE '%x%'", "", "", true},
		{"a quoted system table is cheap", `select * from "SYSTEM"."runtime"."nodes"`, "", "", true},
		{"information_schema in any catalog is cheap", "SELECT table_name FROM tpch.information_schema.tables WHERE table_schema = 'tiny'", "", "", true},
		{"a two-part name resolves against the session catalog", "SELECT * FROM runtime.queries", "system", "", true},
		{"a one-part name resolves against the session schema", "SELECT * FROM tables", "tpch", "information_schema", true},
		{"a one-part name in a data schema is not cheap", "SELECT * FROM nation", "tpch", "tiny", false},
		{"VALUES is cheap", "VALUES (1, 'a'), (2, 'b')", "", "", true},
		{"SELECT with no table is cheap", "SELECT 1 + 1", "", "", true},
		{"a join of system tables is cheap", "SELECT * FROM system.runtime.queries q JOIN system.runtime.tasks t ON q.query_id = t.query_id", "", "", true},
		{"a join with a data table is not cheap", "SELECT * FROM system.runtime.queries q JOIN tpch.tiny.nation n ON true", "", "", false},
		{"a comma list with a data table is not cheap", "SELECT * FROM system.runtime.nodes, tpch.tiny.nation", "", "", false},
		{"a comma after a subquery still counts", "SELECT * FROM (SELECT 1) a, tpch.tiny.nation", "", "", false},
		{"a comma after a join condition still counts", "SELECT * FROM system.runtime.nodes a JOIN system.runtime.nodes b ON a.node_id = b.node_id, tpch.sf1.lineitem", "", "", false},
		{"a data table in a subquery is not cheap", "SELECT * FROM system.runtime.nodes WHERE node_id IN (SELECT n_name FROM tpch.tiny.nation)", "", "", false},
		{"a parenthesized join with a data table is not cheap", "SELECT * FROM (tpch.tiny.nation n JOIN system.runtime.nodes x ON true)", "", "", false},
		{"a WITH query over system tables is cheap", "WITH q AS (SELECT * FROM system.runtime.queries) SELECT count(*) FROM q", "", "", true},
		{"a WITH query over data is not cheap", "WITH q AS (SELECT * FROM tpch.tiny.nation) SELECT count(*) FROM q", "", "", false},
		{"a table function is not cheap", "SELECT * FROM TABLE(system.sequence(1, 1000000000))", "", "", false},
		{"TABLE of a data table is not cheap", "TABLE tpch.tiny.nation", "", "", false},
		{"UNNEST reads no table", "SELECT x FROM UNNEST(ARRAY[1,2]) AS t(x)", "", "", true},
		{"an insert is never cheap", "INSERT INTO memory.default.t SELECT * FROM system.runtime.nodes", "", "", false},
		{"FROM inside a function is read conservatively", "SELECT extract(year FROM current_date)", "", "", false},
		{"a union with a data table is not cheap", "SELECT node_id FROM system.runtime.nodes UNION ALL SELECT n_name FROM tpch.tiny.nation", "", "", false},
		{"an unterminated string is not cheap", "SELECT * FROM system.runtime.nodes WHERE x = 'a", "", "", false},
		{"a dangling FROM is not cheap", "SELECT * FROM", "", "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Cheap(c.sql, c.catalog, c.schema); got != c.want {
				t.Errorf("Cheap(%q, %q, %q) = %v, want %v", c.sql, c.catalog, c.schema, got, c.want)
			}
		})
	}
}

func TestTables(t *testing.T) {
	for _, c := range []struct {
		name, sql, catalog, schema string
		want                       string // comma-separated catalog.schema.table
		complete                   bool
	}{
		{"one-part names resolve against the session", "SELECT count(*) FROM orders", "iceberg", "tpch_sf1", "iceberg.tpch_sf1.orders", true},
		{"two- and three-part names", "SELECT * FROM tpch_tiny.nation n JOIN tpch.sf1.region r ON n.n_regionkey = r.r_regionkey", "iceberg", "x", "iceberg.tpch_tiny.nation,tpch.sf1.region", true},
		{"quoted names keep their value, lower-cased", `SELECT * FROM "Tpch"."SF1"."Orders"`, "", "", "tpch.sf1.orders", true},
		{"each table once, in order", "SELECT * FROM a, b WHERE x IN (SELECT y FROM a)", "c", "s", "c.s.a,c.s.b", true},
		{"WITH queries are not tables", "WITH q AS (SELECT * FROM lineitem) SELECT * FROM q JOIN orders ON true", "c", "s", "c.s.lineitem,c.s.orders", true},
		{"a FROM inside a function call is no relation", "SELECT extract(year FROM o_orderdate) FROM orders", "c", "s", "c.s.orders", false},
		{"a table function is left out", "SELECT * FROM TABLE(system.sequence(1, 10)) t, nation", "c", "s", "c.s.nation", false},
		{"no session schema: one-part names unresolved", "SELECT * FROM nation", "tpch", "", "", false},
		{"not a query", "INSERT INTO t SELECT * FROM nation", "c", "s", "", false},
		{"a parenthesized join", "SELECT * FROM (nation n JOIN region r ON true)", "c", "s", "c.s.nation,c.s.region", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, complete := Tables(c.sql, c.catalog, c.schema)
			var names []string
			for _, n := range got {
				names = append(names, n.String())
			}
			if s := strings.Join(names, ","); s != c.want || complete != c.complete {
				t.Errorf("Tables(%q) = %q, %v; want %q, %v", c.sql, s, complete, c.want, c.complete)
			}
		})
	}
}
