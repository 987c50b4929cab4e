package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/training"
)

// TrainOptions configure Train; `prestroid bench train` documents the
// defaults of its flags.
type TrainOptions struct {
	// Data are the record files or directories; Split the template-level
	// split (its training split is benchmarked).
	Data  []string
	Split string
	// Workdir holds the features and results (bench.json).
	Workdir string
	// Pf is the predicate vector size.
	Pf int
	// Batches (comma list) are the batch sizes; Epochs the timed epochs
	// per setting, after a warm-up epoch.
	Batches string
	Epochs  int
	// MinNodes keeps only queries whose O-T-P tree has at least this many
	// nodes (the large-plan part); 0 keeps all.
	MinNodes int
	// Kernels and Dense are the network's layer sizes (comma lists);
	// Device "cpu" or "cuda".
	Kernels, Dense, Device string
	// Python is the interpreter with the trainer package; empty means
	// training.DefaultPython().
	Python string
	// Reuse reuses the features already in Workdir.
	Reuse bool
	// Log receives the featurization's summaries and Python's stderr. Nil
	// means os.Stderr.
	Log io.Writer
}

// trainConfigs are the sub-tree settings compared: Sub(15-9-Pf), whose
// workdir also holds the full-tree chunks, and Sub(32-11-Pf).
var trainConfigs = []struct{ n, k int }{{15, 9}, {32, 11}}

// Train is the paper's Fig 6 (training efficiency of sub-trees against
// padded and packed full trees). Go featurizes the records twice
// (Sub(15-9-Pf) with the full-tree chunks, Sub(32-11-Pf)) with one set of
// Word2Vec vectors; trainer.bench trains each model for a few epochs per
// batch size and prints (to w) bytes per batch, epoch time and the ratios.
func Train(w io.Writer, o TrainOptions) error {
	if o.Python == "" {
		o.Python = training.DefaultPython()
	}
	log := o.Log
	if log == nil {
		log = os.Stderr
	}
	subDirs := make([]string, len(trainConfigs))
	for i, c := range trainConfigs {
		subDirs[i] = filepath.Join(o.Workdir, fmt.Sprintf("n%dk%d", c.n, c.k))
	}
	if !o.Reuse {
		if err := trainFeatures(o, subDirs, log); err != nil {
			return err
		}
	}
	pyArgs := []string{"-m", "trainer.bench", "--full", subDirs[0], "--batches", o.Batches,
		"--epochs", strconv.Itoa(o.Epochs), "--min-nodes", strconv.Itoa(o.MinNodes),
		"--kernels", o.Kernels, "--dense", o.Dense, "--device", o.Device,
		"--out", filepath.Join(o.Workdir, "bench.json")}
	for _, d := range subDirs {
		pyArgs = append(pyArgs, "--sub", d)
	}
	if err := training.RunPython(w, log, o.Python, pyArgs...); err != nil {
		return fmt.Errorf("%w (%s)", err, strings.Join(pyArgs, " "))
	}
	return nil
}

// trainFeatures runs featurize and w2v once in o.Workdir and the tensors
// step once per setting in subDirs, with the same tokens.vec.
func trainFeatures(o TrainOptions, subDirs []string, log io.Writer) error {
	base := training.Config{Data: o.Data, Workdir: o.Workdir, Split: o.Split,
		N: 15, K: 9, C: 3, Pf: o.Pf, Seed: 1, Python: o.Python, MinCount: 10, FullChunk: 128, Log: log}
	if err := os.MkdirAll(o.Workdir, 0o755); err != nil {
		return err
	}
	if err := training.Featurize(&base); err != nil {
		return err
	}
	if err := training.W2V(&base); err != nil {
		return err
	}
	vec, err := os.ReadFile(filepath.Join(o.Workdir, "tokens.vec"))
	if err != nil {
		return err
	}
	for i, c := range trainConfigs {
		cfg := base
		cfg.Workdir, cfg.N, cfg.K, cfg.Full = subDirs[i], c.n, c.k, i == 0
		if err := os.MkdirAll(cfg.Workdir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.Workdir, "tokens.vec"), vec, 0o644); err != nil {
			return err
		}
		if err := training.Tensors(&cfg); err != nil {
			return err
		}
	}
	return nil
}
