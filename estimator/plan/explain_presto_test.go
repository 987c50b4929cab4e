package plan_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/internal/prestotest"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

func TestExplainAgainstPresto(t *testing.T) {
	server := prestotest.URL(t)
	c := &plan.ExplainClient{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("a query gives a plan that parses into Trino's vocabulary", func(t *testing.T) {
		res, err := c.ExplainOn(ctx, server, dialect.Presto, "SELECT orderpriority, count(*) FROM tpch.tiny.orders WHERE totalprice > 1000 GROUP BY 1", prestotest.UserHeader("prestroid-test"))
		if err != nil {
			t.Fatal(err)
		}
		if res.QueryID == "" || res.ElapsedMillis <= 0 || res.Wall <= 0 || res.AnalysisMillis != 0 {
			t.Errorf("id or timing: %+v", res)
		}
		p, err := plan.Parse(res.PlanJSON)
		if err != nil {
			t.Fatal(err)
		}
		root, err := featurize.BuildOTP(p)
		if err != nil {
			t.Fatal(err)
		}
		if s := featurize.Stats(root); len(s.Tables) != 1 || s.Tables[0] != "tpch.tiny.orders" || s.Preds != 1 {
			t.Errorf("stats %+v\n%s", s, featurize.RenderOTP(root))
		}
		if r := featurize.RenderOTP(root); !strings.Contains(r, "OPR Aggregate\n") || !strings.Contains(r, "PRED [totalprice >]") {
			t.Errorf("plan:\n%s", r)
		}
	})
	t.Run("the session's catalog, schema and properties are the caller's", func(t *testing.T) {
		h := prestotest.UserHeader("prestroid-test")
		h.Set("X-Trino-Catalog", "tpch")
		h.Set("X-Trino-Schema", "sf1")
		h.Add("X-Trino-Session", "join_distribution_type=PARTITIONED")
		h.Set("X-Trino-Transaction-Id", "c1~not-a-transaction") // held back: a bogus id would fail the EXPLAIN
		res, err := c.ExplainOn(ctx, server, dialect.Presto, "SELECT count(*) FROM orders, customer WHERE orders.custkey = customer.custkey;", h)
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.Parse(res.PlanJSON)
		if err != nil {
			t.Fatal(err)
		}
		root, _ := featurize.BuildOTP(p)
		r := featurize.RenderOTP(root)
		if s := featurize.Stats(root); strings.Join(s.Tables, ",") != "tpch.sf1.customer,tpch.sf1.orders" {
			t.Errorf("tables %v", s.Tables)
		}
		if !strings.Contains(r, "InnerJoin(PARTITIONED)") {
			t.Errorf("session property join_distribution_type not applied:\n%s", r)
		}
	})
	t.Run("a missing table is a plan.TrinoError", func(t *testing.T) {
		_, err := c.ExplainOn(ctx, server, dialect.Presto, "SELECT * FROM tpch.tiny.nope", prestotest.UserHeader("prestroid-test"))
		var te *plan.TrinoError
		if !errors.As(err, &te) || te.ErrorName == "" || te.ErrorType != "USER_ERROR" {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("no user is never invented", func(t *testing.T) {
		_, err := c.ExplainOn(ctx, server, dialect.Presto, "SELECT 1", http.Header{})
		var he *plan.HTTPError
		if !errors.As(err, &he) || (he.StatusCode != 400 && he.StatusCode != 401) {
			t.Fatalf("got %v, want HTTP 400 or 401 (no user)", err)
		}
	})
	t.Run("an ended context cancels", func(t *testing.T) {
		short, done := context.WithTimeout(ctx, time.Millisecond)
		defer done()
		time.Sleep(2 * time.Millisecond)
		_, err := c.ExplainOn(short, server, dialect.Presto, "SELECT 1", prestotest.UserHeader("prestroid-test"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v", err)
		}
	})
}
