package training

import (
	"bufio"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/npy"
)

// The v2 text matrices: each statement encoded with the sizes of the
// tables it names (unknown when the file lacks one), the largest training
// table's ln rows for the manifest, and each row's tables for the golden
// cases.
func TestWriteTextMatricesWithTableStats(t *testing.T) {
	stats := &TableStatsFile{Tables: map[string]featurize.TableStats{
		"tpch.tiny.orders": {Rows: 15000, Known: true},
		"tpch.sf1.orders":  {Rows: 1.5e6, Known: true},
	}}
	q := func(key, split, schema, sql string) *Query {
		return &Query{Key: key, Split: split, SQL: sql, Catalog: "tpch", Schema: schema, LnCPU: -1}
	}
	qs := []*Query{
		q("a", "train", "tiny", "SELECT count(*) FROM orders"),
		q("b", "train", "tiny", "SELECT count(*) FROM orders o JOIN lineitem l ON o.orderkey = l.orderkey"),
		q("c", "test", "sf1", "SELECT count(*) FROM orders"), // the largest table, but not a training statement's
	}
	dir := t.TempDir()
	dim := 64 + featurize.TextStatsDim
	tm, err := WriteTextMatrices(dir, qs, dim, stats, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tm.Featurizer != textFeaturizerV2 || tm.Counts["train"] != 2 || tm.Counts["test"] != 1 || tm.WithTables != 3 || tm.WithStats != 2 {
		t.Fatalf("%+v: want v2, 2 train and 1 test statements, 3 naming tables, 2 with every size known", tm)
	}
	if want := math.Log1p(15000); math.Abs(tm.MaxLnRows-want) > 1e-9 {
		t.Errorf("MaxLnRows %v, want ln(1+15000) = %v (training statements only)", tm.MaxLnRows, want)
	}
	f, err := os.Open(filepath.Join(dir, "text_test.npz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	arrs, err := npy.ReadNPZ(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	x := arrs["x"].Data.([]float32)
	if len(x) != dim {
		t.Fatalf("test matrix has %d values, want %d", len(x), dim)
	}
	want := featurize.TextStatsFeatures([]featurize.TableStats{{Rows: 1.5e6, Known: true}})
	for i, v := range want {
		if x[64+i] != v {
			t.Fatalf("test row's table features %v, want %v", x[64:], want)
		}
	}
	lines := 0
	tf, err := os.Open(filepath.Join(dir, "text_train.tables.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer tf.Close()
	for sc := bufio.NewScanner(tf); sc.Scan(); lines++ {
	}
	if lines != 2 {
		t.Errorf("text_train.tables.jsonl has %d lines, want one per training row (2)", lines)
	}
}
