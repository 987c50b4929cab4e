// Package prestotest is trinotest's sibling for the real PrestoDB the
// estimator's tests run against: its URL, the plans captured from it and
// the queries they come from.
package prestotest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
)

// ExplainDir holds the plans captured from a real PrestoDB and their golden
// files, apart from Trino's (trinotest.ExplainDir) so that every test over
// Trino's captured plans stays as it is.
var ExplainDir = filepath.Join(trinotest.Testdata, "explain-presto")

// URL is the live PrestoDB at PRESTROID_PRESTO_URL; without it the test
// skips. Once it is set, a coordinator that does not answer fails the test.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PRESTROID_PRESTO_URL")
	if u == "" {
		t.Skip("PRESTROID_PRESTO_URL not set: no real PrestoDB to EXPLAIN against")
	}
	return u
}

// UserHeader is a caller's session naming only the user, in the canonical
// form the estimator is handed (X-Trino-User): the EXPLAIN client renames
// it for PrestoDB.
func UserHeader(user string) http.Header { return trinotest.UserHeader(user) }

// Query is one query whose plan is captured.
type Query = trinotest.Query

// extra are the shapes the TPC-H workload lacks or has few of, each a
// query of the tpch catalog at the scale's schema (%s).
var extra = []struct{ name, sql string }{
	{"window", "SELECT orderkey, rank() OVER (PARTITION BY custkey ORDER BY totalprice DESC) FROM tpch.%s.orders"},
	{"values", "SELECT * FROM (VALUES (1, 'a'), (2, 'b')) t(x, y) WHERE x > 1"},
	{"union", "SELECT nationkey FROM tpch.%[1]s.nation UNION SELECT regionkey FROM tpch.%[1]s.region"},
	{"union-all", "SELECT name FROM tpch.%[1]s.nation UNION ALL SELECT name FROM tpch.%[1]s.region"},
	{"limit", "SELECT * FROM tpch.%s.lineitem LIMIT 10"},
	{"topn", "SELECT orderkey FROM tpch.%s.orders ORDER BY totalprice DESC LIMIT 5"},
	{"semijoin", "SELECT count(*) FROM tpch.%[1]s.orders WHERE custkey IN (SELECT custkey FROM tpch.%[1]s.customer WHERE acctbal > 5000)"},
	{"exists", "SELECT count(*) FROM tpch.%[1]s.customer c WHERE EXISTS (SELECT 1 FROM tpch.%[1]s.orders o WHERE o.custkey = c.custkey)"},
	{"scalar-subquery", "SELECT name FROM tpch.%[1]s.nation WHERE regionkey = (SELECT max(regionkey) FROM tpch.%[1]s.region)"},
	{"rollup", "SELECT returnflag, linestatus, sum(quantity) FROM tpch.%s.lineitem GROUP BY ROLLUP (returnflag, linestatus)"},
	{"distinct", "SELECT count(DISTINCT custkey), count(DISTINCT orderstatus) FROM tpch.%s.orders"},
}

// Queries are the TPC-H workload's queries (trinotest.Workloads; PrestoDB's
// tpch connector names its columns as Trino's does) and the extra shapes,
// at scale (tiny or sf1); named tpch-qNN and extra-NAME.
func Queries(t testing.TB, scale string) []Query {
	t.Helper()
	var out []Query
	for _, q := range trinotest.Workloads(t, scale) {
		if q.Workload == "tpch" { // PrestoDB's harness has the tpch catalog only
			out = append(out, q)
		}
	}
	for _, e := range extra {
		sql := e.sql
		if strings.Contains(sql, "%") {
			sql = fmt.Sprintf(sql, scale)
		}
		out = append(out, Query{Name: "extra-" + e.name, Workload: "extra", SQL: sql})
	}
	return out
}
