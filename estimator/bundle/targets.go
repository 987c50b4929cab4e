package bundle

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/prestroid/prestroid/estimate"
)

// Targets beyond CPU (BUNDLE.md, "targets"): a bundle may predict a
// statement's peak memory and elapsed time from the same plan features,
// each as one more output of model.onnx with its own normalization and
// spread. A bundle without a targets section predicts the CPU only; its
// Predictions leave the other targets unknown.

// TargetOutput is one entry of the manifest's targets section: where the
// model gives the target and how its output is de-normalized.
type TargetOutput struct {
	// Output is the model output (shape (B, 1) or (B,)), normalized:
	// ln(value) = Min + y·(Max − Min), y clipped to the transform's range.
	Output    string  `json:"output"`
	Transform string  `json:"transform"` // a key of targetTransforms, for the target's unit
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	// Sigma is the log standard deviation of the value around the
	// prediction (the model's residual spread on its validation split):
	// the served estimate.Quantity's Sigma.
	Sigma float64 `json:"sigma"`
	// Golden names the golden.npz array (G,) of the expected normalized
	// outputs on the golden cases; the loader checks them as it checks
	// the CPU's "expected".
	Golden string `json:"golden"`
	// TextBlend, when present, is how the served number combines this
	// output with the text stage's median of the same target (the
	// manifest's text.targets): nil serves the model's number alone.
	TextBlend *TextBlend `json:"text_blend,omitempty"`
}

// TextBlend is a target's served combination of the model's number m and
// the text stage's t: exp((1 − Weight)·ln m + Weight·ln t), with Sigma
// the spread of that blend (both fitted on the validation templates by
// trainer.targets --blend).
type TextBlend struct {
	Weight float64 `json:"weight"`
	Sigma  float64 `json:"sigma"`
}

// TextBlend is target t's text blend: nil when the manifest has none (or
// no such target).
func (m *Manifest) TextBlend(t estimate.Target) *TextBlend {
	if m == nil {
		return nil
	}
	if o := m.Targets[t.String()]; o != nil {
		return o.TextBlend
	}
	return nil
}

// targetTransforms are the transforms a target beyond CPU may name, with
// the unit of the target whose ln they normalize and the range of the
// normalized output (open: half the training range beyond either end, as
// ln_cpu_seconds_minmax_open).
var targetTransforms = map[string]struct {
	unit   string
	lo, hi float64
}{
	"ln_bytes_minmax_open":   {"bytes", -0.5, 1.5},
	"ln_seconds_minmax_open": {"seconds", -0.5, 1.5},
}

// maxTargetSigma bounds a target's sigma: a spread of e^10 is no
// prediction.
const maxTargetSigma = 10

// Value de-normalizes an output of the target: exp(min + y·(max − min)),
// y clipped to the transform's range (NaN to the bottom).
func (t *TargetOutput) Value(y float32) float64 {
	r := targetTransforms[t.Transform]
	v := float64(y)
	if math.IsNaN(v) || v < r.lo {
		v = r.lo
	}
	if v > r.hi {
		v = r.hi
	}
	return math.Exp(t.Min + v*(t.Max-t.Min))
}

// validateTargets checks the targets section on its own (and against the
// CPU output's name).
func (m *Manifest) validateTargets() error {
	outs := map[string]string{m.Output: estimate.TargetCPU.String()}
	for _, label := range sortedKeys(m.Targets) {
		t := m.Targets[label]
		tg, ok := estimate.ParseTarget(label)
		switch {
		case !ok || tg == estimate.TargetCPU:
			return fmt.Errorf("targets: %q is not a target beyond CPU, want %q or %q", label, estimate.TargetMemory, estimate.TargetElapsed)
		case t == nil:
			return fmt.Errorf("targets.%s is null", label)
		case t.Output == "":
			return fmt.Errorf("targets.%s.output is empty", label)
		case outs[t.Output] != "":
			return fmt.Errorf("targets.%s.output %q is also the output of %s", label, t.Output, outs[t.Output])
		}
		outs[t.Output] = label
		tr, ok := targetTransforms[t.Transform]
		if !ok || tr.unit != tg.Unit() {
			var want []string
			for name, x := range targetTransforms {
				if x.unit == tg.Unit() {
					want = append(want, name)
				}
			}
			return fmt.Errorf("targets.%s.transform %q, want one of %q (ln %s)", label, t.Transform, want, tg.Unit())
		}
		if !(t.Max > t.Min) || math.IsInf(t.Min, 0) || math.IsInf(t.Max, 0) || t.Max-t.Min > 100 {
			return fmt.Errorf("targets.%s: min=%v max=%v, want finite min < max", label, t.Min, t.Max)
		}
		if !(t.Sigma > 0 && t.Sigma <= maxTargetSigma) {
			return fmt.Errorf("targets.%s.sigma %v, want in (0, %d]", label, t.Sigma, maxTargetSigma)
		}
		if t.Golden == "" {
			return fmt.Errorf("targets.%s.golden is empty: the loader checks every output on the golden cases", label)
		}
		if b := t.TextBlend; b != nil {
			if !(b.Weight >= 0 && b.Weight <= 1) {
				return fmt.Errorf("targets.%s.text_blend.weight %v, want in [0, 1]", label, b.Weight)
			}
			if !(b.Sigma > 0 && b.Sigma <= maxTargetSigma) {
				return fmt.Errorf("targets.%s.text_blend.sigma %v, want in (0, %d]", label, b.Sigma, maxTargetSigma)
			}
			if m.Text == nil || m.Text.Targets[label] == nil {
				return fmt.Errorf("targets.%s.text_blend: the text stage has no %s output (text.targets)", label, label)
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// modelTarget is a target beyond CPU of a loaded Model.
type modelTarget struct {
	t    estimate.Target
	spec *TargetOutput
	out  int // index among the session's outputs
}

// resolveTargets fills m.targets and the session's output list in
// manifest order (the CPU first, then the targets by label).
func resolveTargets(mf *Manifest) (outputs []string, targets []modelTarget) {
	outputs = []string{mf.Output}
	for _, label := range sortedKeys(mf.Targets) {
		t, _ := estimate.ParseTarget(label)
		targets = append(targets, modelTarget{t: t, spec: mf.Targets[label], out: len(outputs)})
		outputs = append(outputs, mf.Targets[label].Output)
	}
	return outputs, targets
}

// Prediction is one query's normalized model outputs, per target (index
// estimate.Target); Known[t] is false where the bundle has no output for
// t (the CPU is always known).
type Prediction struct {
	Y     [len(estimate.Targets)]float32
	Known [len(estimate.Targets)]bool
}

// Targets are the targets the model predicts: the CPU and, in
// estimate.Target order, those of its manifest's targets section.
func (m *Model) Targets() []estimate.Target {
	ts := []estimate.Target{estimate.TargetCPU}
	for _, mt := range m.targets {
		ts = append(ts, mt.t)
	}
	slices.Sort(ts)
	return ts
}

// Quantity de-normalizes the prediction of target t beyond CPU into the
// target's unit with the manifest's sigma; the zero Quantity when p does
// not know t (an old single-target bundle). For the CPU use CPUSeconds:
// its spread is the cascade's (ModelSigma).
func (m *Model) Quantity(t estimate.Target, p Prediction) estimate.Quantity {
	if t == estimate.TargetCPU || int(t) >= len(p.Known) || !p.Known[t] {
		return estimate.Quantity{}
	}
	for _, mt := range m.targets {
		if mt.t == t {
			return estimate.Quantity{Median: mt.spec.Value(p.Y[t]), Sigma: mt.spec.Sigma}
		}
	}
	return estimate.Quantity{}
}

// checkTargetIO requires every target output among the model's outputs,
// float32.
func (m *Model) checkTargetIO() error {
	for _, mt := range m.targets {
		found := false
		for _, out := range m.sess.Outputs() {
			if out.Name == mt.spec.Output {
				found = true
				if out.DType != "float32" {
					return fmt.Errorf("model output %q (%s) is %s, want float32", out.Name, mt.t, out.DType)
				}
			}
		}
		if !found {
			return fmt.Errorf("model has no output %q (targets.%s)", mt.spec.Output, mt.t)
		}
	}
	return nil
}
