// Package training is the training pipeline (docs/design.md §2–§4) as a library:
// Go does every featurization step (the same code as serving); Python (the
// trainer/ package) does Word2Vec, PyTorch training, ONNX export and the
// bundle. `prestroid train` parses its flags into a Config and calls Run.
//
// Steps, each writing files into Config.Workdir and rerunnable alone:
//
//	featurize  records → queries.jsonl (one line per usable query: split,
//	           label, plan summaries for the baselines), corpus.txt (the
//	           training split's predicate token sentences), meta.json
//	w2v        corpus.txt → tokens.vec (python -m trainer.w2v)
//	tensors    records + tokens.vec → ops.json, tables.json, target.json,
//	           {train,val,test}.npz (+ full_{split}_NNN.npz with Full)
//	train      python -m trainer.train: Tree-CNN, ONNX export, parity
//	           check, bundle in Out
//
// and steps that are never run unless named:
//
//	text       queries.jsonl → text_{split}.npz (featurize.EncodeText of
//	           each query's SQL and session), then python -m trainer.text:
//	           the text stage's quantile model, text.onnx and the manifest's
//	           text section in Out (an existing bundle: run it after train)
//	targets    python -m trainer.targets: heads for peak memory and
//	           elapsed time on the frozen trunk of the gated bundle in Out
//	           (extra outputs; the CPU output unchanged), the text stage's
//	           per-target quantiles, the per-target evaluation beside the
//	           baselines in WORKDIR/targets (an existing bundle: run it
//	           after ensemble --gate and text)
//	novelty    queries.jsonl → OUT/families.txt (estimator.FamilyID of
//	           each training statement), then python -m trainer.novelty:
//	           the manifest's novelty section, how much wider the model in
//	           Out errs on the validation templates than on the training
//	           statements (an existing bundle: run it last)
//	cv         python -m trainer.cv: template-level cross-validation of the
//	           configuration over the train and validation queries
//	           (CVFolds, CVSeeds), for model choice without the test split;
//	           WORKDIR/cv_NAME.json, resumable; CVBaseline cross-validates a
//	           baseline on the same folds
//
// Eval and Ensemble orchestrate `prestroid eval` and `prestroid ensemble`
// the same way (Go featurizes with the bundle, Python scores).
package training

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// Steps are the pipeline steps Run runs by default, in order. StepCV runs
// only when named.
var Steps = []string{StepFeaturize, StepW2V, StepTensors, StepTrain}

// Step names.
const (
	StepFeaturize = "featurize"
	StepW2V       = "w2v"
	StepTensors   = "tensors"
	StepTrain     = "train"
	StepCV        = "cv"
	StepText      = "text"
	StepTargets   = "targets"
	StepNovelty   = "novelty"
)

// Config is one training run. DefaultConfig gives the values `prestroid
// train` starts from; the zero value of a field is only meaningful where
// its comment says so.
type Config struct {
	// Data are record files or directories of *.jsonl.gz (collector or
	// feedback log). Required by featurize and tensors.
	Data []string
	// Out is the bundle directory the train step writes. Required by the
	// train step only.
	Out string
	// Workdir holds the intermediate files. Required (DefaultWorkdir
	// derives it from Out).
	Workdir string
	// Split is the template-level train/validation/test split (JSON,
	// collector.Split).
	Split string
	// ScaleSplit, when set, makes the test split one scale instead
	// (ApplyScaleSplit): a scale name ("sf10") or ScaleLargest. The
	// featurize step decides; the later steps follow its queries.jsonl.
	// Empty: the template-level split alone.
	ScaleSplit string
	// DynamicFilters builds the O-T-P trees with a clause per dynamic filter
	// a scan waits for (featurize.TreeOptions.DynamicFilters). The featurize
	// step decides (meta.json's tree_features); the later steps follow it.
	DynamicFilters bool

	// N, K, C are the sub-tree node limit, the sub-trees per query and
	// the convolution depth (docs/design.md §2.4); Pf the predicate vector size
	// (Word2Vec dimension).
	N, K, C, Pf int

	// Full also writes the full-tree tensors and trains the full-tree
	// models (FullLayouts: "padded", "packed" or both, comma-separated);
	// FullOnly trains only those (no bundle; implies Full). FullChunk is
	// the number of queries per full-tree .npz file.
	Full        bool
	FullOnly    bool
	FullLayouts string
	FullChunk   int

	// Seed seeds Word2Vec and PyTorch.
	Seed int
	// Python is the interpreter with the trainer package. Empty means
	// DefaultPython().
	Python string
	// MinCount is Word2Vec's minimum token count (the trainer lowers it
	// for tiny corpora); CBOW picks CBOW instead of skip-gram.
	MinCount int
	CBOW     bool

	// The network and its training (the train and cv steps; trainer/
	// documents each): maximum epochs and early-stopping patience, the
	// device ("auto", "cpu", "cuda"), PyTorch CPU threads, Adam's learning
	// rate, epochs without improvement before halving it (0: constant),
	// dropout, batch size, tree-conv kernels and dense sizes (comma
	// lists), how sub-trees reach the dense layers ("concat" or
	// "sum-max"), the weights' moving-average decay (0: off), a linear
	// path from the plan vector to the output, and leaving out the
	// optimizer-estimate features (the paper's model; TENSORS.md).
	Epochs      int
	Patience    int
	Device      string
	Threads     int
	LR          float64
	LRPlateau   int
	Dropout     float64
	Batch       int
	Kernels     string
	Dense       string
	Pool        string
	EMA         float64
	PlanSkip    bool
	NoEstimates bool
	CostAnchor  bool
	ScaleFree   bool
	AnchorSlope bool

	// CVName names the cv step's result file WORKDIR/cv_NAME.json. Empty
	// means CVBaseline, or "N-K-Pf". CVFolds folds of train+validation
	// templates, CVSeeds comma-separated seeds; CVBaseline, when set,
	// cross-validates that baseline instead of the network.
	CVName     string
	CVFolds    int
	CVSeeds    string
	CVBaseline string

	// TextDim is the text step's hashed feature size (0:
	// featurize.DefaultTextDim); TextHidden its network's first hidden
	// layer (0: the trainer's default).
	TextDim    int
	TextHidden int
	// TableStats is a file of table statistics (TableStatsFile, written
	// by `prestroid table-stats`): with it the text step trains on the
	// v2 encoding (featurize.EncodeTextStats), each statement with the
	// statistics of the tables it names. Empty: the v1 encoding (text
	// alone).
	TableStats string
	// WarmLabels makes the text step prefer warm labels: a cold run
	// (Query.Warmth) of a shape that also ran warm in the data weighs
	// ColdWeight in the loss (0: left out), every other query 1. False
	// (the zero value): every query weighs 1, as before the flag. The
	// step's report gives test and validation metrics for warm, cold and
	// unknown runs apart either way.
	WarmLabels bool
	ColdWeight float64
	// TargetsNoEval makes the targets step only train and attach the
	// heads: no baselines, no scale hold-out (the daily retraining's
	// mode; the evaluation is for the models README).
	TargetsNoEval bool

	// Log receives the steps' one-line summaries and the Python children's
	// output. Nil means os.Stderr.
	Log io.Writer
}

// DefaultConfig is the configuration `prestroid train` starts from (its
// flags' defaults).
func DefaultConfig() Config {
	return Config{
		Split: "data/split.json",
		N:     15, K: 9, C: 3, Pf: 100,
		FullLayouts: "padded,packed", FullChunk: 128,
		Seed: 1, MinCount: 10,
		Epochs: 200, Patience: 25, Device: "auto", Threads: 2,
		LR: 1e-4, Dropout: 0.1, Batch: 64,
		Kernels: "128,128,128", Dense: "32,8", Pool: "concat",
		CVFolds: 5, CVSeeds: "1",
	}
}

// DefaultWorkdir is OUT.work, the workdir when none is given.
func DefaultWorkdir(out string) string { return strings.TrimRight(out, "/") + ".work" }

func (c *Config) log() io.Writer {
	if c.Log == nil {
		return os.Stderr
	}
	return c.Log
}

func (c *Config) python() string {
	if c.Python == "" {
		return DefaultPython()
	}
	return c.Python
}

// StepError names the step that failed.
type StepError struct {
	Step string
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

// Run creates the workdir and runs the named steps in order (empty names
// are skipped). An unknown step or a failing one stops the run with a
// *StepError.
func Run(cfg *Config, steps []string) error {
	if cfg.FullOnly {
		cfg.Full = true
	}
	if err := os.MkdirAll(cfg.Workdir, 0o755); err != nil {
		return err
	}
	for _, step := range steps {
		var err error
		switch strings.TrimSpace(step) {
		case StepFeaturize:
			err = Featurize(cfg)
		case StepW2V:
			err = W2V(cfg)
		case StepTensors:
			err = Tensors(cfg)
		case StepTrain:
			err = Train(cfg)
		case StepCV:
			err = CV(cfg)
		case StepText:
			err = Text(cfg)
		case StepTargets:
			err = Targets(cfg)
		case StepNovelty:
			err = Novelty(cfg)
		case "":
			continue
		default:
			err = fmt.Errorf("unknown step %q (have %s,cv,text,targets,novelty)", step, strings.Join(Steps, ","))
		}
		if err != nil {
			return &StepError{Step: step, Err: err}
		}
	}
	return nil
}
