package bundle

import (
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// The text stage's model: an optional part of a bundle (BUNDLE.md, "text").
// It scores a statement's SQL text and session (featurize.EncodeText) into
// quantiles of ln(CPU seconds), without a plan.

// TextFile is the text stage's ONNX model, present when the manifest has a
// text section.
const TextFile = "text.onnx"

// TextFeaturizer names featurize.EncodeText's encoding, TextStatsFeaturizer
// featurize.EncodeTextStats' (the hashed tokens and the statistics of the
// tables the statement names); a bundle trained on another encoding is
// refused (its golden cases would fail anyway).
const (
	TextFeaturizer      = "hashed-tokens-v1"
	TextStatsFeaturizer = "hashed-tokens-tablestats-v2"
)

// maxTextDim bounds the text model's input size.
const maxTextDim = 1 << 16

// TextManifest is the manifest's text section.
type TextManifest struct {
	Model      string    `json:"model"` // always TextFile
	Featurizer string    `json:"featurizer"`
	Dim        int       `json:"dim"`
	Quantiles  []float64 `json:"quantiles"` // increasing, in (0, 1): one output column each
	Input      string    `json:"input"`
	Output     string    `json:"output"`
	// MaxLnRows (TextStatsFeaturizer) is the largest ln(1 + rows) of a
	// table named by a training statement: beyond it the text stage
	// defers to the plan. Zero: no bound.
	MaxLnRows float64 `json:"max_ln_rows,omitempty"`
	// Golden are statements with the model's expected outputs (ln CPU
	// seconds, one per quantile): the loader encodes and scores each.
	Golden []TextGolden `json:"golden"`
	// Targets are the text model's outputs beyond CPU, by estimate.Target
	// label: each one more output of text.onnx with the same quantiles of
	// the ln of the target's unit (ln bytes, ln seconds). Nil: CPU only.
	Targets map[string]*TextTarget `json:"targets,omitempty"`
}

// TextTarget is one entry of the text section's targets.
type TextTarget struct {
	Output string `json:"output"` // shape (B, len(quantiles))
}

// TextGolden is one golden case of the text model.
type TextGolden struct {
	Name    string            `json:"name"`
	SQL     string            `json:"sql"`
	Catalog string            `json:"catalog"`
	Schema  string            `json:"schema"`
	Session map[string]string `json:"session"`
	// Tables are the statistics of the tables the statement names
	// (TextStatsFeaturizer).
	Tables   []featurize.TableStats `json:"tables,omitempty"`
	Expected []float32              `json:"expected"`
	// ExpectedTargets are the expected outputs of each target of the
	// text section's targets (ln of the target's unit, one per quantile).
	ExpectedTargets map[string][]float32 `json:"expected_targets,omitempty"`
}

func (t *TextManifest) validate() error {
	switch {
	case t.Model != TextFile:
		return fmt.Errorf("text.model %q, want %q", t.Model, TextFile)
	case t.Featurizer != TextFeaturizer && t.Featurizer != TextStatsFeaturizer:
		return fmt.Errorf("text.featurizer %q, this server encodes %q and %q", t.Featurizer, TextFeaturizer, TextStatsFeaturizer)
	case t.Featurizer == TextStatsFeaturizer && t.Dim <= featurize.TextStatsDim:
		return fmt.Errorf("text.dim=%d, want more than the %d table-statistics features", t.Dim, featurize.TextStatsDim)
	case t.Dim < 1 || t.Dim > maxTextDim:
		return fmt.Errorf("text.dim=%d, want 1..%d", t.Dim, maxTextDim)
	case t.Input == "" || t.Output == "":
		return errors.New("text.input and text.output must be set")
	case len(t.Quantiles) == 0:
		return errors.New("text.quantiles is empty")
	case len(t.Golden) == 0:
		return errors.New("text.golden is empty")
	}
	for i, q := range t.Quantiles {
		if !(q > 0 && q < 1) || (i > 0 && q <= t.Quantiles[i-1]) {
			return fmt.Errorf("text.quantiles %v: want increasing values in (0, 1)", t.Quantiles)
		}
	}
	for _, g := range t.Golden {
		if len(g.Expected) != len(t.Quantiles) {
			return fmt.Errorf("text.golden %q has %d expected values, want %d", g.Name, len(g.Expected), len(t.Quantiles))
		}
	}
	outs := map[string]string{t.Output: estimate.TargetCPU.String()}
	for _, label := range sortedKeys(t.Targets) {
		tt := t.Targets[label]
		tg, ok := estimate.ParseTarget(label)
		switch {
		case !ok || tg == estimate.TargetCPU:
			return fmt.Errorf("text.targets: %q is not a target beyond CPU, want %q or %q", label, estimate.TargetMemory, estimate.TargetElapsed)
		case tt == nil || tt.Output == "":
			return fmt.Errorf("text.targets.%s.output is empty", label)
		case outs[tt.Output] != "":
			return fmt.Errorf("text.targets.%s.output %q is also the output of %s", label, tt.Output, outs[tt.Output])
		}
		outs[tt.Output] = label
		for _, g := range t.Golden {
			if n := len(g.ExpectedTargets[label]); n != len(t.Quantiles) {
				return fmt.Errorf("text.golden %q has %d expected %s values, want %d", g.Name, n, label, len(t.Quantiles))
			}
		}
	}
	return nil
}

// textModel is the loaded text stage of a Model.
type textModel struct {
	mf      *TextManifest
	sess    Session
	bufs    sync.Pool         // *[]float32 of mf.Dim
	targets []estimate.Target // the outputs after the CPU's, in session order
}

// loadText opens the bundle's text model and runs its golden cases; nil
// without a text section.
func loadText(b *Bundle, rt Runtime) (*textModel, error) {
	tm := b.Manifest.Text
	if tm == nil {
		return nil, nil
	}
	fail := func(err error) error { return &BundleError{Bundle: b.Source, File: TextFile, Err: err} }
	outputs := []string{tm.Output}
	var targets []estimate.Target
	for _, label := range sortedKeys(tm.Targets) {
		tg, _ := estimate.ParseTarget(label)
		targets = append(targets, tg)
		outputs = append(outputs, tm.Targets[label].Output)
	}
	sess, err := rt.NewSession(b.TextModel, []string{tm.Input}, outputs)
	if err != nil {
		return nil, fail(err)
	}
	t := &textModel{mf: tm, sess: sess, targets: targets}
	t.bufs.New = func() any { s := make([]float32, tm.Dim); return &s }
	if err := t.checkIO(); err != nil {
		sess.Close()
		return nil, fail(err)
	}
	for i, g := range tm.Golden {
		got, err := t.run(g.SQL, featurize.TextContext{Catalog: g.Catalog, Schema: g.Schema, Session: g.Session, Tables: g.Tables})
		if err != nil {
			sess.Close()
			return nil, fail(err)
		}
		for o, out := range got {
			what, want := "", g.Expected
			if o > 0 {
				what = targets[o-1].String() + " "
				want = g.ExpectedTargets[targets[o-1].String()]
			}
			for j, w := range want {
				if d := math.Abs(float64(out[j] - w)); !(d <= GoldenTolerance) {
					sess.Close()
					return nil, fail(fmt.Errorf("%squantile %v: %w", what, tm.Quantiles[j], &GoldenError{Case: g.Name, Index: i, Got: out[j], Want: w}))
				}
			}
		}
	}
	return t, nil
}

func (t *textModel) checkIO() error {
	ins, outs := t.sess.Inputs(), t.sess.Outputs()
	if len(ins) != 1 || ins[0].Name != t.mf.Input || ins[0].DType != "float32" || len(ins[0].Shape) != 2 ||
		ins[0].Shape[0] >= 0 || (ins[0].Shape[1] >= 0 && ins[0].Shape[1] != int64(t.mf.Dim)) {
		return fmt.Errorf("text model inputs %+v, want one float32 %q of shape (-1, %d)", ins, t.mf.Input, t.mf.Dim)
	}
	names := []string{t.mf.Output}
	for _, tg := range t.targets {
		names = append(names, t.mf.Targets[tg.String()].Output)
	}
next:
	for _, name := range names {
		for _, o := range outs {
			if o.Name == name {
				if o.DType != "float32" || len(o.Shape) != 2 || (o.Shape[1] >= 0 && o.Shape[1] != int64(len(t.mf.Quantiles))) {
					return fmt.Errorf("text model output %+v, want float32 of shape (-1, %d)", o, len(t.mf.Quantiles))
				}
				continue next
			}
		}
		return fmt.Errorf("text model has no output %q", name)
	}
	return nil
}

// run scores one statement: per output (the CPU's, then t.targets') the
// ln value per quantile.
func (t *textModel) run(sql string, ctx featurize.TextContext) ([][]float32, error) {
	buf := t.bufs.Get().(*[]float32)
	defer t.bufs.Put(buf)
	var x []float32
	if t.mf.Featurizer == TextStatsFeaturizer {
		x = featurize.EncodeTextStats(*buf, sql, ctx)
	} else {
		x = featurize.EncodeText(*buf, sql, ctx)
	}
	outs, err := t.sess.Run([]Tensor{{Shape: []int64{1, int64(t.mf.Dim)}, Float32: x}})
	if err != nil {
		return nil, fmt.Errorf("estimator: text inference: %w", err)
	}
	if len(outs) != 1+len(t.targets) {
		return nil, fmt.Errorf("estimator: text inference: %d outputs, want %d", len(outs), 1+len(t.targets))
	}
	res := make([][]float32, len(outs))
	for i, o := range outs {
		if len(o.Data) != len(t.mf.Quantiles) || len(o.Shape) != 2 || o.Shape[0] != 1 {
			return nil, fmt.Errorf("estimator: text inference: output %d has shape %v, want (1, %d)", i, o.Shape, len(t.mf.Quantiles))
		}
		res[i] = o.Data
	}
	return res, nil
}

// HasText reports whether the bundle has a text model.
func (m *Model) HasText() bool { return m.text != nil }

// TextReadsTables reports whether the text model reads the statistics of
// the tables a statement names (featurize.TextContext.Tables), and the
// largest ln(1 + rows) it was trained on (0: no bound).
func (m *Model) TextReadsTables() (reads bool, maxLnRows float64) {
	if m.text == nil || m.text.mf.Featurizer != TextStatsFeaturizer {
		return false, 0
	}
	return true, m.text.mf.MaxLnRows
}

// TextQuantiles returns the manifest's quantiles and the text model's CPU
// seconds at each for sql in ctx; ok is false when the bundle has no text
// model. The CPU seconds are non-decreasing (the model's outputs are
// monotone; sorted here anyway, so a broken model cannot invert an
// interval).
func (m *Model) TextQuantiles(sql string, ctx featurize.TextContext) (quantiles, seconds []float64, ok bool, err error) {
	p, ok, err := m.TextPredict(sql, ctx)
	if !ok || err != nil {
		return nil, nil, ok, err
	}
	return p.Quantiles, p.Values[estimate.TargetCPU], true, nil
}

// TextPrediction is the text model's answer for one statement: the
// manifest's quantiles and, per target (index estimate.Target), the
// target's value at each (CPU seconds, bytes, seconds), non-decreasing;
// nil for a target the text model does not predict.
type TextPrediction struct {
	Quantiles []float64
	Values    [len(estimate.Targets)][]float64
}

// TextPredict scores sql in ctx with the text model, every target it has
// in one inference; ok is false when the bundle has no text model.
func (m *Model) TextPredict(sql string, ctx featurize.TextContext) (p TextPrediction, ok bool, err error) {
	if m.text == nil {
		return p, false, nil
	}
	outs, err := m.text.run(sql, ctx)
	if err != nil {
		return p, true, err
	}
	p.Quantiles = m.text.mf.Quantiles
	for o, ln := range outs {
		t := estimate.TargetCPU
		if o > 0 {
			t = m.text.targets[o-1]
		}
		v := make([]float64, len(ln))
		for i, x := range ln {
			if math.IsNaN(float64(x)) {
				return TextPrediction{}, true, fmt.Errorf("estimator: text inference: NaN output (%s)", t)
			}
			v[i] = math.Exp(float64(x))
			if i > 0 && v[i] < v[i-1] {
				v[i] = v[i-1]
			}
		}
		p.Values[t] = v
	}
	return p, true, nil
}
