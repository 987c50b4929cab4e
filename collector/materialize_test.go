package collector

import "testing"

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

func TestMarkerRoundTrips(t *testing.T) {
	m := markerRE.FindStringSubmatch(MaterializeMarker(2880404))
	if m == nil || m[1] != "1" || m[2] != "2880404" {
		t.Fatalf("marker %q parsed as %v", MaterializeMarker(2880404), m)
	}
}
