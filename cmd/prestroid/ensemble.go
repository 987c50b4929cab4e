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
       prestroid ensemble --gate --out DIR --workdir W PLAIN ANCHORED [PLAIN ANCHORED]...

Writes one bundle whose model is the mean of the member bundles' outputs
(one ONNX graph). The members must come from one "prestroid train" workdir
(same N, K, C, Pf, vocabularies, token vectors and target) and differ only
in training (--seed, flags). With --workdir, the bundle's test metrics are
computed on that workdir's test split. Costs M times one member's inference.

With --gate the two members are a plain network and a cost-anchored one
(prestroid train --cost-anchor --scale-free) of one workdir, and the output
moves from the plain network's to the anchored one's as the ln of the plan's
largest row estimate (--gate-input rows; or cost: ln(1 + sum cpuCost))
passes the --gate-quantile of the training plans' (a sigmoid --gate-width
wide): the plain network inside the training range, the anchor for plans
that read more than nearly any plan in training (models/README.md, "The
gated network"). Several pairs (e.g. seeds of each) gate the mean of the
plain members against the mean of the anchored ones. The first member's
text stage is carried over.

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
	gate := fs.Bool("gate", false, "pairs of members, plain then cost-anchored: the anchored ones' weight grows with the plan's size")
	quantile := fs.Float64("gate-quantile", training.DefaultGateQuantile, "with --gate: the gate's centre, this quantile of the training plans' gate input")
	width := fs.Float64("gate-width", training.DefaultGateWidth, "with --gate: the gate's width in ln units")
	input := fs.String("gate-input", training.DefaultGateInput, "with --gate: what the gate reads, ln of the plan's largest row estimate (rows) or ln(1 + sum cpuCost) (cost)")
	python := fs.String("python", "", "Python interpreter with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg := training.EnsembleConfig{Out: *out, Workdir: *workdir, Python: *python, Bundles: fs.Args(),
		Gate: *gate, GateQuantile: *quantile, GateWidth: *width, GateInput: *input}
	if err := training.Ensemble(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid ensemble:", err)
		return 1
	}
	return 0
}
