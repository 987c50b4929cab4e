package main

// prestroid bench train: the paper's Fig 6 (training efficiency of sub-trees
// against padded and packed full trees). Go featurizes the records twice
// (Sub(15-9-Pf) with the full-tree chunks, Sub(32-11-Pf)) with one set of
// Word2Vec vectors; trainer.bench trains each model for a few epochs per
// batch size and prints bytes per batch, epoch time and the ratios.

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func init() {
	registerBench("train", "training efficiency: sub-trees vs padded/packed full trees (paper Fig 6)", benchTrain)
}

func benchTrain(args []string) int {
	fs := flag.NewFlagSet("bench train", flag.ContinueOnError)
	var data multiFlag
	fs.Var(&data, "data", "record file or directory (repeatable; more may follow the flags)")
	workdir := fs.String("workdir", "bench-train.work", "directory for features and results")
	split := fs.String("split", "data/split.json", "template-level split (the training split is benchmarked)")
	pf := fs.Int("pf", 100, "predicate vector size Pf")
	batches := fs.String("batches", "32,64,256", "batch sizes")
	epochs := fs.Int("epochs", 2, "timed epochs per setting (after a warm-up epoch)")
	minNodes := fs.Int("min-nodes", 0, "only queries whose O-T-P tree has at least this many nodes (the large-plan part)")
	kernels := fs.String("kernels", "128,128,128", "tree-conv kernels")
	dense := fs.String("dense", "32,8", "dense layers")
	device := fs.String("device", "cpu", "cpu or cuda")
	python := fs.String("python", "", "Python with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	reuse := fs.Bool("reuse", false, "reuse the features already in --workdir")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *python == "" {
		*python = defaultPython()
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "prestroid bench train:", err)
		return 1
	}
	configs := []struct{ n, k int }{{15, 9}, {32, 11}}
	subDirs := make([]string, len(configs))
	for i, c := range configs {
		subDirs[i] = filepath.Join(*workdir, fmt.Sprintf("n%dk%d", c.n, c.k))
	}
	if !*reuse {
		base := trainFlags{data: append([]string(data), fs.Args()...), workdir: *workdir, split: *split,
			n: 15, k: 9, c: 3, pf: *pf, seed: 1, python: *python, minCount: 10, fullChunk: 128}
		if err := os.MkdirAll(*workdir, 0o755); err != nil {
			return fail(err)
		}
		if err := stepFeaturize(&base); err != nil {
			return fail(err)
		}
		if err := stepW2V(&base); err != nil {
			return fail(err)
		}
		vec, err := os.ReadFile(filepath.Join(*workdir, "tokens.vec"))
		if err != nil {
			return fail(err)
		}
		for i, c := range configs {
			tf := base
			tf.workdir, tf.n, tf.k, tf.full = subDirs[i], c.n, c.k, i == 0
			if err := os.MkdirAll(tf.workdir, 0o755); err != nil {
				return fail(err)
			}
			if err := os.WriteFile(filepath.Join(tf.workdir, "tokens.vec"), vec, 0o644); err != nil {
				return fail(err)
			}
			if err := stepTensors(&tf); err != nil {
				return fail(err)
			}
		}
	}
	pyArgs := []string{"-m", "trainer.bench", "--full", subDirs[0], "--batches", *batches,
		"--epochs", strconv.Itoa(*epochs), "--min-nodes", strconv.Itoa(*minNodes),
		"--kernels", *kernels, "--dense", *dense, "--device", *device,
		"--out", filepath.Join(*workdir, "bench.json")}
	for _, d := range subDirs {
		pyArgs = append(pyArgs, "--sub", d)
	}
	if err := runPythonTo(os.Stdout, *python, pyArgs...); err != nil {
		return fail(fmt.Errorf("%w (%s)", err, strings.Join(pyArgs, " ")))
	}
	return 0
}
