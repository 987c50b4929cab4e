package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/trinodb/trino-go-client/trino"
)

func init() {
	register("materialize", "copy the TPC-H/TPC-DS schemas into a hive or iceberg catalog, Parquet or ORC (CTAS, partitions, ANALYZE; resumable)", runMaterialize)
}

func runMaterialize(args []string) int {
	fs := flag.NewFlagSet("materialize", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8095", "Trino coordinator URL (with a hive or iceberg catalog: TRINO_CATALOGS)")
	user := fs.String("user", "prestroid-collect", "Trino user (owns the tables)")
	catalog := fs.String("catalog", "iceberg", "target catalog (a hive or iceberg connector)")
	families := fs.String("families", "tpch,tpcds", "comma-separated benchmark families")
	scales := fs.String("scales", "tiny", "comma-separated connector scales (tiny, sf0.1, sf1, sf10, ...), in order")
	tables := fs.String("tables", "", "comma-separated table names to copy (all if empty)")
	format := fs.String("format", "", "file format of the copies: ORC or PARQUET (empty: the catalog's default, PARQUET on the harness)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(*server, "://", "://"+*user+"@", 1), Source: "prestroid-materialize"})
	if err != nil {
		fmt.Fprintf(os.Stderr, "materialize: %v\n", err)
		return 1
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	m := &collector.Materializer{DB: db, Catalog: *catalog, Tables: splitList(*tables), Format: strings.ToUpper(*format), Progress: os.Stdout}
	t0 := time.Now()
	res, err := m.Materialize(ctx, splitList(*families), splitList(*scales))
	var rows, bytes int64
	var files int64
	for _, r := range res {
		rows, bytes, files = rows+r.Rows, bytes+r.Bytes, files+r.Files
	}
	fmt.Printf("materialize: %d tables, %d rows, %d files, %.1f MiB in %s\n", len(res), rows, files, float64(bytes)/(1<<20), time.Since(t0).Truncate(time.Second))
	if err != nil {
		fmt.Fprintf(os.Stderr, "materialize: %v\n", err)
		return 1
	}
	return 0
}
