package main

// prestroid eval: metrics of a model bundle and of the baselines on the test
// split (DESIGN §3). Go featurizes the records with the bundle's own
// vocabularies and vectors (the serving path); Python (trainer.eval) runs the
// ONNX model, fits the baselines on the train/validation splits of the same
// records, and writes the JSON and the report.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
)

func init() {
	register("eval", "evaluate a model bundle and the baselines on the test split", runEval)
}

const evalUsage = `usage: prestroid eval --bundle DIR --data RECORDS... [flags]

Featurizes the records' test split with the bundle (vocabularies, token
vectors, N/K/C), predicts with its ONNX model, fits the baselines on the
train/validation splits of the same records and prints, per model: MSE on
the normalized ln target, q-error p50/p90/p95/p99/max, Pearson r (ln CPU
seconds) and over-/under-provisioned CPU shares, overall and per template.
Writes eval.json and report.md with plots into --report.

flags:
`

// loadBundleEncoder reads a bundle with the serving side's reader
// (estimator.ReadBundle: every check but the model's outputs) and builds
// its encoder.
func loadBundleEncoder(dir string) (*featurize.Encoder, *bundle.Manifest, error) {
	b, err := bundle.Read(dir)
	if err != nil {
		return nil, nil, err
	}
	m := &b.Manifest
	enc := &featurize.Encoder{Ops: b.Ops, Tables: b.Tables, Vectors: b.Vectors, Dim: m.Pf,
		Sampler: featurize.SamplerConfig{N: m.N, K: m.K, C: m.C}}
	return enc, m, nil
}

func runEval(args []string) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), evalUsage)
		fs.PrintDefaults()
	}
	var data multiFlag
	fs.Var(&data, "data", "record file or directory (repeatable; more may follow the flags)")
	bundle := fs.String("bundle", "", "model bundle directory (required)")
	split := fs.String("split", "data/split.json", "template-level train/validation/test split")
	workdir := fs.String("workdir", "", "directory for intermediate files (default: REPORT/work)")
	report := fs.String("report", "", "directory for eval.json, report.md and plots (default: BUNDLE.eval)")
	var trainWorks multiFlag
	fs.Var(&trainWorks, "train-workdir", "a `prestroid train` workdir (repeatable): evaluate on exactly the first one's queries (the records may have grown since) and include the other Tree-CNN models' test predictions (predictions_test_*.json)")
	asJSON := fs.Bool("json", false, "print the metrics JSON (one object per model) on stdout")
	python := fs.String("python", "", "Python interpreter with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	baselines := fs.String("baselines", "all", "baselines to run: all, none, or a comma list (trino,logbin,svr,tfidf_gbr,mscn,wcnn)")
	seed := fs.Int("seed", 1, "seed of the learned baselines")
	quick := fs.Bool("quick", false, "train the neural baselines for a few epochs only (smoke tests)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	paths := append([]string(data), fs.Args()...)
	if *bundle == "" {
		fmt.Fprintln(os.Stderr, "prestroid eval: --bundle is required")
		return 2
	}
	if *report == "" {
		*report = strings.TrimRight(*bundle, "/") + ".eval"
	}
	if *workdir == "" {
		*workdir = filepath.Join(*report, "work")
	}
	if *python == "" {
		*python = defaultPython()
	}
	trainWork := ""
	if len(trainWorks) > 0 {
		trainWork = trainWorks[0]
	}
	if err := evalPrepare(*bundle, paths, *split, *workdir, trainWork); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid eval:", err)
		return 1
	}
	pyArgs := []string{"-m", "trainer.eval", "--bundle", *bundle, "--workdir", *workdir,
		"--report", *report, "--baselines", *baselines, "--seed", fmt.Sprint(*seed)}
	if *quick {
		pyArgs = append(pyArgs, "--quick")
	}
	for _, w := range trainWorks {
		pyArgs = append(pyArgs, "--train-workdir", w)
	}
	if err := runPython(*python, pyArgs...); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid eval:", err)
		return 1
	}
	if *asJSON {
		b, err := os.ReadFile(filepath.Join(*report, "eval.json"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "prestroid eval:", err)
			return 1
		}
		os.Stdout.Write(b)
	}
	return 0
}

// evalPrepare writes queries.jsonl (all splits, for the baselines) and the
// test split's tensors encoded with the bundle into workdir.
func evalPrepare(bundle string, paths []string, splitPath, workdir, trainWork string) error {
	enc, m, err := loadBundleEncoder(bundle)
	if err != nil {
		return err
	}
	if m.Kind != "" && m.Kind != "subtree" {
		return fmt.Errorf("bundle kind %q: eval handles sub-tree bundles", m.Kind)
	}
	qs, st, err := loadQueries(paths, splitPath)
	if err != nil {
		return err
	}
	if trainWork != "" {
		// the training run's snapshot: same queries, same hash and counts
		if qs, err = sameQueries(filepath.Join(trainWork, "queries.jsonl"), qs); err != nil {
			return err
		}
		st = &loadStats{}
		if err := readJSON(filepath.Join(trainWork, "meta.json"), st); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(workdir, 0o755); err != nil {
		return err
	}
	if err := writeQueries(filepath.Join(workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(workdir, "meta.json"), st); err != nil {
		return err
	}
	var batch []*featurize.Features
	var targets []float32
	var keys []string
	for _, q := range qs {
		if q.Split != "test" {
			continue
		}
		f, err := enc.Encode(q.root)
		if err != nil {
			return fmt.Errorf("%s: %w", q.Key, err)
		}
		batch = append(batch, f)
		targets = append(targets, float32((q.LnCPU-m.Target.Min)/(m.Target.Max-m.Target.Min)))
		keys = append(keys, q.Key)
	}
	if len(batch) == 0 {
		return errors.New("no test-split queries in the records")
	}
	if err := writeNPZFile(filepath.Join(workdir, "test.npz"), batch,
		featurize.BatchMeta{N: m.N, K: m.K, C: m.C}, targets); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(workdir, "test.keys.txt"), []byte(strings.Join(keys, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"records": st.Records, "usable": st.Usable, "per_split": st.PerSplit})
	fmt.Fprintf(os.Stderr, "eval: %s; test queries encoded with bundle %s\n", b, m.ModelID)
	return nil
}
