// Package parquet tests the Parquet path end to end: a real Trino with an
// iceberg catalog on the local file system (the harness's TRINO_CATALOGS),
// TPC-DS tables copied into it by the real binary (`prestroid
// materialize`), and queries on them through the real proxy with its real
// model; and the same binary's ORC copy of a partitioned table into the
// hive catalog beside it.
// See package e2e.
package parquet

import (
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// The tables of the workload queries below: date_dim, item and the
// partitioned fact table store_sales (tiny: 120,527 rows, about 60 files).
const tables = "date_dim,item,store_sales"

// Workload queries that read only those tables.
var queries = []string{"tpcds/q03", "tpcds/q55"}

func materialize(t *testing.T, bin, server string) string {
	t.Helper()
	start := time.Now()
	out, err := exec.Command(bin, "materialize", "--server", server, "--catalog", "iceberg",
		"--families", "tpcds", "--scales", "tiny", "--tables", tables).CombinedOutput()
	if err != nil {
		t.Fatalf("prestroid materialize: %v\n%s", err, out)
	}
	t.Logf("materialize in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	return string(out)
}

func TestEstimatesOnParquetTablesThroughTheProxy(t *testing.T) {
	t.Parallel()
	e2e.TrinoURL(t) // integration tests on
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	lake, _ := e2e.StartTrinoInstanceEnv(t, "iceberg", "", nil, []string{"TRINO_CATALOGS=iceberg,hive"})
	direct := e2e.OpenDB(t, lake, "")

	t.Run("materialize copies, partitions and analyzes the tables", func(t *testing.T) {
		out := materialize(t, bin, lake)
		var want int64
		if err := direct.QueryRow("SELECT count(*) FROM tpcds.tiny.store_sales").Scan(&want); err != nil {
			t.Fatal(err)
		}
		line := regexp.MustCompile(`iceberg\.tpcds_tiny\.store_sales <- tpcds\.tiny\.store_sales: (\d+) rows, (\d+) files, .*partitioned by truncate\(ss_sold_date_sk, 30\); ctas`).FindStringSubmatch(out)
		if line == nil {
			t.Fatalf("no store_sales line with its partitioning and a CTAS in:\n%s", out)
		}
		if line[1] != strconv.FormatInt(want, 10) {
			t.Errorf("store_sales copied with %s rows, the connector has %d", line[1], want)
		}
		if files, _ := strconv.Atoi(line[2]); files < 10 {
			t.Errorf("store_sales in %d files: not partitioned by date", files)
		}
		var got int64
		if err := direct.QueryRow("SELECT count(*) FROM iceberg.tpcds_tiny.store_sales").Scan(&got); err != nil || got != want {
			t.Fatalf("iceberg.tpcds_tiny.store_sales: %d rows (%v), want %d", got, err, want)
		}
		// ANALYZE gave the optimizer distinct-value counts (iceberg keeps
		// row counts and min/max without it, not NDVs).
		if ndv := distinctValues(t, direct, "iceberg.tpcds_tiny.item", "i_category"); ndv < 5 || ndv > 20 {
			t.Errorf("i_category: %g distinct values after ANALYZE, want about 10", ndv)
		}
		// char(n) columns became varchar without the connector's padding:
		// the workloads' literals still match.
		var books int
		if err := direct.QueryRow("SELECT count(*) FROM iceberg.tpcds_tiny.item WHERE i_category = 'Books'").Scan(&books); err != nil || books == 0 {
			t.Errorf("no 'Books' items in the copy (%v): padded strings", err)
		}
		again := materialize(t, bin, lake)
		if n := strings.Count(again, "complete before"); n != 3 {
			t.Errorf("second run: %d of 3 tables skipped as complete:\n%s", n, again)
		}
	})
	// Hive in ORC: inventory has 261 date partitions at tiny, more than
	// one INSERT of a staged copy writes (collector's stagePartitions), so
	// this copy goes through the staging table and its slices.
	t.Run("materialize writes hive tables in ORC, partitioned in slices", func(t *testing.T) {
		orc := func(format string) (string, error) {
			out, err := exec.Command(bin, "materialize", "--server", lake, "--catalog", "hive", "--format", format,
				"--families", "tpcds", "--scales", "tiny", "--tables", "inventory").CombinedOutput()
			return string(out), err
		}
		start := time.Now()
		out, err := orc("orc")
		if err != nil {
			t.Fatalf("prestroid materialize --catalog hive --format orc: %v\n%s", err, out)
		}
		t.Logf("materialize in %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
		var want int64
		if err := direct.QueryRow("SELECT count(*) FROM tpcds.tiny.inventory").Scan(&want); err != nil {
			t.Fatal(err)
		}
		line := regexp.MustCompile(`hive\.tpcds_tiny\.inventory <- tpcds\.tiny\.inventory: (\d+) rows, (\d+) files, .*partitioned by inv_date_sk; ctas`).FindStringSubmatch(out)
		if line == nil {
			t.Fatalf("no inventory line with its partitioning and a CTAS in:\n%s", out)
		}
		if line[1] != strconv.FormatInt(want, 10) {
			t.Errorf("inventory copied with %s rows, the connector has %d", line[1], want)
		}
		var parts int
		if err := direct.QueryRow(`SELECT count(*) FROM hive.tpcds_tiny."inventory$partitions"`).Scan(&parts); err != nil || parts <= 200 {
			t.Errorf("inventory in %d partitions (%v): want every date of the source, more than one slice", parts, err)
		}
		var ddl string
		if err := direct.QueryRow("SHOW CREATE TABLE hive.tpcds_tiny.inventory").Scan(&ddl); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ddl, "format = 'ORC'") || !strings.Contains(ddl, "partitioned_by = ARRAY['inv_date_sk']") {
			t.Errorf("inventory is not ORC partitioned by date:\n%s", ddl)
		}
		var marker string
		if err := direct.QueryRow("SELECT comment FROM system.metadata.table_comments WHERE catalog_name = 'hive' AND schema_name = 'tpcds_tiny' AND table_name = 'inventory'").Scan(&marker); err != nil || !strings.HasSuffix(marker, " format=ORC") {
			t.Errorf("inventory's marker %q (%v): want one that records ORC, written after ANALYZE", marker, err)
		}
		var stages int
		if err := direct.QueryRow("SELECT count(*) FROM hive.information_schema.tables WHERE table_schema = 'tpcds_tiny' AND table_name LIKE 'prestroid_stage_%'").Scan(&stages); err != nil || stages != 0 {
			t.Errorf("%d staging tables left (%v)", stages, err)
		}
		// A complete table is never reused for another format.
		if out, err := orc("parquet"); err == nil || !strings.Contains(out, "was written in ORC, not PARQUET") {
			t.Errorf("materialize --format parquet over the ORC copies: %v\n%s", err, out)
		}
	})
	if t.Failed() {
		return
	}

	// The first EXPLAINs on a fresh JVM take seconds on a loaded machine:
	// a generous estimate budget, so that the test checks the estimate,
	// not the fail-open path (package routing tests that).
	port := e2e.FreePort(t)
	cfg := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("listen: 127.0.0.1:%s\nroute_secret: %s\nclusters:\n  - {name: lake, url: %q}\nrouting:\n  estimate_timeout: 60s\n",
		port, strings.Repeat("p", 40), lake)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, base := e2e.ServeBinary(t, bin, port, "--config", cfg)
	viaProxy := e2e.OpenDB(t, base, "")
	all := e2e.LoadWorkloads(t, func(string) (string, string) { return "iceberg", "tpcds_tiny" }, "0.01")
	for _, w := range all {
		if !slices.Contains(queries, w.Name) {
			continue
		}
		t.Run(w.Name+" is estimated and gets the same rows as direct", func(t *testing.T) {
			resp, p := e2e.Do(t, "POST", base+"/v1/statement", w.SQL, nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("POST: %s", resp.Status)
			}
			est, model, decision := resp.Header.Get("X-Prestroid-Cpu-Estimate"), resp.Header.Get("X-Prestroid-Model"), resp.Header.Get("X-Prestroid-Decision")
			for p.NextURI != "" {
				_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
			}
			if p.Stats.State != "FINISHED" || p.Error != nil {
				t.Fatalf("state %s, error %+v", p.Stats.State, p.Error)
			}
			sec, err := strconv.ParseFloat(strings.TrimSuffix(est, "s"), 64)
			if err != nil || sec <= 0 || model == "" || decision != "estimated" {
				t.Fatalf("estimate %q (%v), model %q, decision %q", est, err, model, decision)
			}
			t.Logf("estimate %s by %s", est, model)
			want, err := e2e.RowsAsStrings(t.Context(), direct, w.SQL)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e2e.RowsAsStrings(t.Context(), viaProxy, w.SQL)
			if err != nil {
				t.Fatal(err)
			}
			if len(want) < 2 {
				t.Fatalf("no rows directly: the test compares nothing")
			}
			if !slices.Equal(got, want) {
				t.Fatalf("through the proxy %d rows, directly %d; first difference:\n%s", len(got), len(want), firstDiff(got, want))
			}
		})
	}
}

// distinctValues is SHOW STATS's distinct_values_count of a column (-1 if
// unknown).
func distinctValues(t *testing.T, db *sql.DB, table, column string) float64 {
	t.Helper()
	rows, err := db.Query("SHOW STATS FOR " + table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	ndv := -1.0
	for rows.Next() {
		var name sql.NullString
		var size, distinct, nulls, count sql.NullFloat64
		var low, high sql.NullString
		if err := rows.Scan(&name, &size, &distinct, &nulls, &count, &low, &high); err != nil {
			t.Fatal(err)
		}
		if name.String == column && distinct.Valid {
			ndv = distinct.Float64
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ndv
}

func firstDiff(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("proxy:  %s\ndirect: %s", a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}
