package main

// prestroid ensemble: flag parsing for training.Ensemble (one bundle
// averaging sub-tree bundles trained on the same tensors).

import (
	"flag"
	"fmt"
	"os"

	"github.com/prestroid/prestroid/training"
)

func init() {
	register("ensemble", "average model bundles trained on one featurization (seeds) into one bundle", runEnsemble)
}

const ensembleUsage = `usage: prestroid ensemble --out DIR [--workdir W] BUNDLE BUNDLE...

Writes one bundle whose model is the mean of the member bundles' outputs
(one ONNX graph). The members must come from one "prestroid train" workdir
(same N, K, C, Pf, vocabularies, token vectors and target) and differ only
in training (--seed, flags). With --workdir, the bundle's test metrics are
computed on that workdir's test split. Costs M times one member's inference.

flags:
`

func runEnsemble(args []string) int {
	fs := flag.NewFlagSet("ensemble", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), ensembleUsage)
		fs.PrintDefaults()
	}
	out := fs.String("out", "", "bundle directory to write (replaced; required)")
	workdir := fs.String("workdir", "", "the members' prestroid train workdir: test metrics and parity on its test split")
	python := fs.String("python", "", "Python interpreter with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := training.EnsembleConfig{Out: *out, Workdir: *workdir, Python: *python, Bundles: fs.Args()}
	if err := training.Ensemble(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid ensemble:", err)
		return 1
	}
	return 0
}
