package collector

import (
	"strings"
	"testing"
)

func TestLayoutPartitionsFactTablesPerConnector(t *testing.T) {
	cols := []column{{"ss_sold_date_sk", "bigint"}, {"ss_item_sk", "bigint"}, {"ss_flag", "char(1)"}}
	cases := []struct {
		name, connector, fam, table string
		sel, with                   string
	}{
		{"iceberg buckets the date key and unpads char", "iceberg", "tpcds", "store_sales",
			`"ss_sold_date_sk", "ss_item_sk", rtrim(CAST("ss_flag" AS varchar)) AS "ss_flag"`,
			` WITH (partitioning = ARRAY['truncate(ss_sold_date_sk, 30)'])`},
		{"hive partitions by the date key, last, and keeps char", "hive", "tpcds", "store_sales",
			`"ss_item_sk", "ss_flag", "ss_sold_date_sk"`,
			` WITH (partitioned_by = ARRAY['ss_sold_date_sk'])`},
		{"a dimension is not partitioned", "iceberg", "tpcds", "item",
			`"ss_sold_date_sk", "ss_item_sk", rtrim(CAST("ss_flag" AS varchar)) AS "ss_flag"`, ``},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &Materializer{connector: c.connector}
			sel, props := m.layout(c.fam, c.table, cols)
			if sel != c.sel || props.with != c.with {
				t.Fatalf("select %s\nwith %q\nwant select %s\nwith %q", sel, props.with, c.sel, c.with)
			}
		})
	}
	m := &Materializer{connector: "iceberg"}
	if _, p := m.layout("tpch", "lineitem", []column{{"shipdate", "date"}}); p.with != ` WITH (partitioning = ARRAY['month(shipdate)'])` {
		t.Fatalf("lineitem on iceberg: %q", p.with)
	}
	m = &Materializer{connector: "hive"}
	if _, p := m.layout("tpch", "lineitem", []column{{"shipdate", "date"}}); p.with != "" {
		t.Fatalf("lineitem on hive: %q (2,500 daily partitions exceed a writer's limit)", p.with)
	}
}

func TestLayoutNamesTheFormatBesideThePartitions(t *testing.T) {
	cols := []column{{"ss_sold_date_sk", "bigint"}, {"ss_item_sk", "bigint"}}
	cases := []struct {
		name, connector, fam, table, with string
	}{
		{"hive ORC fact table", "hive", "tpcds", "store_sales", ` WITH (format = 'ORC', partitioned_by = ARRAY['ss_sold_date_sk'])`},
		{"hive ORC dimension", "hive", "tpcds", "item", ` WITH (format = 'ORC')`},
		{"iceberg ORC fact table", "iceberg", "tpcds", "store_sales", ` WITH (format = 'ORC', partitioning = ARRAY['truncate(ss_sold_date_sk, 30)'])`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := &Materializer{connector: c.connector, Format: "ORC"}
			if _, p := m.layout(c.fam, c.table, cols); p.with != c.with {
				t.Fatalf("with %q, want %q", p.with, c.with)
			}
		})
	}
}

func TestMarkerRoundTrips(t *testing.T) {
	m := markerRE.FindStringSubmatch(MaterializeMarker(2880404, ""))
	if m == nil || m[1] != "1" || m[2] != "2880404" || m[3] != "" {
		t.Fatalf("marker %q parsed as %v", MaterializeMarker(2880404, ""), m)
	}
	m = markerRE.FindStringSubmatch(MaterializeMarker(25, "ORC"))
	if m == nil || m[2] != "25" || m[3] != "ORC" {
		t.Fatalf("marker %q parsed as %v", MaterializeMarker(25, "ORC"), m)
	}
}

func TestStageSlicesCoverEveryKeyAndNull(t *testing.T) {
	got := stageSlices(`"k"`, []int64{1, 2, 3, 5, 8}, 2)
	want := []string{`"k" BETWEEN 1 AND 2`, `"k" BETWEEN 3 AND 5`, `"k" BETWEEN 8 AND 8`, `"k" IS NULL`}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("slices %q, want %q", got, want)
	}
	if got := stageSlices(`"k"`, nil, 2); len(got) != 1 || got[0] != `"k" IS NULL` {
		t.Fatalf("no keys: %q", got)
	}
}
