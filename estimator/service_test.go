package estimator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prestroid/prestroid/estimator/plan"
)

// TestServiceDoesNotExplainUnsafeStatements: statements that must not be
// explained (CREATE TABLE AS, trinodb/trino#130; SET SESSION, DDL...) come
// back not estimated, with the classifier's reason, and Trino is never asked.
func TestServiceDoesNotExplainUnsafeStatements(t *testing.T) {
	var requests atomic.Int32
	trino := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, "no EXPLAIN expected", http.StatusTeapot)
	}))
	defer trino.Close()
	// No model: an explained statement would fail before inference, and an
	// unexplained one needs none.
	s := NewService(nil, ServiceOptions{Workers: 1})
	defer s.Close()
	for _, tc := range []struct {
		name, sql string
		kind      plan.StatementKind
		reason    string
	}{
		{"CREATE TABLE AS is not explained", "CREATE TABLE memory.default.t AS SELECT * FROM tpch.tiny.nation", plan.StmtCreateTableAs, "trinodb/trino#130"},
		{"CREATE OR REPLACE TABLE AS after a comment is not explained", "/* nightly */ CREATE OR REPLACE TABLE t AS (SELECT 1)", plan.StmtCreateTableAs, "CREATE TABLE AS is not explained"},
		{"SET SESSION is not estimated", "SET SESSION join_distribution_type = 'BROADCAST'", plan.StmtSetSession, "a set-session statement is not estimated"},
		{"plain CREATE TABLE is DDL, not estimated", "CREATE TABLE t (x bigint)", plan.StmtDDL, "a ddl statement is not estimated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := s.Estimate(context.Background(), trino.URL, tc.sql, http.Header{"X-Trino-User": {"alice"}})
			if err != nil {
				t.Fatal(err)
			}
			if e.Estimated || e.Statement != tc.kind.String() || !strings.Contains(e.Reason, tc.reason) || e.CPUSeconds != 0 {
				t.Errorf("got %+v, want not estimated, %s, reason containing %q", e, tc.kind, tc.reason)
			}
		})
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("Trino got %d requests, want none", n)
	}
	t.Run("a query gets past the classifier", func(t *testing.T) {
		// (and fails here for want of a model, before any EXPLAIN)
		if e, err := s.Estimate(context.Background(), trino.URL, "SELECT * FROM tpch.tiny.nation", http.Header{"X-Trino-User": {"alice"}}); err == nil {
			t.Errorf("a query with no model gave %+v and no error", e)
		}
	})
}
