package estimator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

func TestRangeLiterals(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		want      []string
	}{
		{"none", "SELECT a FROM t WHERE b = 5 AND c IN ('x', 'y')", nil},
		{"a year from a date", "SELECT sum(p) FROM lineitem WHERE shipdate >= DATE '1994-01-01' AND shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR AND discount = 0.06",
			[]string{"'1994-01-01'", "'1994-01-01'", "'1'"}},
		{"between, then equality", "SELECT * FROM t WHERE d BETWEEN DATE '1995-01-01' AND DATE '1996-12-31' AND k = 7",
			[]string{"'1995-01-01'", "'1996-12-31'"}},
		{"literal on the left", "SELECT * FROM t WHERE DATE '1995-03-15' <= d AND k = 7", []string{"'1995-03-15'"}},
		{"inside parentheses and a subquery", "SELECT * FROM t WHERE (d < 10) AND x IN (SELECT y FROM u WHERE z > 3.5 GROUP BY y)",
			[]string{"10", "3.5"}},
		{"ends at the clause", "SELECT * FROM t WHERE q < 24 ORDER BY 1 LIMIT 10", []string{"24"}},
		{"not a range", "SELECT * FROM t WHERE a <> 3 AND b != 4", nil},
		{"<> after a range", "SELECT * FROM t WHERE a <= 3 AND b<>4 AND c>=5", []string{"3", "5"}},
		{"a bound's sign", "SELECT * FROM t WHERE p BETWEEN (-155.25) AND +2694.75 AND q > x - 5", []string{"-155.25", "+2694.75", "5"}},
	} {
		got := strings.Split(strings.TrimSuffix(rangeLiterals(tc.sql), "\x00"), "\x00")
		if len(got) == 1 && got[0] == "" {
			got = nil
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: rangeLiterals = %q; want %q", tc.name, got, tc.want)
		}
	}
}

// The estimate cache keys on the range literals (a moved range gets its own
// estimate) and not on the others (another region on a dashboard shares
// it); cache_shape_only keys on the shape alone, as before.
func TestEstimateKeyOnRanges(t *testing.T) {
	h := http.Header{"X-Trino-User": {"alice"}, "X-Trino-Catalog": {"iceberg"}, "X-Trino-Schema": {"tpch_sf1"}}
	q := func(from, region string) string {
		return "SELECT count(*) FROM lineitem l JOIN region r ON l.k = r.k WHERE r.name = '" + region +
			"' AND shipdate >= DATE '" + from + "' AND shipdate < DATE '" + from + "' + INTERVAL '1' YEAR"
	}
	base := EstimateKey("m", q("1994-01-01", "ASIA"), h)
	if EstimateKey("m", q("1994-01-01", "EUROPE"), h) != base {
		t.Error("an equality literal changed the key")
	}
	if EstimateKey("m", q("1998-06-01", "ASIA"), h) == base {
		t.Error("a moved date range kept the key: the new range would be served the old range's estimate")
	}
	if EstimateKey("m", "SELECT 1", h) != estimateKey("m", dialect.Trino, Fingerprint("SELECT 2"), h) {
		t.Error("a statement without range literals no longer keys on its fingerprint alone")
	}
	for _, from := range []string{"1994-01-01", "1998-06-01"} {
		sql := q(from, "ASIA")
		if got, want := cacheFingerprint(sql, Fingerprint(sql), true), Fingerprint(sql); got != want {
			t.Errorf("cache_shape_only: %q; want the fingerprint %q", got, want)
		}
	}
}

// Through the cascade with an estimate cache: a repeat with another
// equality literal is served the cached estimate, a moved date range is
// explained for its own (cache_shape_only: served the first range's).
func TestMovedRangeIsEstimatedForItself(t *testing.T) {
	q := func(from string, key int) string {
		return fmt.Sprintf("SELECT count(*) FROM lineitem WHERE l_orderkey = %d AND l_shipdate >= DATE '%s' AND l_shipdate < DATE '%s' + INTERVAL '1' YEAR", key, from, from)
	}
	for _, shapeOnly := range []bool{false, true} {
		f := &fakePlanner{}
		srv := httptest.NewServer(f)
		s := cachedCascade(t, defaults)
		s.opts.CacheShapeOnly = shapeOnly
		run := func(sql string) *estimate.Estimate {
			e, err := s.EstimateOn(context.Background(), []string{srv.URL}, sql, sessionOf("alice"))
			if err != nil {
				t.Fatal(err)
			}
			s.opts.Cache.(*cache.TTL[estimate.Estimate]).Wait()
			return e
		}
		run(q("1994-01-01", 4))
		if e := run(q("1994-01-01", 5)); !e.Cached || f.explains.Load() != 1 {
			t.Errorf("shape only %v: another equality literal: cached %v, %d EXPLAINs; want the cached estimate", shapeOnly, e.Cached, f.explains.Load())
		}
		e := run(q("1998-06-01", 4))
		if want := int32(2); shapeOnly {
			if !e.Cached || f.explains.Load() != 1 {
				t.Errorf("shape only: a moved range: cached %v, %d EXPLAINs; want the first range's estimate", e.Cached, f.explains.Load())
			}
		} else if e.Cached || f.explains.Load() != want {
			t.Errorf("a moved range: cached %v, %d EXPLAINs; want its own EXPLAIN", e.Cached, f.explains.Load())
		}
		srv.Close()
	}
}

// The cache key's range literals cost a second scan of the statement
// beside its fingerprint's.
func BenchmarkCacheFingerprint(b *testing.B) {
	const sql = "SELECT sum(l.extendedprice*l.discount) AS revenue FROM lineitem l WHERE l.shipdate >= DATE '1994-01-01' " +
		"AND l.shipdate < DATE '1994-01-01' + INTERVAL '1' YEAR AND l.discount BETWEEN .06 - 0.01 AND .06 + 0.01 AND l.quantity < 24"
	b.Run("fingerprint", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			Fingerprint(sql)
		}
	})
	b.Run("range literals", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			rangeLiterals(sql)
		}
	})
}
