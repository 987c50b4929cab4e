package main

// prestroid ensemble: one bundle averaging sub-tree bundles trained on the
// same tensors (trainer/trainer/ensemble.py does the work).

import (
	"errors"
	"flag"
	"fmt"
	"os"
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
	if err := ensemble(*out, *workdir, *python, fs.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid ensemble:", err)
		return 1
	}
	return 0
}

func ensemble(out, workdir, python string, bundles []string) error {
	if out == "" {
		return errors.New("--out is required")
	}
	if len(bundles) < 2 {
		return fmt.Errorf("need two or more bundles, have %d", len(bundles))
	}
	for _, b := range bundles {
		if _, _, err := loadBundleEncoder(b); err != nil { // the serving side's reader
			return fmt.Errorf("member %s: %w", b, err)
		}
	}
	if python == "" {
		python = defaultPython()
	}
	args := []string{"-m", "trainer.ensemble", "--out", out}
	if workdir != "" {
		args = append(args, "--workdir", workdir)
	}
	if err := runPython(python, append(args, bundles...)...); err != nil {
		return err
	}
	_, _, err := loadBundleEncoder(out)
	return err
}
