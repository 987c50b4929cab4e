package onnx

import (
	"context"
	"math"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/estimator/tablestats"
	"github.com/prestroid/prestroid/training"
)

// The shipped text model, the catalog's sizes (data/table-stats.json, in
// the serving cache) and the size line: once the deployment's statements
// taught it that CPU time grows with the largest table's rows (here 1 µs
// a row), a text estimate of a statement whose shape never ran moves to
// the line's number for its table, and the statement's basis carries the
// table's ln rows (what teaches the line).
func TestSizeLineWithTheShippedTextModel(t *testing.T) {
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	if !m.HasText() {
		t.Skip("no text model")
	}
	f, err := training.ReadTableStats(filepath.Join("..", "..", "data", "table-stats.json"))
	if err != nil {
		t.Skip(err)
	}
	ts := tablestats.New(tablestats.Options{})
	hdr := func(schema string) http.Header {
		return http.Header{"X-Trino-User": {"t"}, "X-Trino-Catalog": {"iceberg"}, "X-Trino-Schema": {schema}}
	}
	teach := []struct{ schema, table string }{
		{"tpch_tiny", "lineitem"}, {"tpch_sf1", "lineitem"}, {"tpch_sf10", "lineitem"}, {"tpch_tiny", "orders"},
		{"tpch_sf1", "orders"}, {"tpch_sf10", "orders"}, {"tpch_tiny", "part"}, {"tpch_sf1", "part"},
		{"tpch_sf10", "part"}, {"tpch_sf1", "customer"}, {"tpch_sf10", "customer"},
	}
	probe := struct{ schema, table string }{"tpcds_sf1", "store_sales"}
	for _, c := range append(teach, probe) {
		n := plan.TableName{Catalog: "iceberg", Schema: c.schema, Table: c.table}
		st, ok := f.Tables[n.String()]
		if !ok || !st.Known {
			t.Skipf("%s: no statistics", n)
		}
		ts.Seed(n, hdr(c.schema), st)
	}
	co := estimator.CascadeOptions{Explain: estimator.ExplainWhenUncertain, ClassBounds: []float64{1000, 0}, ClassQuantile: 0.9,
		ModelSigma: 1, MaxSpread: 0.5, Shrink: 1, MinCount: 2, MinCalibration: 10}
	svc := estimator.NewService(m, estimator.ServiceOptions{Explain: &plan.ExplainClient{}, ExplainTimeout: time.Millisecond,
		History: history.NewMemory(1000), Cascade: co, TableStats: ts})
	defer svc.Close()
	planners := []string{"http://127.0.0.1:1"}
	est := func(schema, table string) (*estimate.Estimate, *estimator.Basis) {
		t.Helper()
		e, err := svc.EstimateOn(context.Background(), planners, "SELECT count(*) FROM "+table+" WHERE 1 = 1", hdr(schema))
		if err != nil || e.Source != estimate.SourceText {
			t.Fatalf("%s.%s: %v %+v, want the text stage", schema, table, err, e)
		}
		return e, estimator.UnmarshalBasis(e.Learn)
	}
	before, _ := est(probe.schema, probe.table)
	for _, c := range teach {
		_, b := est(c.schema, c.table)
		n := plan.TableName{Catalog: "iceberg", Schema: c.schema, Table: c.table}
		rows := f.Tables[n.String()].Rows
		if b == nil || math.Abs(b.LnRows-math.Log1p(rows)) > 1e-9 {
			t.Fatalf("%s: basis %+v, want ln rows of %g", n, b, rows)
		}
		svc.Observe(b, estimate.Actual{CPUSeconds: 1e-6 * rows})
	}
	svc.Flush()
	n := plan.TableName{Catalog: "iceberg", Schema: probe.schema, Table: probe.table}
	want := 1e-6 * f.Tables[n.String()].Rows
	var after *estimate.Estimate
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		after, _ = est(probe.schema, probe.table)
		if after.CPUSeconds != before.CPUSeconds || time.Now().After(deadline) {
			break
		}
	}
	if r := after.CPUSeconds / want; r < 0.8 || r > 1.25 {
		t.Errorf("%s: %.3g s before the line, %.3g s after; want about the line's %.3g s", n, before.CPUSeconds, after.CPUSeconds, want)
	}
}
