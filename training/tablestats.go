package training

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

// TableStatsFile is what `prestroid table-stats` writes: the statistics
// Trino gave (SHOW STATS, as the serving cache asks them) of every table
// the records name, by catalog.schema.table, with where and when they
// were read.
type TableStatsFile struct {
	Server string                          `json:"server"`
	Read   string                          `json:"read"` // RFC 3339
	Tables map[string]featurize.TableStats `json:"tables"`
}

// ReadTableStats reads a TableStatsFile.
func ReadTableStats(path string) (*TableStatsFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f := &TableStatsFile{}
	if err := json.Unmarshal(b, f); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

// Write writes f as indented JSON (tables sorted by name).
func (f *TableStatsFile) Write(path string) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// StatementTables are the tables q names (plan.Tables with its session).
func (q *Query) StatementTables() []plan.TableName {
	names, _ := plan.Tables(q.SQL, q.Catalog, q.Schema)
	return names
}

// tablesOf are the statistics of the tables q names, as the serving cache
// would give them once fetched (unknown for a table the file lacks).
func (f *TableStatsFile) tablesOf(q *Query) []featurize.TableStats {
	names := q.StatementTables()
	if len(names) == 0 {
		return nil
	}
	out := make([]featurize.TableStats, len(names))
	for i, n := range names {
		out[i] = f.Tables[n.String()]
	}
	return out
}

// allKnown reports whether every table's size is known.
func allKnown(tables []featurize.TableStats) bool {
	for _, t := range tables {
		if !t.Known {
			return false
		}
	}
	return true
}

// unknownShare is the share of training statements the text step shows
// with every table's size unknown (chosen by a hash of the key, so the
// same ones every run): the serving cache knows nothing of a table until
// its first fetch, and the model must still answer (as a stand-in).
const unknownShare = 0.15

func dropStats(key string) bool { return keyShare(key, "stats") < unknownShare }

// blindShare is the share of training statements the text step shows
// without their session's schema name (their tables still resolved with
// it, so their sizes are read): a deployment's schemas are not the
// training set's tpch_sf1 or tpcds_sf0_1, and a model that reads the
// scale from a schema's name would know nothing there; these statements
// make it read the size from the tables' statistics. (The catalog stays:
// it says the storage, connector or Parquet, which costs per row differ
// by an order of magnitude.)
const blindShare = 0.3

func blindContext(key string) bool { return keyShare(key, "context") < blindShare }

// keyShare is a number in [0, 1) fixed by key and salt.
func keyShare(key, salt string) float64 {
	h := fnv.New32a()
	h.Write([]byte(salt))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return float64(h.Sum32()%1000) / 1000
}
