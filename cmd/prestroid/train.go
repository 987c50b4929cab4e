package main

// prestroid train: the training pipeline (DESIGN §2–§4). Go does every
// featurization step (the same code as serving); Python (the trainer/
// package) does Word2Vec, PyTorch training, ONNX export and the bundle.
//
// Steps, each writing files into --workdir and rerunnable alone (--steps):
//
//	featurize  records → queries.jsonl (one line per usable query: split,
//	           label, plan summaries for the baselines), corpus.txt (the
//	           training split's predicate token sentences), meta.json
//	w2v        corpus.txt → tokens.vec (python -m trainer.w2v)
//	tensors    records + tokens.vec → ops.json, tables.json, target.json,
//	           {train,val,test}.npz (+ full_{split}_NNN.npz with --full)
//	train      python -m trainer.train: Tree-CNN, ONNX export, parity
//	           check, bundle in --out
//
// and one step that is never run unless named:
//
//	cv         python -m trainer.cv: template-level cross-validation of the
//	           configuration the flags describe over the train and
//	           validation queries (--cv-folds, --cv-seeds), for model choice
//	           without the test split; WORKDIR/cv_NAME.json, resumable;
//	           --cv-baseline cross-validates a baseline on the same folds

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

func init() {
	register("train", "train a cost model bundle from query records (Go featurizer + Python trainer)", runTrain)
}

const trainUsage = `usage: prestroid train --data RECORDS... --out BUNDLE_DIR [flags]

Reads query records (files or directories of *.jsonl.gz), keeps the FINISHED
queries with CPU time > 0 and a plan, splits them by template (--split),
featurizes them in Go, trains Word2Vec predicate vectors and the Tree-CNN in
Python, exports ONNX and writes a model bundle (estimator/BUNDLE.md).
RECORDS may also follow the flags as arguments.

flags:
`

// trainSteps are the pipeline steps in order.
var trainSteps = []string{"featurize", "w2v", "tensors", "train"}

type trainFlags struct {
	data        []string
	out         string
	workdir     string
	split       string
	n, k, c     int
	pf          int
	full        bool
	fullOnly    bool
	fullLayouts string
	epochs      int
	device      string
	seed        int
	python      string
	minCount    int
	cbow        bool
	lr          float64
	lrPlateau   int
	dropout     float64
	planSkip    bool
	pool        string
	ema         float64
	batch       int
	kernels     string
	dense       string
	patience    int
	steps       string
	cvName      string
	cvFolds     int
	cvSeeds     string
	cvBaseline  string
	threads     int
	// noEstimates trains the paper's network, without the est/plan inputs.
	noEstimates bool
	fullChunk   int
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

func runTrain(args []string) int {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), trainUsage)
		fs.PrintDefaults()
	}
	var tf trainFlags
	var data multiFlag
	fs.Var(&data, "data", "record file or directory (repeatable; more may follow the flags)")
	fs.StringVar(&tf.out, "out", "", "bundle directory to write (required for the train step)")
	fs.StringVar(&tf.workdir, "workdir", "", "directory for intermediate files (default: OUT.work)")
	fs.StringVar(&tf.split, "split", "data/split.json", "template-level train/validation/test split")
	fs.IntVar(&tf.n, "n", 15, "sub-tree node limit N")
	fs.IntVar(&tf.k, "k", 9, "sub-trees per query K")
	fs.IntVar(&tf.c, "c", 3, "convolution depth C (tree-conv layers)")
	fs.IntVar(&tf.pf, "pf", 100, "predicate vector size Pf (Word2Vec dimension)")
	fs.BoolVar(&tf.full, "full", false, "also train the full-tree models (padded and packed); their metrics go to the workdir")
	fs.StringVar(&tf.fullLayouts, "full-layouts", "padded,packed", "which full-tree models --full trains: padded (the paper's, 0-padded to the longest tree), packed, or both; the two compute the same function, only their cost differs")
	fs.BoolVar(&tf.fullOnly, "full-only", false, "train only the full-tree models (implies --full; no bundle; keeps the workdir's sub-tree results)")
	fs.IntVar(&tf.epochs, "epochs", 200, "maximum epochs (early stopping on validation)")
	fs.IntVar(&tf.patience, "patience", 25, "early-stopping patience in epochs")
	fs.StringVar(&tf.device, "device", "auto", "auto (CUDA when available), cpu or cuda")
	fs.IntVar(&tf.seed, "seed", 1, "random seed (Word2Vec and PyTorch)")
	fs.StringVar(&tf.python, "python", "", "Python interpreter with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	fs.IntVar(&tf.minCount, "min-count", 10, "Word2Vec min token count (lowered automatically for tiny corpora)")
	fs.BoolVar(&tf.cbow, "cbow", false, "Word2Vec CBOW instead of skip-gram")
	fs.BoolVar(&tf.noEstimates, "no-estimates", false, "leave out the optimizer-estimate features (the paper's model; TENSORS.md)")
	fs.Float64Var(&tf.lr, "lr", 1e-4, "Adam learning rate")
	fs.IntVar(&tf.lrPlateau, "lr-plateau", 0, "halve the learning rate after this many epochs without validation improvement (0: constant rate)")
	fs.Float64Var(&tf.dropout, "dropout", 0.1, "dropout in the tree convolutions and dense layers")
	fs.BoolVar(&tf.planSkip, "plan-skip", false, "add a linear path from the plan vector (the optimizer's plan-wide estimates) straight to the output")
	fs.StringVar(&tf.pool, "pool", "concat", "how the K sub-trees reach the dense layers: concat (the paper's: one block per sub-tree position) or sum-max (their sum and maximum: order-free)")
	fs.Float64Var(&tf.ema, "ema", 0, "validate and keep an exponential moving average of the weights, this decay per step (e.g. 0.995; 0: off)")
	fs.IntVar(&tf.batch, "batch", 64, "batch size")
	fs.StringVar(&tf.kernels, "kernels", "128,128,128", "tree-conv kernels per layer (C values)")
	fs.StringVar(&tf.dense, "dense", "32,8", "dense layer sizes")
	fs.StringVar(&tf.steps, "steps", strings.Join(trainSteps, ","), "steps to run, comma-separated: "+strings.Join(trainSteps, ",")+" (and cv, only when named)")
	fs.IntVar(&tf.fullChunk, "full-chunk", 128, "queries per full-tree .npz file")
	fs.IntVar(&tf.threads, "threads", 2, "CPU threads for PyTorch (train and cv steps)")
	fs.StringVar(&tf.cvName, "cv-name", "", "the cv step's name for this configuration: WORKDIR/cv_NAME.json (default N-K-Pf)")
	fs.IntVar(&tf.cvFolds, "cv-folds", 5, "the cv step's folds of train+validation templates")
	fs.StringVar(&tf.cvBaseline, "cv-baseline", "", "the cv step cross-validates this baseline (trino, tfidf_gbr, logbin, svr, mscn, wcnn, trino_max) on the same folds instead of the network")
	fs.StringVar(&tf.cvSeeds, "cv-seeds", "1", "the cv step's seeds, comma-separated (together they also score their ensemble)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	tf.data = append([]string(data), fs.Args()...)
	tf.full = tf.full || tf.fullOnly
	if tf.workdir == "" {
		if tf.out == "" {
			fmt.Fprintln(os.Stderr, "prestroid train: need --out or --workdir")
			return 2
		}
		tf.workdir = strings.TrimRight(tf.out, "/") + ".work"
	}
	if tf.python == "" {
		tf.python = defaultPython()
	}
	if err := os.MkdirAll(tf.workdir, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid train:", err)
		return 1
	}
	for _, step := range strings.Split(tf.steps, ",") {
		var err error
		switch strings.TrimSpace(step) {
		case "featurize":
			err = stepFeaturize(&tf)
		case "w2v":
			err = stepW2V(&tf)
		case "tensors":
			err = stepTensors(&tf)
		case "train":
			err = stepTrain(&tf)
		case "cv":
			err = stepCV(&tf)
		case "":
			continue
		default:
			err = fmt.Errorf("unknown step %q (have %s,cv)", step, strings.Join(trainSteps, ","))
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "prestroid train: %s: %v\n", step, err)
			return 1
		}
	}
	return 0
}

// ---------------------------------------------------------------- records

// trainQuery is one usable query record with everything the steps and the
// baselines need. The JSON form is a line of queries.jsonl.
type trainQuery struct {
	Key      string `json:"key"`
	Template string `json:"template"`
	Split    string `json:"split"` // train, val or test
	Family   string `json:"family,omitempty"`
	Scale    string `json:"scale,omitempty"`
	File     string `json:"file"`
	CPUMs    int64  `json:"cpu_ms"`
	// LnCPU is ln(CPU seconds), the unnormalized target.
	LnCPU float64 `json:"ln_cpu_s"`
	SQL   string  `json:"sql"`
	// Session is the query's explicit session properties.
	Session map[string]string `json:"session,omitempty"`
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
	Joins  []trainJoin    `json:"joins"`

	root *featurize.OTPNode
}

type trainJoin struct {
	Op     string   `json:"op"`
	Tokens []string `json:"tokens,omitempty"`
}

// splitNames maps split.json's part names to file names.
var splitNames = map[string]string{"train": "train", "validation": "val", "test": "test"}

// loadStats says what loadQueries kept and dropped.
type loadStats struct {
	Files     []string       `json:"files"`
	SHA256    string         `json:"training_data_sha256"`
	Records   int            `json:"records"`
	Usable    int            `json:"usable"`
	Dropped   map[string]int `json:"dropped"`
	PerSplit  map[string]int `json:"per_split"`
	Truncated bool           `json:"truncated_tail,omitempty"`
}

// loadQueries reads the records, keeps the usable ones (FINISHED, CPU > 0,
// a plan that converts to an O-T-P tree, a template in the split, or none: live traffic) and
// featurizes their plans. Duplicate keys keep the first record.
func loadQueries(paths []string, splitPath string) ([]*trainQuery, *loadStats, error) {
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
	st := &loadStats{Files: files, Dropped: map[string]int{}, PerSplit: map[string]int{}}
	h := sha256.New()
	seen := map[string]bool{}
	var out []*trainQuery
	for _, f := range files {
		// The hash covers the bytes of the files in order. A collector may
		// append while we read; the hash is then of a slightly longer file.
		if err := hashFile(h, f); err != nil {
			return nil, nil, err
		}
		err := collector.ReadRecords(f, func(r *collector.Record) error {
			st.Records++
			q, why := makeQuery(r, &split)
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
func makeQuery(r *collector.Record, split *collector.Split) (*trainQuery, string) {
	switch {
	case r.Status != collector.StatusFinished:
		return nil, "status " + r.Status
	case r.Stats == nil || r.Stats.CPUMillis <= 0:
		return nil, "no CPU time"
	case r.Plan == nil || len(r.Plan.JSON) == 0:
		return nil, "no plan"
	}
	var template, part, family, scale string
	if r.Workload != nil {
		var ok bool
		template, family, scale = r.Workload.Template, r.Workload.Family, r.Workload.Scale
		if part, ok = split.ByTemplate[template]; !ok {
			return nil, "template not in split"
		}
	} else {
		template, family = liveTemplate(r.SQL), "live"
		part = collector.HashPart(template)
	}
	pl, err := plan.Parse(r.Plan.JSON)
	if err != nil {
		return nil, "plan parse error"
	}
	root, err := featurize.BuildOTP(pl)
	if err != nil {
		return nil, "O-T-P error"
	}
	stats := featurize.Stats(root)
	q := &trainQuery{
		Key: r.Key, Template: template, Split: splitNames[part],
		Family: family, Scale: scale,
		CPUMs: r.Stats.CPUMillis, LnCPU: math.Log(float64(r.Stats.CPUMillis) / 1000),
		SQL: r.SQL, Session: r.SessionProperties,
		PlanNodes: pl.Nodes, OTPNodes: stats.Nodes, MaxDepth: stats.MaxDepth,
		Ops: map[string]int{}, Tables: []string{}, Preds: [][]string{}, Joins: []trainJoin{},
		root: root,
	}
	pl.Root.Walk(func(n *plan.PlanNode) {
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
				j := trainJoin{Op: n.Value}
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

// writeQueries writes queries.jsonl.
func writeQueries(path string, qs []*trainQuery) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, q := range qs {
		if err := enc.Encode(q); err != nil {
			f.Close()
			return err
		}
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

// ---------------------------------------------------------------- steps

func stepFeaturize(tf *trainFlags) error {
	qs, st, err := loadQueries(tf.data, tf.split)
	if err != nil {
		return err
	}
	if st.PerSplit["train"] == 0 {
		return fmt.Errorf("no usable training queries in %d records (dropped: %v)", st.Records, st.Dropped)
	}
	if err := writeQueries(filepath.Join(tf.workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	// The Word2Vec corpus: the training split's predicates only (serving
	// sees no test predicates either), one sentence per PRED node; join
	// criteria are not PRED nodes in the default encoding (DESIGN §2.2).
	f, err := os.Create(filepath.Join(tf.workdir, "corpus.txt"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	sentences := 0
	for _, q := range qs {
		if q.Split != "train" {
			continue
		}
		for _, s := range q.Preds {
			fmt.Fprintln(w, strings.Join(s, " "))
			sentences++
		}
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(tf.workdir, "meta.json"), st); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "featurize: %d records, %d usable (train %d, val %d, test %d), dropped %v; corpus %d sentences\n",
		st.Records, st.Usable, st.PerSplit["train"], st.PerSplit["val"], st.PerSplit["test"], st.Dropped, sentences)
	return nil
}

func stepW2V(tf *trainFlags) error {
	args := []string{"-m", "trainer.w2v",
		"--corpus", filepath.Join(tf.workdir, "corpus.txt"),
		"--out", filepath.Join(tf.workdir, "tokens.vec"),
		"--size", strconv.Itoa(tf.pf), "--window", "5",
		"--min-count", strconv.Itoa(tf.minCount), "--seed", strconv.Itoa(tf.seed)}
	if tf.cbow {
		args = append(args, "--cbow")
	}
	return runPython(tf.python, args...)
}

// targetInfo is target.json: the normalization of ln(CPU seconds).
type targetInfo struct {
	Transform string  `json:"transform"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
}

// tensorInfo is tensors.json: what the tensors step wrote.
type tensorInfo struct {
	N, K, C, Pf  int
	Global       []float32      `json:"global_pred_vector"`
	Counts       map[string]int `json:"counts"`
	FullChunks   map[string]int `json:"full_chunks,omitempty"`
	MaxFullNodes int            `json:"max_full_nodes,omitempty"`
}

func stepTensors(tf *trainFlags) error {
	qs, _, err := loadQueries(tf.data, tf.split)
	if err != nil {
		return err
	}
	// Exactly the queries the featurize step kept: a collector may have
	// appended records since.
	if qs, err = sameQueries(filepath.Join(tf.workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	vf, err := os.Open(filepath.Join(tf.workdir, "tokens.vec"))
	if err != nil {
		return err
	}
	vecs, err := featurize.LoadWord2VecText(vf)
	vf.Close()
	if err != nil {
		return err
	}
	if vecs.Dim != tf.pf {
		return fmt.Errorf("tokens.vec has dimension %d, --pf is %d", vecs.Dim, tf.pf)
	}
	// Vocabularies and normalization from the training split only.
	var trainRoots []*featurize.OTPNode
	tgt := targetInfo{Transform: "ln_cpu_seconds_minmax", Min: math.Inf(1), Max: math.Inf(-1)}
	for _, q := range qs {
		if q.Split == "train" {
			trainRoots = append(trainRoots, q.root)
			tgt.Min = math.Min(tgt.Min, q.LnCPU)
			tgt.Max = math.Max(tgt.Max, q.LnCPU)
		}
	}
	if len(trainRoots) == 0 {
		return errors.New("no training queries")
	}
	if tgt.Max <= tgt.Min {
		tgt.Max = tgt.Min + 1
	}
	ops, tables := featurize.BuildVocabs(trainRoots)
	enc := &featurize.Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: vecs.Dim,
		Sampler: featurize.SamplerConfig{N: tf.n, K: tf.k, C: tf.c}}
	if err := enc.Sampler.Validate(); err != nil {
		return err
	}
	// The global mean PRED vector (DESIGN §2.3's last fallback): the mean of
	// the training queries' PRED vectors, encoded over whole trees.
	vecs.Global = globalPredVector(enc, trainRoots)
	info := tensorInfo{N: tf.n, K: tf.k, C: tf.c, Pf: vecs.Dim, Global: vecs.Global,
		Counts: map[string]int{}, FullChunks: map[string]int{}}
	for _, part := range []string{"train", "val", "test"} {
		var batch []*featurize.Features
		var targets []float32
		var keys []string
		var part_ []*trainQuery
		for _, q := range qs {
			if q.Split != part {
				continue
			}
			f, err := enc.Encode(q.root)
			if err != nil {
				return fmt.Errorf("%s: %w", q.Key, err)
			}
			batch = append(batch, f)
			targets = append(targets, float32((q.LnCPU-tgt.Min)/(tgt.Max-tgt.Min)))
			keys = append(keys, q.Key)
			part_ = append(part_, q)
		}
		info.Counts[part] = len(batch)
		if len(batch) == 0 {
			fmt.Fprintf(os.Stderr, "tensors: no %s queries\n", part)
			continue
		}
		meta := featurize.BatchMeta{N: tf.n, K: tf.k, C: tf.c}
		if err := writeNPZFile(filepath.Join(tf.workdir, part+".npz"), batch, meta, targets); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(tf.workdir, part+".keys.txt"), []byte(strings.Join(keys, "\n")+"\n"), 0o644); err != nil {
			return err
		}
		if tf.full {
			n, maxNodes, err := writeFullChunks(tf, enc, part, part_, targets)
			if err != nil {
				return err
			}
			info.FullChunks[part] = n
			info.MaxFullNodes = max(info.MaxFullNodes, maxNodes)
		}
	}
	for name, v := range map[string]any{"ops.json": ops, "tables.json": tables, "target.json": tgt, "tensors.json": info} {
		if err := writeJSON(filepath.Join(tf.workdir, name), v); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "tensors: N=%d K=%d C=%d Pf=%d; %d operators, %d tables; train %d, val %d, test %d; ln CPU s in [%.3f, %.3f]\n",
		tf.n, tf.k, tf.c, vecs.Dim, ops.Len(), tables.Len(), info.Counts["train"], info.Counts["val"], info.Counts["test"], tgt.Min, tgt.Max)
	return nil
}

// writeFullChunks writes the full-tree tensors of one split in files of at
// most --full-chunk queries (each padded to its own longest tree: one file
// padded to the longest tree of the whole set would be huge). The trainer
// re-pads (padded model) or packs (packed model) per batch.
func writeFullChunks(tf *trainFlags, enc *featurize.Encoder, part string, qs []*trainQuery, targets []float32) (int, int, error) {
	old, _ := filepath.Glob(filepath.Join(tf.workdir, "full_"+part+"_*.npz"))
	for _, p := range old {
		os.Remove(p)
	}
	chunks, maxNodes := 0, 0
	for lo := 0; lo < len(qs); lo += tf.fullChunk {
		hi := min(lo+tf.fullChunk, len(qs))
		var batch []*featurize.Features
		for _, q := range qs[lo:hi] {
			f, err := enc.EncodeFull(q.root, 0)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %w", q.Key, err)
			}
			maxNodes = max(maxNodes, f.Slots-1)
			batch = append(batch, f)
		}
		path := filepath.Join(tf.workdir, fmt.Sprintf("full_%s_%03d.npz", part, chunks))
		if err := writeNPZFile(path, batch, featurize.BatchMeta{K: 1, C: tf.c, Full: true}, targets[lo:hi]); err != nil {
			return 0, 0, err
		}
		chunks++
	}
	return chunks, maxNodes, nil
}

// sameQueries keeps the queries listed in queries.jsonl, in its order, and
// fails when one of them is missing from the records.
func sameQueries(path string, qs []*trainQuery) ([]*trainQuery, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run the featurize step first)", err)
	}
	defer f.Close()
	byKey := make(map[string]*trainQuery, len(qs))
	for _, q := range qs {
		byKey[q.Key] = q
	}
	var out []*trainQuery
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		var line struct {
			Key string `json:"key"`
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
		out = append(out, q)
	}
	return out, nil
}

// globalPredVector is the mean of the non-zero PRED vectors of the trees.
func globalPredVector(enc *featurize.Encoder, roots []*featurize.OTPNode) []float32 {
	sum := make([]float64, enc.Dim)
	n := 0
	for _, r := range roots {
		f, err := enc.EncodeFull(r, 0)
		if err != nil || f.Dim == 0 {
			continue
		}
		for s, kind := range f.Kind {
			if kind != featurize.SlotPRED {
				continue
			}
			v := f.Pred[s*f.Dim : (s+1)*f.Dim]
			nz := false
			for _, x := range v {
				if x != 0 {
					nz = true
					break
				}
			}
			if !nz {
				continue
			}
			for i, x := range v {
				sum[i] += float64(x)
			}
			n++
		}
	}
	out := make([]float32, enc.Dim)
	if n > 0 {
		for i := range out {
			out[i] = float32(sum[i] / float64(n))
		}
	}
	return out
}

func writeNPZFile(path string, batch []*featurize.Features, meta featurize.BatchMeta, targets []float32) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	if err := featurize.WriteNPZ(w, batch, meta, targets); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func stepTrain(tf *trainFlags) error {
	if tf.out == "" {
		return errors.New("the train step needs --out")
	}
	args := append([]string{"-m", "trainer.train", "--workdir", tf.workdir, "--out", tf.out,
		"--seed", strconv.Itoa(tf.seed)}, networkArgs(tf)...)
	if tf.fullOnly {
		args = append(args, "--full-only", "--full-layouts", tf.fullLayouts)
	} else if tf.full {
		args = append(args, "--full", "--full-layouts", tf.fullLayouts)
	}
	return runPython(tf.python, args...)
}

func stepCV(tf *trainFlags) error {
	name := tf.cvName
	switch {
	case name != "":
	case tf.cvBaseline != "":
		name = tf.cvBaseline
	default:
		name = fmt.Sprintf("%d-%d-%d", tf.n, tf.k, tf.pf)
	}
	if strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("--cv-name %q: want a plain file-name part", name)
	}
	args := append([]string{"-m", "trainer.cv", "--workdir", tf.workdir, "--name", name,
		"--folds", strconv.Itoa(tf.cvFolds), "--seeds", tf.cvSeeds}, networkArgs(tf)...)
	if tf.cvBaseline != "" {
		args = append(args, "--baseline", tf.cvBaseline)
	}
	return runPython(tf.python, args...)
}

// networkArgs are the trainer flags of the network and its training, the
// same for the train and cv steps.
func networkArgs(tf *trainFlags) []string {
	args := []string{"--epochs", strconv.Itoa(tf.epochs), "--patience", strconv.Itoa(tf.patience),
		"--device", tf.device, "--threads", strconv.Itoa(tf.threads),
		"--lr", strconv.FormatFloat(tf.lr, 'g', -1, 64), "--batch", strconv.Itoa(tf.batch),
		"--kernels", tf.kernels, "--dense", tf.dense, "--pool", tf.pool,
		"--ema", strconv.FormatFloat(tf.ema, 'g', -1, 64),
		"--lr-plateau", strconv.Itoa(tf.lrPlateau), "--dropout", strconv.FormatFloat(tf.dropout, 'g', -1, 64)}
	if tf.noEstimates {
		args = append(args, "--no-estimates")
	}
	if tf.planSkip {
		args = append(args, "--plan-skip")
	}
	return args
}

// ---------------------------------------------------------------- python

// defaultPython is $PRESTROID_PYTHON, else the project venv, else python3.
func defaultPython() string {
	if p := os.Getenv("PRESTROID_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat(".venv/bin/python"); err == nil {
		abs, _ := filepath.Abs(".venv/bin/python")
		return abs
	}
	return "python3"
}

// runPython runs `python args...` with the output passed through. When the
// trainer sources are found beside the working directory (a checkout), they
// go on PYTHONPATH, so an uninstalled checkout works too.
func runPython(python string, args ...string) error {
	return runPythonTo(os.Stderr, python, args...)
}

// runPythonTo is runPython with the child's stdout going to stdout (its
// stderr always goes to ours).
func runPythonTo(stdout io.Writer, python string, args ...string) error {
	cmd := exec.Command(python, args...)
	cmd.Stdout, cmd.Stderr = stdout, os.Stderr
	cmd.Env = os.Environ()
	if dir := trainerSourceDir(); dir != "" {
		pp := dir
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		cmd.Env = append(cmd.Env, "PYTHONPATH="+pp)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", python, strings.Join(args[:min(2, len(args))], " "), err)
	}
	return nil
}

// trainerSourceDir finds trainer/trainer/__init__.py from the working
// directory or its parents and returns the directory holding the package.
func trainerSourceDir() string {
	if d := os.Getenv("PRESTROID_TRAINER_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for i := 0; i < 4; i++ {
		if _, err := os.Stat(filepath.Join(dir, "trainer", "trainer", "__init__.py")); err == nil {
			return filepath.Join(dir, "trainer")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
