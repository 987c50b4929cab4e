package collector

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Materialized TPC tables: the TPC-H and TPC-DS schemas copied by CTAS from
// the connectors (which generate rows on every scan) into a lake catalog
// (hive or iceberg on the harness's local file system; Parquet, the
// catalogs' default there, or ORC), partitioned and ANALYZEd, so that the
// collector measures scans of real files with the optimizer's real
// statistics.
//
// A copy of family F at scale S is schema F_S of the catalog, dots in the
// scale made underscores (tpcds_sf1, tpch_sf0_1, tpcds_tiny). A table is
// complete when its comment is the marker written after its ANALYZE
// (MaterializeMarker); a table without it was still written by a finished
// CTAS (CTAS commits atomically), so a resumed run only analyzes it. Running
// again is therefore idempotent and resumes where a run was stopped.

// MaterializeVersion is the layout version in the marker: a change of
// partitioning or types bumps it, and a table marked with another version is
// reported, never silently mixed with the new layout.
const MaterializeVersion = 1

// markerRE matches the marker; its optional third group is the file
// format the table was written in (absent: the catalog's default, which
// every table marked before the format was recorded was written in).
var markerRE = regexp.MustCompile(`^prestroid-materialize v(\d+) rows=(\d+)(?: format=([A-Z]+))?$`)

// MaterializeMarker is the table comment of a complete table written in
// format ("ORC", "PARQUET"; empty: the catalog's default, not recorded).
func MaterializeMarker(rows int64, format string) string {
	m := fmt.Sprintf("prestroid-materialize v%d rows=%d", MaterializeVersion, rows)
	if format != "" {
		m += " format=" + format
	}
	return m
}

// Formats are the file formats Materializer.Format may name: those both
// lake connectors write.
var Formats = []string{"ORC", "PARQUET"}

// SchemaName is the schema of family's tables at scale in a lake catalog:
// "tpcds_sf1", "tpch_tiny", "tpcds_sf0_1".
func SchemaName(family, scale string) string {
	return family + "_" + strings.ReplaceAll(scale, ".", "_")
}

// Place is where a collection on storage finds family's tables at scale:
// the connector itself when storage is empty, else the materialized copy in
// the storage catalog.
func Place(storage, family, scale string) (catalog, schema string) {
	if storage == "" {
		return family, scale
	}
	return storage, SchemaName(family, scale)
}

// partitionKeys are the partition columns of the big fact tables. TPC-DS
// fact tables by their date key, as the usual TPC-DS-on-Hive layouts do
// (about 1,830 distinct dates plus NULL: the hive catalog's
// hive.max-partitions-per-writers must allow them, trino.sh sets 2000);
// iceberg buckets the same keys by 30 days (truncate), about 61 partitions
// at every scale. TPC-H's date columns have over 2,400 distinct days, more
// than a hive writer may open: only iceberg partitions them, by month.
var partitionKeys = map[string]string{
	"tpcds.store_sales":   "ss_sold_date_sk",
	"tpcds.catalog_sales": "cs_sold_date_sk",
	"tpcds.web_sales":     "ws_sold_date_sk",
	"tpcds.inventory":     "inv_date_sk",
	"tpch.lineitem":       "shipdate", // the connector names TPC-H columns without prefixes
	"tpch.orders":         "orderdate",
}

// skipTables are source tables no workload reads: tpcds.dbgen_version
// (the generator's own version row; its time(3) column has no Hive type).
var skipTables = map[string]bool{"tpcds.dbgen_version": true}

// Materializer copies TPC schemas into a lake catalog. The zero value is not
// usable: set DB and Catalog.
type Materializer struct {
	// DB is a trino-go-client database (the DSN's user owns the tables).
	DB *sql.DB
	// Catalog is the target catalog; its connector (hive or iceberg) is
	// looked up in system.metadata.catalogs.
	Catalog string
	// Tables restricts the copy to these table names (all if empty).
	Tables []string
	// Format is the file format of the copies, one of Formats, upper
	// case (the table property `format` of both connectors). Empty: the
	// catalog's own default (hive.storage-format, iceberg.file-format;
	// PARQUET on the harness). A complete table written in another format
	// than the one asked for is an error (ErrOtherFormat), never reused.
	Format string
	// Progress receives a line per table (nil: none).
	Progress io.Writer

	connector string
}

// TableResult is what Materialize did with one table.
type TableResult struct {
	Source, Target string
	Rows           int64
	// Skipped: the table was complete before the run.
	Skipped bool
	// Partitioning is the table's partition spec, empty if none.
	Partitioning string
	CTAS         time.Duration // zero when the table existed
	Analyze      time.Duration // zero when skipped
	Files        int64         // data files
	Bytes        int64         // data file bytes on storage
}

// ErrStaleLayout is returned for a table marked by another layout version.
var ErrStaleLayout = errors.New("collector: table materialized with another layout version")

// ErrOtherFormat is returned for a complete table marked with another file
// format than Materializer.Format asks for.
var ErrOtherFormat = errors.New("collector: table materialized in another file format")

// Materialize copies every table of each family ("tpch", "tpcds") at each
// scale ("tiny", "sf1", "sf0.1"), skipping complete tables, and returns one
// result per table in order. It stops at the first error.
func (m *Materializer) Materialize(ctx context.Context, families, scales []string) ([]TableResult, error) {
	if m.Format != "" && !slices.Contains(Formats, m.Format) {
		return nil, fmt.Errorf("collector: materialize: format %q (want one of %s)", m.Format, strings.Join(Formats, ", "))
	}
	if err := m.lookupConnector(ctx); err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, t := range m.Tables {
		keep[t] = true
	}
	// A named table no family has is a typo: refuse before copying.
	known := map[string]bool{}
	for _, fam := range families {
		if fam != "tpch" && fam != "tpcds" {
			return nil, fmt.Errorf("collector: materialize: unknown family %q (want tpch or tpcds)", fam)
		}
		if len(scales) > 0 && len(keep) > 0 {
			tables, err := m.sourceTables(ctx, fam, scales[0])
			if err != nil {
				return nil, err
			}
			for _, t := range tables {
				known[t] = true
			}
		}
	}
	for _, t := range m.Tables {
		if !known[t] || skipTables["tpcds."+t] {
			return nil, fmt.Errorf("collector: materialize: no table %q in %s", t, strings.Join(families, ", "))
		}
	}
	var out []TableResult
	for _, sc := range scales {
		for _, fam := range families {
			schema := SchemaName(fam, sc)
			if _, err := m.DB.ExecContext(ctx, fmt.Sprintf("CREATE SCHEMA IF NOT EXISTS %s.%s", m.Catalog, quoteIdent(schema))); err != nil {
				return out, fmt.Errorf("collector: materialize: create schema %s.%s: %w", m.Catalog, schema, err)
			}
			tables, err := m.sourceTables(ctx, fam, sc)
			if err != nil {
				return out, err
			}
			for _, t := range tables {
				if skipTables[fam+"."+t] || len(keep) > 0 && !keep[t] {
					continue
				}
				r, err := m.table(ctx, fam, sc, t)
				if err != nil {
					return out, err
				}
				out = append(out, r)
				if m.Progress != nil {
					fmt.Fprintln(m.Progress, r.String())
				}
			}
		}
	}
	return out, nil
}

// Incomplete lists the tables of each family at each scale that are not
// complete in the catalog (missing, or without the marker of this layout
// version), as catalog.schema.table: a collection on the catalog checks it
// first, since its EXPLAINs would fail on a missing table and record every
// such query as EXPLAIN_FAILED for good.
func (m *Materializer) Incomplete(ctx context.Context, families, scales []string) ([]string, error) {
	if err := m.lookupConnector(ctx); err != nil {
		return nil, err
	}
	var out []string
	for _, sc := range scales {
		for _, fam := range families {
			tables, err := m.sourceTables(ctx, fam, sc)
			if err != nil {
				return nil, err
			}
			schema := SchemaName(fam, sc)
			for _, t := range tables {
				if skipTables[fam+"."+t] {
					continue
				}
				cmt, _, err := m.comment(ctx, schema, t)
				if err != nil {
					return nil, err
				}
				if mm := markerRE.FindStringSubmatch(cmt); mm == nil || mm[1] != strconv.Itoa(MaterializeVersion) {
					out = append(out, m.Catalog+"."+schema+"."+t)
				}
			}
		}
	}
	return out, nil
}

// String is the progress line of a table.
func (r TableResult) String() string {
	state := fmt.Sprintf("ctas %.1fs analyze %.1fs", r.CTAS.Seconds(), r.Analyze.Seconds())
	if r.Skipped {
		state = "complete before"
	}
	part := r.Partitioning
	if part == "" {
		part = "unpartitioned"
	}
	return fmt.Sprintf("%s <- %s: %d rows, %d files, %.1f MiB, %s; %s",
		r.Target, r.Source, r.Rows, r.Files, float64(r.Bytes)/(1<<20), part, state)
}

func (m *Materializer) lookupConnector(ctx context.Context) error {
	err := m.DB.QueryRowContext(ctx, "SELECT connector_name FROM system.metadata.catalogs WHERE catalog_name = ?", m.Catalog).Scan(&m.connector)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("collector: materialize: no catalog %q on the server (start it with TRINO_CATALOGS=\"hive iceberg\" testing/trino/trino.sh up)", m.Catalog)
	}
	if err != nil {
		return fmt.Errorf("collector: materialize: catalog %s: %w", m.Catalog, err)
	}
	if m.connector != "hive" && m.connector != "iceberg" {
		return fmt.Errorf("collector: materialize: catalog %s is a %s catalog; want hive or iceberg", m.Catalog, m.connector)
	}
	return nil
}

func (m *Materializer) sourceTables(ctx context.Context, fam, scale string) ([]string, error) {
	rows, err := m.DB.QueryContext(ctx, fmt.Sprintf("SELECT table_name FROM %s.information_schema.tables WHERE table_schema = ? ORDER BY table_name", fam), scale)
	if err != nil {
		return nil, fmt.Errorf("collector: materialize: tables of %s.%s: %w", fam, scale, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("collector: materialize: no tables in %s.%s (is %q a scale of the connector?)", fam, scale, scale)
	}
	return out, nil
}

type column struct{ name, typ string }

func (m *Materializer) columns(ctx context.Context, fam, scale, table string) ([]column, error) {
	rows, err := m.DB.QueryContext(ctx, fmt.Sprintf("SELECT column_name, data_type FROM %s.information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position", fam), scale, table)
	if err != nil {
		return nil, fmt.Errorf("collector: materialize: columns of %s.%s.%s: %w", fam, scale, table, err)
	}
	defer rows.Close()
	var out []column
	for rows.Next() {
		var c column
		if err := rows.Scan(&c.name, &c.typ); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// comment is the table's comment; ok is false when the table does not exist.
func (m *Materializer) comment(ctx context.Context, schema, table string) (comment string, ok bool, err error) {
	var c sql.NullString
	err = m.DB.QueryRowContext(ctx, "SELECT comment FROM system.metadata.table_comments WHERE catalog_name = ? AND schema_name = ? AND table_name = ?",
		m.Catalog, schema, table).Scan(&c)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("collector: materialize: comment of %s.%s.%s: %w", m.Catalog, schema, table, err)
	}
	return c.String, true, nil
}

// table makes one table complete: CTAS unless it exists, ANALYZE and the
// marker unless it has it.
func (m *Materializer) table(ctx context.Context, fam, scale, table string) (TableResult, error) {
	schema := SchemaName(fam, scale)
	target := fmt.Sprintf("%s.%s.%s", m.Catalog, quoteIdent(schema), table)
	source := fmt.Sprintf("%s.%s.%s", fam, quoteIdent(scale), table)
	r := TableResult{Source: fmt.Sprintf("%s.%s.%s", fam, scale, table), Target: fmt.Sprintf("%s.%s.%s", m.Catalog, schema, table)}
	cols, err := m.columns(ctx, fam, scale, table)
	if err != nil {
		return r, err
	}
	selectList, props := m.layout(fam, table, cols)
	r.Partitioning = props.describe
	cmt, exists, err := m.comment(ctx, schema, table)
	if err != nil {
		return r, err
	}
	if props.key != "" && m.connector == "hive" {
		// A staging table left behind means its copy into the target did
		// not finish: the target (if any) is partial.
		_, staged, err := m.comment(ctx, schema, stageName(table))
		if err != nil {
			return r, err
		}
		if staged && exists {
			if _, err := m.DB.ExecContext(ctx, "DROP TABLE "+target); err != nil {
				return r, fmt.Errorf("collector: materialize: drop the partial %s: %w", r.Target, err)
			}
			exists = false
		}
	}
	if exists {
		if mm := markerRE.FindStringSubmatch(cmt); mm != nil {
			if v, _ := strconv.Atoi(mm[1]); v != MaterializeVersion {
				return r, fmt.Errorf("%w: %s is v%s, this is v%d: drop it (or the schema) to rebuild", ErrStaleLayout, r.Target, mm[1], MaterializeVersion)
			}
			if m.Format != "" && mm[3] != m.Format {
				was := mm[3]
				if was == "" {
					was = "the catalog's default"
				}
				return r, fmt.Errorf("%w: %s was written in %s, not %s: use another catalog, or drop it (or the schema) to rebuild", ErrOtherFormat, r.Target, was, m.Format)
			}
			r.Rows, _ = strconv.ParseInt(mm[2], 10, 64)
			r.Skipped = true
			return r, m.size(ctx, schema, table, &r)
		}
	} else {
		if m.Progress != nil {
			fmt.Fprintf(m.Progress, "%s: CTAS from %s (%s)...\n", r.Target, r.Source, time.Now().UTC().Format(time.TimeOnly))
		}
		t0 := time.Now()
		if props.key != "" && m.connector == "hive" {
			if err := m.staged(ctx, schema, table, source, selectList, props); err != nil {
				return r, fmt.Errorf("collector: materialize: %s: %w", r.Target, err)
			}
		} else {
			q := fmt.Sprintf("CREATE TABLE %s%s AS SELECT %s FROM %s", target, props.with, selectList, source)
			if _, err := m.DB.ExecContext(ctx, q); err != nil {
				return r, fmt.Errorf("collector: materialize: %s: %w", r.Target, err)
			}
		}
		r.CTAS = time.Since(t0)
	}
	t0 := time.Now()
	if _, err := m.DB.ExecContext(ctx, "ANALYZE "+target); err != nil {
		return r, fmt.Errorf("collector: materialize: analyze %s: %w", r.Target, err)
	}
	r.Analyze = time.Since(t0)
	if err := m.DB.QueryRowContext(ctx, "SELECT count(*) FROM "+target).Scan(&r.Rows); err != nil {
		return r, fmt.Errorf("collector: materialize: count %s: %w", r.Target, err)
	}
	if _, err := m.DB.ExecContext(ctx, fmt.Sprintf("COMMENT ON TABLE %s IS '%s'", target, MaterializeMarker(r.Rows, m.Format))); err != nil {
		return r, fmt.Errorf("collector: materialize: mark %s: %w", r.Target, err)
	}
	return r, m.size(ctx, schema, table, &r)
}

// stagePartitions is how many partitions one INSERT of a staged copy
// writes at most. Trino's hive writer keeps one file writer open per
// partition, about 1 MB each in ORC with the harness's ZSTD (a CTAS of
// tpcds.tiny.catalog_sales into 1,830 date partitions ran out of a 2 GB
// query memory limit in the table writer), so the copy goes in slices of
// the key's range.
const stagePartitions = 200

// stageName is the unpartitioned staging copy of table in its schema.
func stageName(table string) string { return "prestroid_stage_" + table }

// staged writes a partitioned hive table without opening every partition
// at once: the source is copied (CTAS, unpartitioned, in the target's
// format) into a staging table, the target is created empty, then filled
// by INSERTs of at most stagePartitions partition values each (and one for
// a NULL key), and the staging table dropped. A run stopped before the
// drop leaves the staging table, which tells the next run that the target
// is partial (see table).
func (m *Materializer) staged(ctx context.Context, schema, table, source, selectList string, props tableProps) error {
	target := fmt.Sprintf("%s.%s.%s", m.Catalog, quoteIdent(schema), table)
	stage := fmt.Sprintf("%s.%s.%s", m.Catalog, quoteIdent(schema), stageName(table))
	_, staged, err := m.comment(ctx, schema, stageName(table))
	if err != nil {
		return err
	}
	if !staged { // a stage left by a stopped run is complete (CTAS commits atomically)
		stageWith := ""
		if m.Format != "" {
			stageWith = fmt.Sprintf(" WITH (format = '%s')", m.Format)
		}
		if _, err := m.DB.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s%s AS SELECT %s FROM %s", stage, stageWith, selectList, source)); err != nil {
			return fmt.Errorf("stage: %w", err)
		}
	}
	if _, err := m.DB.ExecContext(ctx, fmt.Sprintf("CREATE TABLE %s%s AS SELECT * FROM %s WITH NO DATA", target, props.with, stage)); err != nil {
		return err
	}
	key := quoteIdent(props.key)
	rows, err := m.DB.QueryContext(ctx, fmt.Sprintf("SELECT DISTINCT %s FROM %s WHERE %s IS NOT NULL ORDER BY 1", key, stage, key))
	if err != nil {
		return fmt.Errorf("partition values: %w", err)
	}
	var keys []int64
	for rows.Next() {
		var k int64
		if err := rows.Scan(&k); err != nil {
			rows.Close()
			return err
		}
		keys = append(keys, k)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, where := range stageSlices(key, keys, stagePartitions) {
		if _, err := m.DB.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s SELECT * FROM %s WHERE %s", target, stage, where)); err != nil {
			return fmt.Errorf("insert %s: %w", where, err)
		}
	}
	if _, err := m.DB.ExecContext(ctx, "DROP TABLE "+stage); err != nil {
		return fmt.Errorf("drop the stage: %w", err)
	}
	return nil
}

// stageSlices are the WHERE clauses of a staged copy's INSERTs: ranges of
// at most n of the sorted distinct keys, then the NULL key.
func stageSlices(key string, keys []int64, n int) []string {
	var out []string
	for i := 0; i < len(keys); i += n {
		j := min(i+n, len(keys)) - 1
		out = append(out, fmt.Sprintf("%s BETWEEN %d AND %d", key, keys[i], keys[j]))
	}
	return append(out, key+" IS NULL")
}

type tableProps struct {
	with     string // " WITH (...)" or ""
	describe string // e.g. "partitioned by ss_sold_date_sk"
	key      string // hive: the partition column, written by a staged copy (staged); empty otherwise
}

// layout is the CTAS select list and table properties of a table. Iceberg
// has no char(n): the connectors' char values are padded, and a plain cast
// keeps the padding (then 'Books' no longer equals i_category), so char
// columns become rtrim(CAST(c AS varchar)), which compares as char does.
// Hive keeps every type, and wants its partition column last. Format, if
// set, is the table property `format` of either connector.
func (m *Materializer) layout(fam, table string, cols []column) (string, tableProps) {
	key := partitionKeys[fam+"."+table]
	var props tableProps
	var sel, last []string
	for _, c := range cols {
		expr := quoteIdent(c.name)
		if m.connector == "iceberg" && strings.HasPrefix(c.typ, "char(") {
			expr = fmt.Sprintf("rtrim(CAST(%s AS varchar)) AS %s", expr, quoteIdent(c.name))
		}
		if m.connector == "hive" && c.name == key && fam == "tpcds" {
			last = append(last, expr)
			continue
		}
		sel = append(sel, expr)
	}
	var with []string
	if m.Format != "" {
		with = append(with, fmt.Sprintf("format = '%s'", m.Format))
	}
	switch {
	case key == "":
	case m.connector == "hive" && fam == "tpcds":
		props.key = key
		with = append(with, fmt.Sprintf("partitioned_by = ARRAY['%s']", key))
		props.describe = "partitioned by " + key
	case m.connector == "iceberg" && fam == "tpcds":
		spec := fmt.Sprintf("truncate(%s, 30)", key)
		with = append(with, fmt.Sprintf("partitioning = ARRAY['%s']", spec))
		props.describe = "partitioned by " + spec
	case m.connector == "iceberg" && fam == "tpch":
		spec := fmt.Sprintf("month(%s)", key)
		with = append(with, fmt.Sprintf("partitioning = ARRAY['%s']", spec))
		props.describe = "partitioned by " + spec
	}
	if len(with) > 0 {
		props.with = " WITH (" + strings.Join(with, ", ") + ")"
	}
	return strings.Join(append(sel, last...), ", "), props
}

// size fills the table's data file count and bytes: iceberg's $files
// table; for hive the distinct files behind the rows ($path, $file_size),
// which reads only the files' footers.
func (m *Materializer) size(ctx context.Context, schema, table string, r *TableResult) error {
	var q string
	if m.connector == "iceberg" {
		q = fmt.Sprintf(`SELECT count(*), coalesce(sum(file_size_in_bytes), 0) FROM %s.%s."%s$files"`, m.Catalog, quoteIdent(schema), table)
	} else {
		q = fmt.Sprintf(`SELECT count(*), coalesce(sum(s), 0) FROM (SELECT "$path", max("$file_size") AS s FROM %s.%s.%s GROUP BY 1)`, m.Catalog, quoteIdent(schema), table)
	}
	if err := m.DB.QueryRowContext(ctx, q).Scan(&r.Files, &r.Bytes); err != nil {
		return fmt.Errorf("collector: materialize: size of %s: %w", r.Target, err)
	}
	return nil
}

// quoteIdent quotes a Trino identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
