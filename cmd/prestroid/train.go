package main

// prestroid train: flag parsing for the training pipeline (package
// training: the steps, their files and the Python orchestration).

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/prestroid/prestroid/training"
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

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

// trainFlagSet defines train's flags over c, starting from
// training.DefaultConfig; data and steps receive --data and --steps.
func trainFlagSet(c *training.Config, data *multiFlag, steps *string) *flag.FlagSet {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), trainUsage)
		fs.PrintDefaults()
	}
	d := training.DefaultConfig()
	fs.Var(data, "data", "record file or directory (repeatable; more may follow the flags)")
	fs.StringVar(&c.Out, "out", d.Out, "bundle directory to write (required for the train step)")
	fs.StringVar(&c.Workdir, "workdir", d.Workdir, "directory for intermediate files (default: OUT.work)")
	fs.StringVar(&c.Split, "split", d.Split, "template-level train/validation/test split")
	fs.BoolVar(&c.DynamicFilters, "dynamic-filters", d.DynamicFilters, "featurize step: a clause [column DYNAMIC] in a scan's predicate per dynamic filter it waits for (the bundle's tree_features; the later steps follow the workdir)")
	fs.StringVar(&c.ScaleSplit, "scale-split", d.ScaleSplit, "hold out one scale as the test split instead: a scale (sf10) or \"largest\"; the other scales keep the template split's train/validation parts, test templates train")
	fs.IntVar(&c.N, "n", d.N, "sub-tree node limit N")
	fs.IntVar(&c.K, "k", d.K, "sub-trees per query K")
	fs.IntVar(&c.C, "c", d.C, "convolution depth C (tree-conv layers)")
	fs.IntVar(&c.Pf, "pf", d.Pf, "predicate vector size Pf (Word2Vec dimension)")
	fs.BoolVar(&c.Full, "full", d.Full, "also train the full-tree models (padded and packed); their metrics go to the workdir")
	fs.StringVar(&c.FullLayouts, "full-layouts", d.FullLayouts, "which full-tree models --full trains: padded (the paper's, 0-padded to the longest tree), packed, or both; the two compute the same function, only their cost differs")
	fs.BoolVar(&c.FullOnly, "full-only", d.FullOnly, "train only the full-tree models (implies --full; no bundle; keeps the workdir's sub-tree results)")
	fs.IntVar(&c.Epochs, "epochs", d.Epochs, "maximum epochs (early stopping on validation)")
	fs.IntVar(&c.Patience, "patience", d.Patience, "early-stopping patience in epochs")
	fs.StringVar(&c.Device, "device", d.Device, "auto (CUDA when available), cpu or cuda")
	fs.IntVar(&c.Seed, "seed", d.Seed, "random seed (Word2Vec and PyTorch)")
	fs.StringVar(&c.Python, "python", d.Python, "Python interpreter with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	fs.IntVar(&c.MinCount, "min-count", d.MinCount, "Word2Vec min token count (lowered automatically for tiny corpora)")
	fs.BoolVar(&c.CBOW, "cbow", d.CBOW, "Word2Vec CBOW instead of skip-gram")
	fs.BoolVar(&c.NoEstimates, "no-estimates", d.NoEstimates, "leave out the optimizer-estimate features (the paper's model; TENSORS.md)")
	fs.Float64Var(&c.LR, "lr", d.LR, "Adam learning rate")
	fs.IntVar(&c.LRPlateau, "lr-plateau", d.LRPlateau, "halve the learning rate after this many epochs without validation improvement (0: constant rate)")
	fs.Float64Var(&c.Dropout, "dropout", d.Dropout, "dropout in the tree convolutions and dense layers")
	fs.BoolVar(&c.PlanSkip, "plan-skip", d.PlanSkip, "add a linear path from the plan vector (the optimizer's plan-wide estimates) straight to the output")
	fs.BoolVar(&c.CostAnchor, "cost-anchor", d.CostAnchor, "predict ln CPU = logaddexp(U, R + ln(1 + Σ cpuCost)): a fixed cost and a rate from the network, the size from the optimizer's cost, so a plan ten times larger than any in training is predicted ten times the CPU (replaces --plan-skip)")
	fs.BoolVar(&c.ScaleFree, "scale-free", d.ScaleFree, "with --cost-anchor: the network reads only ratios of the optimizer's estimates (rows to the plan's largest, bytes per row, cost to the plan's total), so that the database's size reaches the output through the anchor alone")
	fs.BoolVar(&c.AnchorSlope, "anchor-slope", d.AnchorSlope, "with --cost-anchor: the network also gives each plan its own slope in ln cost (0.25 to 1.5; else 1)")
	fs.StringVar(&c.Pool, "pool", d.Pool, "how the K sub-trees reach the dense layers: concat (the paper's: one block per sub-tree position) or sum-max (their sum and maximum: order-free)")
	fs.Float64Var(&c.EMA, "ema", d.EMA, "validate and keep an exponential moving average of the weights, this decay per step (e.g. 0.995; 0: off)")
	fs.IntVar(&c.Batch, "batch", d.Batch, "batch size")
	fs.StringVar(&c.Kernels, "kernels", d.Kernels, "tree-conv kernels per layer (C values)")
	fs.StringVar(&c.Dense, "dense", d.Dense, "dense layer sizes")
	fs.StringVar(steps, "steps", strings.Join(training.Steps, ","), "steps to run, comma-separated: "+strings.Join(training.Steps, ",")+" (and cv, text, targets and novelty, only when named)")
	fs.BoolVar(&c.TargetsNoEval, "targets-no-eval", d.TargetsNoEval, "the targets step only trains and attaches the peak memory and elapsed heads: no baselines, no scale hold-out")
	fs.IntVar(&c.TextDim, "text-dim", d.TextDim, "the text step's hashed feature size (0: the featurizer's default)")
	fs.IntVar(&c.TextHidden, "text-hidden", d.TextHidden, "the text step's first hidden layer size (0: the trainer's default)")
	fs.StringVar(&c.TableStats, "table-stats", d.TableStats, "table statistics file (prestroid table-stats): the text step then reads the sizes of the tables a statement names (the v2 text encoding)")
	fs.BoolVar(&c.WarmLabels, "warm-labels", d.WarmLabels, "the text step weighs a cold run of a shape that also ran warm in the data (the collector's warmth flag) --cold-weight in its loss")
	fs.Float64Var(&c.ColdWeight, "cold-weight", d.ColdWeight, "with --warm-labels: the weight of such a cold run (0: left out)")
	fs.IntVar(&c.FullChunk, "full-chunk", d.FullChunk, "queries per full-tree .npz file")
	fs.IntVar(&c.Threads, "threads", d.Threads, "CPU threads for PyTorch (train and cv steps)")
	fs.StringVar(&c.CVName, "cv-name", d.CVName, "the cv step's name for this configuration: WORKDIR/cv_NAME.json (default N-K-Pf)")
	fs.IntVar(&c.CVFolds, "cv-folds", d.CVFolds, "the cv step's folds of train+validation templates")
	fs.StringVar(&c.CVBaseline, "cv-baseline", d.CVBaseline, "the cv step cross-validates this baseline (trino, tfidf_gbr, logbin, svr, mscn, wcnn, trino_max) on the same folds instead of the network")
	fs.StringVar(&c.CVSeeds, "cv-seeds", d.CVSeeds, "the cv step's seeds, comma-separated (together they also score their ensemble)")
	return fs
}

func runTrain(args []string) int {
	var cfg training.Config
	var data multiFlag
	var steps string
	fs := trainFlagSet(&cfg, &data, &steps)
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	cfg.Data = append([]string(data), fs.Args()...)
	cfg.Full = cfg.Full || cfg.FullOnly
	if cfg.Workdir == "" {
		if cfg.Out == "" {
			fmt.Fprintln(os.Stderr, "prestroid train: need --out or --workdir")
			return 2
		}
		cfg.Workdir = training.DefaultWorkdir(cfg.Out)
	}
	if cfg.Python == "" {
		cfg.Python = training.DefaultPython()
	}
	if err := training.Run(&cfg, strings.Split(steps, ",")); err != nil {
		var se *training.StepError
		if !errors.As(err, &se) {
			fmt.Fprintln(os.Stderr, "prestroid train:", err)
			return 1
		}
		fmt.Fprintf(os.Stderr, "prestroid train: %s: %v\n", se.Step, se.Err)
		return 1
	}
	return 0
}
