package main

// prestroid eval: flag parsing for training.Eval (metrics of a model bundle
// and of the baselines on the test split, docs/design.md §3).

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/prestroid/prestroid/training"
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
	scaleSplit := fs.String("scale-split", "", "hold out one scale as the test split: a scale (sf10) or \"largest\" (without --train-workdir; with it the training run's split holds)")
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
		*report = training.DefaultReport(*bundle)
	}
	if *workdir == "" {
		*workdir = filepath.Join(*report, "work")
	}
	if *python == "" {
		*python = training.DefaultPython()
	}
	cfg := training.EvalConfig{Bundle: *bundle, Data: paths, Split: *split, ScaleSplit: *scaleSplit, Workdir: *workdir, Report: *report,
		TrainWorkdirs: trainWorks, Python: *python, Baselines: *baselines, Seed: *seed, Quick: *quick}
	if err := training.Eval(&cfg); err != nil {
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
