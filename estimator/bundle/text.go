package bundle

import (
	"errors"
	"fmt"
	"math"
	"sync"

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
	return nil
}

// textModel is the loaded text stage of a Model.
type textModel struct {
	mf   *TextManifest
	sess Session
	bufs sync.Pool // *[]float32 of mf.Dim
}

// loadText opens the bundle's text model and runs its golden cases; nil
// without a text section.
func loadText(b *Bundle, rt Runtime) (*textModel, error) {
	tm := b.Manifest.Text
	if tm == nil {
		return nil, nil
	}
	fail := func(err error) error { return &BundleError{Bundle: b.Source, File: TextFile, Err: err} }
	sess, err := rt.NewSession(b.TextModel, []string{tm.Input}, tm.Output)
	if err != nil {
		return nil, fail(err)
	}
	t := &textModel{mf: tm, sess: sess}
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
		for j, want := range g.Expected {
			if d := math.Abs(float64(got[j] - want)); !(d <= GoldenTolerance) {
				sess.Close()
				return nil, fail(fmt.Errorf("quantile %v: %w", tm.Quantiles[j], &GoldenError{Case: g.Name, Index: i, Got: got[j], Want: want}))
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
	for _, o := range outs {
		if o.Name == t.mf.Output {
			if o.DType != "float32" || len(o.Shape) != 2 || (o.Shape[1] >= 0 && o.Shape[1] != int64(len(t.mf.Quantiles))) {
				return fmt.Errorf("text model output %+v, want float32 of shape (-1, %d)", o, len(t.mf.Quantiles))
			}
			return nil
		}
	}
	return fmt.Errorf("text model has no output %q", t.mf.Output)
}

// run scores one statement: ln CPU seconds per quantile.
func (t *textModel) run(sql string, ctx featurize.TextContext) ([]float32, error) {
	buf := t.bufs.Get().(*[]float32)
	defer t.bufs.Put(buf)
	var x []float32
	if t.mf.Featurizer == TextStatsFeaturizer {
		x = featurize.EncodeTextStats(*buf, sql, ctx)
	} else {
		x = featurize.EncodeText(*buf, sql, ctx)
	}
	out, shape, err := t.sess.Run([]Tensor{{Shape: []int64{1, int64(t.mf.Dim)}, Float32: x}})
	if err != nil {
		return nil, fmt.Errorf("estimator: text inference: %w", err)
	}
	if len(out) != len(t.mf.Quantiles) || len(shape) != 2 || shape[0] != 1 {
		return nil, fmt.Errorf("estimator: text inference: output shape %v, want (1, %d)", shape, len(t.mf.Quantiles))
	}
	return out, nil
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
	if m.text == nil {
		return nil, nil, false, nil
	}
	ln, err := m.text.run(sql, ctx)
	if err != nil {
		return nil, nil, true, err
	}
	seconds = make([]float64, len(ln))
	for i, v := range ln {
		if math.IsNaN(float64(v)) {
			return nil, nil, true, errors.New("estimator: text inference: NaN output")
		}
		seconds[i] = math.Exp(float64(v))
		if i > 0 && seconds[i] < seconds[i-1] {
			seconds[i] = seconds[i-1]
		}
	}
	return m.text.mf.Quantiles, seconds, true, nil
}
