package training

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// EvalConfig is one evaluation of a model bundle and the baselines on the
// test split (docs/design.md §3; `prestroid eval`). Go featurizes the records with
// the bundle's own vocabularies and vectors (the serving path); Python
// (trainer.eval) runs the ONNX model, fits the baselines on the
// train/validation splits of the same records and writes eval.json and
// report.md into Report.
type EvalConfig struct {
	// Bundle is the model bundle directory. Required.
	Bundle string
	// Data are the record files or directories; Split the template-level
	// split.
	Data  []string
	Split string
	// ScaleSplit holds out a scale as the test split (Config.ScaleSplit);
	// ignored with TrainWorkdirs (the training run's split holds).
	ScaleSplit string
	// Workdir holds the intermediate files; Report gets eval.json,
	// report.md and the plots. Both required (see DefaultReport).
	Workdir string
	Report  string
	// TrainWorkdirs are `prestroid train` workdirs: the first one's queries
	// are evaluated exactly (the records may have grown since), and the
	// others' Tree-CNN test predictions are included. Empty means the
	// records as they are now.
	TrainWorkdirs []string
	// Python is the interpreter with the trainer package; empty means
	// DefaultPython().
	Python string
	// Baselines is "all", "none" or a comma list; Seed seeds the learned
	// baselines; Quick trains the neural baselines for a few epochs only.
	Baselines string
	Seed      int
	Quick     bool
	// Log receives the summary line and the Python child's output. Nil
	// means os.Stderr.
	Log io.Writer
}

// DefaultReport is BUNDLE.eval, the report directory when none is given;
// the workdir then defaults to REPORT/work.
func DefaultReport(bundle string) string { return strings.TrimRight(bundle, "/") + ".eval" }

// LoadBundleEncoder reads a bundle with the serving side's reader
// (estimator.ReadBundle: every check but the model's outputs) and builds
// its encoder.
func LoadBundleEncoder(dir string) (*featurize.Encoder, *bundle.Manifest, error) {
	b, err := bundle.Read(dir)
	if err != nil {
		return nil, nil, err
	}
	m := &b.Manifest
	enc := &featurize.Encoder{Ops: b.Ops, Tables: b.Tables, Vectors: b.Vectors, Dim: m.Pf,
		Sampler: featurize.SamplerConfig{N: m.N, K: m.K, C: m.C}, Tree: m.Tree()}
	return enc, m, nil
}

// Eval prepares the workdir (EvalPrepare) and runs trainer.eval.
func Eval(cfg *EvalConfig) error {
	log := cfg.Log
	if log == nil {
		log = os.Stderr
	}
	trainWork := ""
	if len(cfg.TrainWorkdirs) > 0 {
		trainWork = cfg.TrainWorkdirs[0]
	}
	if err := EvalPrepare(log, cfg.Bundle, cfg.Data, cfg.Split, cfg.ScaleSplit, cfg.Workdir, trainWork); err != nil {
		return err
	}
	args := []string{"-m", "trainer.eval", "--bundle", cfg.Bundle, "--workdir", cfg.Workdir,
		"--report", cfg.Report, "--baselines", cfg.Baselines, "--seed", fmt.Sprint(cfg.Seed)}
	if cfg.Quick {
		args = append(args, "--quick")
	}
	for _, w := range cfg.TrainWorkdirs {
		args = append(args, "--train-workdir", w)
	}
	python := cfg.Python
	if python == "" {
		python = DefaultPython()
	}
	return RunPython(log, log, python, args...)
}

// EvalPrepare writes queries.jsonl (all splits, for the baselines),
// meta.json and the test split's tensors encoded with the bundle into
// workdir. With trainWork, the queries are exactly that training run's.
//
// scaleSplit, when set and there is no trainWork, applies a scale split
// (ApplyScaleSplit); with trainWork the training run's split holds.
func EvalPrepare(log io.Writer, bundle string, paths []string, splitPath, scaleSplit, workdir, trainWork string) error {
	enc, m, err := LoadBundleEncoder(bundle)
	if err != nil {
		return err
	}
	if m.Kind != "" && m.Kind != "subtree" {
		return fmt.Errorf("bundle kind %q: eval handles sub-tree bundles", m.Kind)
	}
	qs, st, err := LoadQueriesWith(paths, splitPath, enc.Tree)
	if err != nil {
		return err
	}
	if trainWork != "" {
		// the training run's snapshot: same queries, same hash and counts
		if qs, err = sameQueries(filepath.Join(trainWork, "queries.jsonl"), qs); err != nil {
			return err
		}
		st = &LoadStats{}
		if err := readJSON(filepath.Join(trainWork, "meta.json"), st); err != nil {
			return err
		}
	} else if scaleSplit != "" {
		if _, err := ApplyScaleSplit(qs, st, scaleSplit); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return err
	}
	if err := WriteQueries(filepath.Join(workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(workdir, "meta.json"), st); err != nil {
		return err
	}
	var test []*Query
	for _, q := range qs {
		if q.Split == "test" {
			test = append(test, q)
		}
	}
	if len(test) == 0 {
		return errors.New("no test-split queries in the records")
	}
	tgt := Target{Min: m.Target.Min, Max: m.Target.Max}
	meta := featurize.BatchMeta{N: m.N, K: m.K, C: m.C}
	if err := writeSplitTensors(workdir, "test", enc, meta, test, tgt); err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"records": st.Records, "usable": st.Usable, "per_split": st.PerSplit})
	fmt.Fprintf(log, "eval: %s; test queries encoded with bundle %s\n", b, m.ModelID)
	return nil
}

// The gate's defaults (trainer/trainer/ensemble.py GATE_INPUT,
// GATE_QUANTILE, GATE_WIDTH): the anchor takes over for a plan whose largest
// row estimate lies beyond nearly every training plan's (models/README.md,
// "The gated network").
const (
	DefaultGateInput    = "rows"
	DefaultGateQuantile = 0.99
	DefaultGateWidth    = 1.0
)

// EnsembleConfig is one `prestroid ensemble`: a bundle whose model is the
// mean of the member bundles' outputs, or plain and cost-anchored members
// gated by the plan's size (trainer/trainer/ensemble.py).
type EnsembleConfig struct {
	// Out is the bundle directory to write (replaced). Required.
	Out string
	// Workdir, when set, is the members' `prestroid train` workdir: the
	// bundle's test metrics and parity are computed on its test split.
	Workdir string
	// Python is the interpreter with the trainer package; empty means
	// DefaultPython().
	Python string
	// Bundles are the members, two or more, from one training workdir;
	// with Gate pairs of a plain network then a cost-anchored one (one
	// pair, or several: seeds of each side, averaged before the gate).
	Bundles []string
	// Gate combines a plain and a cost-anchored member by the plan's size
	// instead of averaging: the anchored one's weight is a sigmoid of the
	// ln of the plan's largest row estimate (GateInput "rows") or of
	// 1 + Σ cpuCost ("cost"), centred on the GateQuantile of the training
	// plans' (Workdir required), GateWidth wide. Zero values mean the
	// defaults (DefaultGateInput, DefaultGateQuantile, DefaultGateWidth).
	Gate         bool
	GateQuantile float64
	GateWidth    float64
	GateInput    string
	// Log receives the Python child's output. Nil means os.Stderr.
	Log io.Writer
}

// Ensemble checks the members with the serving side's reader, runs
// trainer.ensemble and reads the result back the same way.
func Ensemble(cfg *EnsembleConfig) error {
	if cfg.Out == "" {
		return errors.New("--out is required")
	}
	if len(cfg.Bundles) < 2 {
		return fmt.Errorf("need two or more bundles, have %d", len(cfg.Bundles))
	}
	if cfg.Gate && (len(cfg.Bundles)%2 != 0 || cfg.Workdir == "") {
		return fmt.Errorf("--gate takes pairs of bundles (plain, cost-anchored, ...) and --workdir, have %d bundles, workdir %q", len(cfg.Bundles), cfg.Workdir)
	}
	for _, b := range cfg.Bundles {
		if _, _, err := LoadBundleEncoder(b); err != nil { // the serving side's reader
			return fmt.Errorf("member %s: %w", b, err)
		}
	}
	python := cfg.Python
	if python == "" {
		python = DefaultPython()
	}
	log := cfg.Log
	if log == nil {
		log = os.Stderr
	}
	args := []string{"-m", "trainer.ensemble", "--out", cfg.Out}
	if cfg.Workdir != "" {
		args = append(args, "--workdir", cfg.Workdir)
	}
	if cfg.Gate {
		q, w := cfg.GateQuantile, cfg.GateWidth
		if q == 0 {
			q = DefaultGateQuantile
		}
		if w == 0 {
			w = DefaultGateWidth
		}
		args = append(args, "--gate", "--gate-quantile", strconv.FormatFloat(q, 'g', -1, 64), "--gate-width", strconv.FormatFloat(w, 'g', -1, 64))
		in := cfg.GateInput
		if in == "" {
			in = DefaultGateInput
		}
		args = append(args, "--gate-input", in)
	}
	if err := RunPython(log, log, python, append(args, cfg.Bundles...)...); err != nil {
		return err
	}
	_, _, err := LoadBundleEncoder(cfg.Out)
	return err
}
