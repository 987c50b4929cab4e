package tablestats

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/internal/prestotest"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

func TestFetchFromPresto(t *testing.T) {
	server := prestotest.URL(t)
	c := &Client{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	h := dialect.For(prestotest.UserHeader("stats-test"), dialect.Presto) // X-Presto-User
	tiny, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "orders"}, h)
	if err != nil {
		t.Fatal(err)
	}
	sf1, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "sf1", Table: "orders"}, h)
	if err != nil {
		t.Fatal(err)
	}
	if !tiny.Known || tiny.Rows != 15000 || !sf1.Known || sf1.Rows != 1.5e6 {
		t.Fatalf("tpch orders: tiny %+v, sf1 %+v; want 15000 and 1.5M rows", tiny, sf1)
	}
	if !(sf1.Bytes > tiny.Bytes && tiny.Bytes > 0) {
		t.Errorf("data sizes tiny %v, sf1 %v: want positive and growing", tiny.Bytes, sf1.Bytes)
	}
	_, err = c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "no_such_table"}, h)
	if err == nil || !strings.Contains(err.Error(), "no_such_table") {
		t.Errorf("missing table: err %v", err)
	}
	if _, err := c.Fetch(ctx, server, plan.TableName{Catalog: "tpch", Schema: "tiny", Table: "orders"}, prestotest.UserHeader("stats-test")); err == nil {
		t.Error("a fetch in Trino's dialect succeeded on PrestoDB: the user did not travel as X-Presto-User?")
	}
}

func TestCacheFetchesInTheEnginesDialect(t *testing.T) {
	f := &fakeFetch{calls: map[string]int{}}
	f.rows.Store(7)
	var got http.Header
	c := New(Options{Fetch: func(ctx context.Context, server string, tb plan.TableName, h http.Header) (featurize.TableStats, error) {
		got = h
		return f.fetch(ctx, server, tb, h)
	}})
	defer c.Close()
	h := http.Header{"X-Trino-User": {"alice"}, "X-Trino-Transaction-Id": {"x"}}
	orders := []plan.TableName{{Catalog: "tpch", Schema: "tiny", Table: "orders"}}
	c.LookupOn("http://presto", dialect.Presto, orders, h)
	wait(t, c)
	if got.Get("X-Presto-User") != "alice" || len(got) != 1 {
		t.Fatalf("fetch headers %v; want X-Presto-User alone", got)
	}
	if st := c.Lookup("http://trino", orders, h); st[0].Known {
		t.Error("PrestoDB's statistics served for Trino")
	}
}
