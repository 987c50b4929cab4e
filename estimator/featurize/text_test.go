package featurize

import (
	"math"
	"testing"
)

func encodeText(sql string, ctx TextContext) []float32 {
	return EncodeText(make([]float32, DefaultTextDim), sql, ctx)
}

func sameVector(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEncodeTextFoldsWhatDoesNotChangeTheShape(t *testing.T) {
	ctx := TextContext{Catalog: "tpch", Schema: "sf1"}
	base := encodeText(`SELECT count(*) FROM "tpch"."sf1".lineitem WHERE quantity < 24 AND shipmode = 'AIR'`, ctx)
	for name, sql := range map[string]string{
		"other literals":           `SELECT count(*) FROM "tpch"."sf1".lineitem WHERE quantity < 7.5 AND shipmode = 'RAIL'`,
		"bare identifiers":         `select COUNT(*) from tpch.sf1.LINEITEM where QUANTITY < 24 and SHIPMODE = 'AIR'`,
		"comments and white space": "SELECT count(*) -- all\n FROM \"tpch\".\"sf1\".lineitem /* t */ WHERE quantity<24 AND shipmode='AIR'",
	} {
		if !sameVector(base, encodeText(sql, ctx)) {
			t.Errorf("%s: the vector changed", name)
		}
	}
}

func TestEncodeTextSeesWhatChangesTheCost(t *testing.T) {
	sql := `SELECT count(*) FROM lineitem WHERE quantity < 24`
	base := encodeText(sql, TextContext{Catalog: "tpch", Schema: "tiny"})
	for name, v := range map[string][]float32{
		"another schema":      encodeText(sql, TextContext{Catalog: "tpch", Schema: "sf1"}),
		"another catalog":     encodeText(sql, TextContext{Catalog: "hive", Schema: "tiny"}),
		"a session property":  encodeText(sql, TextContext{Catalog: "tpch", Schema: "tiny", Session: map[string]string{"join_distribution_type": "BROADCAST"}}),
		"another table":       encodeText(`SELECT count(*) FROM orders WHERE quantity < 24`, TextContext{Catalog: "tpch", Schema: "tiny"}),
		"another operator":    encodeText(`SELECT count(*) FROM lineitem WHERE quantity > 24`, TextContext{Catalog: "tpch", Schema: "tiny"}),
		"another token order": encodeText(`SELECT count(*) FROM lineitem WHERE 24 < quantity`, TextContext{Catalog: "tpch", Schema: "tiny"}),
	} {
		if sameVector(base, v) {
			t.Errorf("%s: the vector did not change", name)
		}
	}
}

func TestEncodeTextIsUnitLength(t *testing.T) {
	for _, sql := range []string{"SELECT 1", "SELECT a, b, c FROM t JOIN u ON t.x = u.x WHERE t.y IN (1, 2, 3)", "'unterminated"} {
		v := encodeText(sql, TextContext{Schema: "s"})
		var n float64
		for _, x := range v {
			n += float64(x) * float64(x)
		}
		if math.Abs(n-1) > 1e-5 {
			t.Errorf("%q: |v|² = %v, want 1", sql, n)
		}
	}
	empty := encodeText("", TextContext{})
	for i, x := range empty {
		if x != 0 {
			t.Fatalf("empty statement: slot %d = %v, want an all-zero vector", i, x)
		}
	}
}

func TestEncodeTextOverwritesDst(t *testing.T) {
	dst := make([]float32, 64)
	for i := range dst {
		dst[i] = 7
	}
	got := EncodeText(dst, "SELECT 1", TextContext{})
	want := EncodeText(make([]float32, 64), "SELECT 1", TextContext{})
	if !sameVector(got, want) {
		t.Fatal("a dirty dst changed the features")
	}
}

func TestEncodeTextAllocatesNothing(t *testing.T) {
	dst := make([]float32, DefaultTextDim)
	sql := `SELECT l_returnflag, sum(l_quantity) FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' GROUP BY 1`
	ctx := TextContext{Catalog: "tpch", Schema: "sf1"}
	if n := testing.AllocsPerRun(100, func() { EncodeText(dst, sql, ctx) }); n != 0 {
		t.Errorf("EncodeText allocated %v times per call, want 0", n)
	}
}

func BenchmarkEncodeText(b *testing.B) {
	dst := make([]float32, DefaultTextDim)
	sql := `SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price,
       avg(l_discount) AS avg_disc, count(*) AS count_order FROM lineitem WHERE l_shipdate <= DATE '1998-12-01' - INTERVAL '90' DAY
       GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus`
	ctx := TextContext{Catalog: "tpch", Schema: "sf1"}
	b.ReportAllocs()
	b.SetBytes(int64(len(sql)))
	for b.Loop() {
		EncodeText(dst, sql, ctx)
	}
}
