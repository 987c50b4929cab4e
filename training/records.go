package training

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Query is one usable query record with everything the steps and the
// baselines need. The JSON form is a line of queries.jsonl.
type Query struct {
	Key      string `json:"key"`
	Template string `json:"template"`
	Split    string `json:"split"` // train, val or test
	Family   string `json:"family,omitempty"`
	Scale    string `json:"scale,omitempty"`
	// Storage is where the tables were: the Parquet catalog of a v2
	// record (collector.Workload.Storage), "connector" for the TPC
	// connectors, empty for live traffic.
	Storage string `json:"storage,omitempty"`
	// Engine ran the query: "trino" or "presto" (collector.Record.EngineName).
	Engine string `json:"engine"`
	File   string `json:"file"`
	CPUMs  int64  `json:"cpu_ms"`
	// LnCPU is ln(CPU seconds), the unnormalized target.
	LnCPU float64 `json:"ln_cpu_s"`
	SQL   string  `json:"sql"`
	// Catalog and Schema are the statement's session catalog and schema.
	Catalog string `json:"catalog,omitempty"`
	Schema  string `json:"schema,omitempty"`
	// Session is the query's explicit session properties.
	Session map[string]string `json:"session,omitempty"`
	// Warmth is how the JVM that ran the query stood to its shape
	// (collector.Warmth): WarmthWarm (the shape had run on it before),
	// WarmthCold (its first run there: bytecode generation and JIT
	// warm-up in its CPU time), empty where the record does not say
	// (records from before the flag, live traffic). WarmShape names the
	// JVM and the shape (node, start, shape hash), so that a cold run's
	// warm siblings can be found (WarmSiblings).
	Warmth    string `json:"warmth,omitempty"`
	WarmShape string `json:"warm_shape,omitempty"`
	// TrinoCPUCost is the sum of the optimizer's cpuCost estimates over
	// every plan node (NaN estimates skipped); CostKnown counts the
	// estimates that were known.
	TrinoCPUCost float64 `json:"trino_cpu_cost"`
	// TrinoCPUCostMax is the largest single cpuCost estimate (the root's,
	// if Trino's estimates are cumulative).
	TrinoCPUCostMax float64 `json:"trino_cpu_cost_max"`
	CostKnown       int     `json:"trino_cost_known"`
	PlanNodes       int     `json:"plan_nodes"`
	OTPNodes        int     `json:"otp_nodes"`
	MaxDepth        int     `json:"max_depth"`
	// Ops counts OPR values of the O-T-P tree; Tables lists TBL values
	// (with repeats); Preds holds each PRED node's token sentence; Joins
	// each join OPR's value with its criteria tokens.
	Ops    map[string]int `json:"ops"`
	Tables []string       `json:"tables"`
	Preds  [][]string     `json:"preds"`
	Joins  []Join         `json:"joins"`

	root *featurize.OTPNode
}

// Query.Warmth's values.
const (
	WarmthWarm = "warm"
	WarmthCold = "cold"
)

// WarmSiblings reports, per WarmShape, whether some query of qs ran warm
// with it: a cold run of such a shape has warm runs beside it whose CPU
// time is the one a long-running coordinator would see.
func WarmSiblings(qs []*Query) map[string]bool {
	out := map[string]bool{}
	for _, q := range qs {
		if q.Warmth == WarmthWarm && q.WarmShape != "" {
			out[q.WarmShape] = true
		}
	}
	return out
}

// Root is the query's O-T-P tree (not part of the JSON form).
func (q *Query) Root() *featurize.OTPNode { return q.root }

// Join is a join operator of a query's O-T-P tree with its criteria tokens.
type Join struct {
	Op     string   `json:"op"`
	Tokens []string `json:"tokens,omitempty"`
}

// splitNames maps split.json's part names to file names.
var splitNames = map[string]string{"train": "train", "validation": "val", "test": "test"}

// LoadStats says what LoadQueries kept and dropped.
type LoadStats struct {
	Files     []string       `json:"files"`
	SHA256    string         `json:"training_data_sha256"`
	Records   int            `json:"records"`
	Usable    int            `json:"usable"`
	Dropped   map[string]int `json:"dropped"`
	PerSplit  map[string]int `json:"per_split"`
	Truncated bool           `json:"truncated_tail,omitempty"`
	// ScaleSplit is the held-out scale of a scale split (ApplyScaleSplit);
	// empty: the template-level split.
	ScaleSplit string `json:"scale_split,omitempty"`
	// Warmth counts the usable queries by Query.Warmth ("warm", "cold",
	// "unknown").
	Warmth map[string]int `json:"warmth,omitempty"`
	// Engines are the engines the usable queries ran on, sorted: the
	// bundle's manifest says them (training.engines), and the cascade
	// trusts the model less on a cluster of another engine.
	Engines []string `json:"engines,omitempty"`
	// TreeFeatures are the O-T-P tree's optional readings the queries were
	// featurized with (featurize.TreeOptions.Names; --dynamic-filters): the
	// later steps build the same trees, and the bundle's manifest says them.
	TreeFeatures []string `json:"tree_features,omitempty"`
}

// LoadQueries reads the records, keeps the usable ones (FINISHED, CPU > 0,
// a plan that converts to an O-T-P tree, a template in the split, or none: live traffic) and
// featurizes their plans. Duplicate keys keep the first record.
func LoadQueries(paths []string, splitPath string) ([]*Query, *LoadStats, error) {
	return LoadQueriesWith(paths, splitPath, featurize.TreeOptions{})
}

// LoadQueriesWith is LoadQueries building the O-T-P trees with the readings
// tree (LoadStats.TreeFeatures says them).
func LoadQueriesWith(paths []string, splitPath string, tree featurize.TreeOptions) ([]*Query, *LoadStats, error) {
	if len(paths) == 0 {
		return nil, nil, errors.New("no --data given")
	}
	var split collector.Split
	b, err := os.ReadFile(splitPath)
	if err != nil {
		return nil, nil, err
	}
	if err := json.Unmarshal(b, &split); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", splitPath, err)
	}
	files, err := collector.RecordFiles(paths...)
	if err != nil {
		return nil, nil, err
	}
	st := &LoadStats{Files: files, Dropped: map[string]int{}, PerSplit: map[string]int{}, Warmth: map[string]int{},
		TreeFeatures: tree.Names()}
	h := sha256.New()
	seen := map[string]bool{}
	var out []*Query
	for _, f := range files {
		// The hash covers the bytes of the files in order. A collector may
		// append while we read; the hash is then of a slightly longer file.
		if err := hashFile(h, f); err != nil {
			return nil, nil, err
		}
		err := collector.ReadRecords(f, func(r *collector.Record) error {
			st.Records++
			q, why := makeQuery(r, &split, tree)
			if q == nil {
				st.Dropped[why]++
				return nil
			}
			if seen[q.Key] {
				st.Dropped["duplicate key"]++
				return nil
			}
			seen[q.Key] = true
			q.File = filepath.Base(f)
			out = append(out, q)
			st.PerSplit[q.Split]++
			if q.Warmth == "" {
				st.Warmth["unknown"]++
			} else {
				st.Warmth[q.Warmth]++
			}
			return nil
		})
		if errors.Is(err, collector.ErrTruncated) {
			st.Truncated = true // a file being written: keep its complete records
		} else if err != nil {
			return nil, nil, err
		}
	}
	st.Usable = len(out)
	st.SHA256 = hex.EncodeToString(h.Sum(nil))
	for _, q := range out {
		if !slices.Contains(st.Engines, q.Engine) {
			st.Engines = append(st.Engines, q.Engine)
		}
	}
	slices.Sort(st.Engines)
	return out, st, nil
}

func hashFile(h io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(h, f)
	return err
}

// liveTemplate names a record that has no workload template (live traffic
// from the proxy's feedback log) by its SQL fingerprint, so statements that
// differ only in literals are one template and stay on one side of the
// template-level split (collector.HashPart).
func liveTemplate(sql string) string {
	sum := sha256.Sum256([]byte(estimator.Fingerprint(sql)))
	return "live/" + hex.EncodeToString(sum[:6])
}

// makeQuery converts one record, or says why it is not usable. Records of
// the collector are placed by split.json; live traffic by collector.HashPart.
func makeQuery(r *collector.Record, split *collector.Split, tree featurize.TreeOptions) (*Query, string) {
	switch {
	case r.Status != collector.StatusFinished:
		return nil, "status " + r.Status
	case r.Stats == nil || r.Stats.CPUMillis <= 0:
		return nil, "no CPU time"
	case r.Plan == nil || len(r.Plan.JSON) == 0:
		return nil, "no plan"
	}
	var template, part, family, scale, storage string
	if r.Workload != nil {
		var ok bool
		template, family, scale, storage = r.Workload.Template, r.Workload.Family, r.Workload.Scale, r.Workload.Storage
		if storage == "" {
			storage = "connector"
		}
		if part, ok = split.ByTemplate[template]; !ok {
			return nil, "template not in split"
		}
	} else {
		template, family = liveTemplate(r.SQL), "live"
		part = collector.HashPart(template)
	}
	engine := r.EngineName()
	p, err := plan.Parse(r.Plan.JSON)
	if err != nil {
		if engine != string(dialect.Trino) {
			// Counted apart: another engine's plans are skipped until the
			// plan decoder reads them.
			return nil, "plan parse error (" + engine + ")"
		}
		return nil, "plan parse error"
	}
	root, err := featurize.BuildOTPWith(p, tree)
	if err != nil {
		return nil, "O-T-P error"
	}
	stats := featurize.Stats(root)
	key := r.Key
	if engine != string(dialect.Trino) {
		// The collector's key says what was planned, not where: the same
		// statement on two engines is two queries.
		key = engine + ":" + key
	}
	q := &Query{
		Key: key, Template: template, Split: splitNames[part],
		Family: family, Scale: scale, Storage: storage, Engine: engine,
		CPUMs: r.Stats.CPUMillis, LnCPU: math.Log(float64(r.Stats.CPUMillis) / 1000),
		SQL: r.SQL, Catalog: r.Catalog, Schema: r.Schema, Session: r.SessionProperties,
		PlanNodes: p.Nodes, OTPNodes: stats.Nodes, MaxDepth: stats.MaxDepth,
		Ops: map[string]int{}, Tables: []string{}, Preds: [][]string{}, Joins: []Join{},
		root: root,
	}
	if w := r.Warmth; w != nil {
		q.Warmth = WarmthCold
		if w.Warm {
			q.Warmth = WarmthWarm
		}
		q.WarmShape = w.Node + "@" + w.StartedAt.UTC().Format("20060102T150405Z") + "/" + w.Shape
	}
	p.Root.Walk(func(n *plan.PlanNode) {
		for _, e := range n.Estimates {
			if !math.IsNaN(e.CPUCost) && !math.IsInf(e.CPUCost, 0) {
				q.TrinoCPUCost += e.CPUCost
				q.TrinoCPUCostMax = math.Max(q.TrinoCPUCostMax, e.CPUCost)
				q.CostKnown++
			}
		}
	})
	root.Walk(func(n *featurize.OTPNode) {
		switch n.Kind {
		case featurize.OTPOperator:
			q.Ops[n.Value]++
			if featurize.IsJoin(opName(n.Value)) {
				j := Join{Op: n.Value}
				if n.Pred != nil {
					j.Tokens = n.Pred.Tokens()
				}
				q.Joins = append(q.Joins, j)
			}
		case featurize.OTPTable:
			q.Tables = append(q.Tables, n.Value)
		case featurize.OTPPredicate:
			if n.Pred != nil {
				if toks := n.Pred.Tokens(); len(toks) > 0 {
					q.Preds = append(q.Preds, toks)
				}
			}
		}
	})
	return q, ""
}

// opName strips the distribution suffix: "InnerJoin(REPLICATED)" → "InnerJoin".
func opName(v string) string {
	if i := strings.IndexByte(v, '('); i >= 0 {
		return v[:i]
	}
	return v
}

// WriteQueries writes queries.jsonl.
func WriteQueries(path string, qs []*Query) error {
	return writeFile(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, q := range qs {
			if err := enc.Encode(q); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeFile creates path and writes it through a buffer with write; the
// file is closed on every path, and a failed write or flush is returned.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := write(w); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// sameQueries keeps the queries listed in queries.jsonl, in its order, and
// fails when one of them is missing from the records.
func sameQueries(path string, qs []*Query) ([]*Query, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run the featurize step first)", err)
	}
	defer f.Close()
	byKey := make(map[string]*Query, len(qs))
	for _, q := range qs {
		byKey[q.Key] = q
	}
	var out []*Query
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var line struct {
			Key   string `json:"key"`
			Split string `json:"split"`
		}
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		q := byKey[line.Key]
		if q == nil {
			return nil, fmt.Errorf("query %s of %s is not in the records any more", line.Key, path)
		}
		// The featurize step decided the split (a scale split included).
		q.Split = line.Split
		out = append(out, q)
	}
	return out, nil
}
