package training

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// W2V is the w2v step: python -m trainer.w2v turns corpus.txt into
// tokens.vec (Pf dimensions, window 5, MinCount, Seed, CBOW).
func W2V(cfg *Config) error {
	args := []string{"-m", "trainer.w2v",
		"--corpus", filepath.Join(cfg.Workdir, "corpus.txt"),
		"--out", filepath.Join(cfg.Workdir, "tokens.vec"),
		"--size", strconv.Itoa(cfg.Pf), "--window", "5",
		"--min-count", strconv.Itoa(cfg.MinCount), "--seed", strconv.Itoa(cfg.Seed)}
	if cfg.CBOW {
		args = append(args, "--cbow")
	}
	return cfg.runPython(args...)
}

// Train is the train step: python -m trainer.train trains the Tree-CNN on
// the workdir's tensors, exports ONNX, checks parity and writes the bundle
// into Out (with Full/FullOnly, the full-tree models too).
func Train(cfg *Config) error {
	if cfg.Out == "" {
		return errors.New("the train step needs --out")
	}
	args := append([]string{"-m", "trainer.train", "--workdir", cfg.Workdir, "--out", cfg.Out,
		"--seed", strconv.Itoa(cfg.Seed)}, networkArgs(cfg)...)
	if cfg.FullOnly {
		args = append(args, "--full-only", "--full-layouts", cfg.FullLayouts)
	} else if cfg.Full {
		args = append(args, "--full", "--full-layouts", cfg.FullLayouts)
	}
	return cfg.runPython(args...)
}

// Targets is the targets step: python -m trainer.targets adds the peak
// memory and elapsed time outputs to the gated bundle in Out (in place;
// its CPU output is checked unchanged), then fits each target's blend
// with the text stage (--blend), and writes the per-target evaluation to
// WORKDIR/targets. The record paths of the workdir's
// meta.json are read relative to the working directory, as featurize
// wrote them.
func Targets(cfg *Config) error {
	if cfg.Out == "" {
		return errors.New("the targets step needs --out (the gated bundle it extends)")
	}
	common := []string{"-m", "trainer.targets", "--workdir", cfg.Workdir, "--bundle", cfg.Out,
		"--results", filepath.Join(cfg.Workdir, "targets"), "--cache", filepath.Join(cfg.Workdir, "targets"),
		"--threads", strconv.Itoa(max(1, cfg.Threads))}
	if cfg.TargetsNoEval {
		common = append(common, "--baselines", "", "--skip-scale")
	}
	// The heads, then the weight of the text stage's number in each
	// target's served value (fitted on validation), as models/default is
	// built.
	if err := cfg.runPython(append(slices.Clone(common), "--out", cfg.Out)...); err != nil {
		return err
	}
	return cfg.runPython(append(common, "--blend", cfg.Out)...)
}

// CV is the cv step: python -m trainer.cv cross-validates the configuration
// (or CVBaseline) over the train and validation templates.
func CV(cfg *Config) error {
	name := cfg.CVName
	switch {
	case name != "":
	case cfg.CVBaseline != "":
		name = cfg.CVBaseline
	default:
		name = fmt.Sprintf("%d-%d-%d", cfg.N, cfg.K, cfg.Pf)
	}
	if strings.ContainsAny(name, "/\\") || strings.HasPrefix(name, ".") {
		return fmt.Errorf("--cv-name %q: want a plain file-name part", name)
	}
	args := append([]string{"-m", "trainer.cv", "--workdir", cfg.Workdir, "--name", name,
		"--folds", strconv.Itoa(cfg.CVFolds), "--seeds", cfg.CVSeeds}, networkArgs(cfg)...)
	if cfg.CVBaseline != "" {
		args = append(args, "--baseline", cfg.CVBaseline)
	}
	return cfg.runPython(args...)
}

// networkArgs are the trainer flags of the network and its training, the
// same for the train and cv steps.
func networkArgs(cfg *Config) []string {
	args := []string{"--epochs", strconv.Itoa(cfg.Epochs), "--patience", strconv.Itoa(cfg.Patience),
		"--device", cfg.Device, "--threads", strconv.Itoa(cfg.Threads),
		"--lr", strconv.FormatFloat(cfg.LR, 'g', -1, 64), "--batch", strconv.Itoa(cfg.Batch),
		"--kernels", cfg.Kernels, "--dense", cfg.Dense, "--pool", cfg.Pool,
		"--ema", strconv.FormatFloat(cfg.EMA, 'g', -1, 64),
		"--lr-plateau", strconv.Itoa(cfg.LRPlateau), "--dropout", strconv.FormatFloat(cfg.Dropout, 'g', -1, 64)}
	if cfg.NoEstimates {
		args = append(args, "--no-estimates")
	}
	if cfg.PlanSkip {
		args = append(args, "--plan-skip")
	}
	if cfg.CostAnchor {
		args = append(args, "--cost-anchor")
	}
	if cfg.ScaleFree {
		args = append(args, "--scale-free")
	}
	if cfg.AnchorSlope {
		args = append(args, "--anchor-slope")
	}
	return args
}

// DefaultPython is $PRESTROID_PYTHON, else the project venv
// (.venv/bin/python in the working directory), else python3.
func DefaultPython() string {
	if p := os.Getenv("PRESTROID_PYTHON"); p != "" {
		return p
	}
	if _, err := os.Stat(".venv/bin/python"); err == nil {
		abs, _ := filepath.Abs(".venv/bin/python")
		return abs
	}
	return "python3"
}

// runPython runs the configured Python with the output going to cfg.Log.
func (cfg *Config) runPython(args ...string) error {
	return RunPython(cfg.log(), cfg.log(), cfg.python(), args...)
}

// RunPython runs `python args...` with the child's stdout and stderr going
// to the given writers. When the trainer sources are found beside the
// working directory (a checkout) or in $PRESTROID_TRAINER_DIR, they go on
// PYTHONPATH, so an uninstalled checkout works too.
func RunPython(stdout, stderr io.Writer, python string, args ...string) error {
	cmd := exec.Command(python, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = os.Environ()
	if dir := trainerSourceDir(); dir != "" {
		pp := dir
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		cmd.Env = append(cmd.Env, "PYTHONPATH="+pp)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", python, strings.Join(args[:min(2, len(args))], " "), err)
	}
	return nil
}

// trainerSourceDir finds trainer/trainer/__init__.py from the working
// directory or its parents and returns the directory holding the package.
func trainerSourceDir() string {
	if d := os.Getenv("PRESTROID_TRAINER_DIR"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for i := 0; i < 4; i++ {
		if _, err := os.Stat(filepath.Join(dir, "trainer", "trainer", "__init__.py")); err == nil {
			return filepath.Join(dir, "trainer")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return ""
}
