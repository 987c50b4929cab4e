package estimator

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/plan"
)

func TestCheapStage(t *testing.T) {
	s := newCascade(t, defaults, nil)
	for _, tc := range []struct {
		name, sql string
		kind      plan.StatementKind
		want      *estimate.Estimate // nil: passes to the next stage
		reason    string
	}{
		{"SHOW is cheap by nature: the constant", "SHOW TABLES", plan.StmtShow,
			&estimate.Estimate{Estimated: true, Statement: "show", Source: estimate.SourceCheap, CPUSeconds: defaults.CheapCPUSeconds}, ""},
		{"a query of information_schema is cheap by nature", "SELECT * FROM information_schema.tables", plan.StmtQuery,
			&estimate.Estimate{Estimated: true, Statement: "query", Source: estimate.SourceCheap, CPUSeconds: defaults.CheapCPUSeconds}, ""},
		{"SET SESSION is not estimated, with the reason", "SET SESSION join_distribution_type = 'BROADCAST'", plan.StmtSetSession,
			&estimate.Estimate{Statement: "set-session"}, "not estimated"},
		{"CREATE TABLE AS is not explained, with the reason", "CREATE TABLE t AS SELECT 1", plan.StmtCreateTableAs,
			&estimate.Estimate{Statement: "create-table-as"}, "trinodb/trino#130"},
		{"a query passes to the history", "SELECT * FROM orders", plan.StmtQuery, nil, ""},
		{"an INSERT passes to the history", "INSERT INTO t SELECT * FROM orders", plan.StmtInsert, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &request{ctx: context.Background(), sql: tc.sql, h: alice}
			e, err := cheapStage{}.run(s, r)
			if err != nil || r.kind != tc.kind {
				t.Fatalf("err %v, kind %s; want none, %s", err, r.kind, tc.kind)
			}
			if tc.want == nil {
				if e != nil {
					t.Fatalf("answered %+v; want it passed on", e)
				}
				return
			}
			if e == nil || !strings.Contains(e.Reason, tc.reason) {
				t.Fatalf("got %+v; want %+v with a reason containing %q", e, tc.want, tc.reason)
			}
			e.Reason = ""
			if !reflect.DeepEqual(e, tc.want) || r.b != nil {
				t.Fatalf("got %+v (basis %v); want %+v and no basis", e, r.b, tc.want)
			}
		})
	}
}
