package main

// prestroid table-stats: the statistics (SHOW STATS, as the serving cache
// reads them) of every table the records name, for the text step's v2
// encoding (prestroid train --table-stats).

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/estimator/tablestats"
	"github.com/prestroid/prestroid/training"
)

func init() {
	register("table-stats", "read the statistics of every table the records name from Trino (SHOW STATS) into a file for prestroid train --table-stats", tableStats)
}

func tableStats(args []string) int {
	fs := flag.NewFlagSet("table-stats", flag.ContinueOnError)
	server := fs.String("server", "http://127.0.0.1:8081", "Trino coordinator that holds the tables")
	user := fs.String("user", "prestroid-train", "Trino user the statistics are read as")
	out := fs.String("out", "data/table-stats.json", "file to write (tables already in it are kept unless read again)")
	var data multiFlag
	fs.Var(&data, "data", "record files or directories (repeatable): every table their statements name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "prestroid table-stats:", err); return 1 }
	files, err := collector.RecordFiles(append(data, fs.Args()...)...)
	if err != nil {
		return fail(err)
	}
	want := map[plan.TableName]bool{}
	for _, f := range files {
		err := collector.ReadRecords(f, func(r *collector.Record) error {
			names, _ := plan.Tables(r.SQL, r.Catalog, r.Schema)
			for _, n := range names {
				want[n] = true
			}
			return nil
		})
		if err != nil {
			return fail(err)
		}
	}
	names := make([]plan.TableName, 0, len(want))
	for n := range want {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return names[i].String() < names[j].String() })
	f := &training.TableStatsFile{Tables: map[string]featurize.TableStats{}}
	if old, err := training.ReadTableStats(*out); err == nil {
		f = old
	} else if !os.IsNotExist(err) {
		return fail(err)
	}
	f.Server, f.Read = *server, time.Now().UTC().Format(time.RFC3339)
	h := http.Header{}
	h.Set("X-Trino-User", *user)
	c := &tablestats.Client{}
	failed := 0
	for _, n := range names {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		st, err := c.Fetch(ctx, *server, n, h)
		cancel()
		if err != nil {
			// The records name tables this server lacks (another storage,
			// a WITH name the text reader took for a table): left out.
			failed++
			fmt.Fprintf(os.Stderr, "  %s: %v\n", n, err)
			continue
		}
		f.Tables[n.String()] = st
	}
	if err := f.Write(*out); err != nil {
		return fail(err)
	}
	fmt.Printf("table-stats: %d tables named by %d files, %d read, %d not; %d in %s\n",
		len(names), len(files), len(names)-failed, failed, len(f.Tables), *out)
	return 0
}
