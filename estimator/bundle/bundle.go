package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/internal/dialect"
)

// FormatVersion is the newest model bundle format this package reads
// (BUNDLE.md): 1, or 2, whose manifest may name tree_features.
const FormatVersion = 2

// Bundle file names (BUNDLE.md).
const (
	ManifestFile = "manifest.json"
	ModelFile    = "model.onnx"
	OpsFile      = "ops.json"
	TablesFile   = "tables.json"
	TokensFile   = "tokens.vec"
	GoldenFile   = "golden.npz"
)

// BundleFiles lists every file of a bundle.
var Files = []string{ManifestFile, ModelFile, OpsFile, TablesFile, TokensFile, GoldenFile}

// ModelInputs are the inputs every model takes, in BUNDLE.md order.
var ModelInputs = []string{"op", "table", "left", "right", "vote", "pred"}

// EstimateInputs are the optimizer-estimate inputs (tensor format 2): a
// model takes both or neither (BUNDLE.md).
var EstimateInputs = []string{"est", "plan"}

// Size limits for bundle files; a larger file is refused before it is read.
const (
	maxModelBytes = 1 << 30
	maxFileBytes  = 256 << 20
)

// GoldenTolerance is the largest difference between a golden case's
// expected prediction and the served one that a bundle may show.
const GoldenTolerance = 1e-4

// ErrBundle is wrapped by every refusal of a model bundle (*BundleError).
var ErrBundle = errors.New("estimator: bad model bundle")

// BundleError names the bundle, the file and why it was refused.
type BundleError struct {
	Bundle string // directory (or "embedded:...")
	File   string // one of BundleFiles, or "" for the bundle as a whole
	Err    error
}

func (e *BundleError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("estimator: model bundle %s: %v", e.Bundle, e.Err)
	}
	return fmt.Sprintf("estimator: model bundle %s: %s: %v", e.Bundle, e.File, e.Err)
}

// Unwrap lets errors.Is match ErrBundle and the cause.
func (e *BundleError) Unwrap() []error { return []error{ErrBundle, e.Err} }

// GoldenError is a golden case whose prediction differs from the expected
// one by more than GoldenTolerance (wrapped in a *BundleError).
type GoldenError struct {
	Case      string
	Index     int
	Got, Want float32
}

func (e *GoldenError) Error() string {
	return fmt.Sprintf("golden case %d %q: predicted %.7f, expected %.7f (|diff| %.2g > %g)",
		e.Index, e.Case, e.Got, e.Want, math.Abs(float64(e.Got-e.Want)), GoldenTolerance)
}

// Manifest is manifest.json (BUNDLE.md). Unknown keys are ignored.
type Manifest struct {
	FormatVersion       int    `json:"format_version"`
	ModelID             string `json:"model_id"`
	Created             string `json:"created"`
	Kind                string `json:"kind"` // "subtree" or "full"
	N                   int    `json:"N"`
	K                   int    `json:"K"`
	C                   int    `json:"C"`
	Pf                  int    `json:"Pf"`
	Slots               int    `json:"slots"`
	TensorFormatVersion int    `json:"tensor_format_version"`
	// TreeFeatures are the O-T-P tree's optional readings the model was
	// trained with (featurize.ParseTreeFeatures; format_version 2): the
	// server builds its trees with them.
	TreeFeatures       []string  `json:"tree_features,omitempty"`
	Target             Target    `json:"target"`
	GlobalPredVector   []float32 `json:"global_pred_vector"`
	TrainingDataSHA256 string    `json:"training_data_sha256"`
	Training           struct {
		Untrained bool   `json:"untrained"`
		Records   int    `json:"records"`
		Note      string `json:"note"`
		// Engines are the engines of the training queries ("trino",
		// "presto"); absent: Trino's only (every bundle before the
		// field).
		Engines []string `json:"engines,omitempty"`
	} `json:"training"`
	Metrics json.RawMessage `json:"metrics"`
	Inputs  []string        `json:"inputs"`
	Output  string          `json:"output"`
	// Text is the optional text stage (text.go); nil without one.
	Text *TextManifest `json:"text,omitempty"`
	// Targets are the optional outputs beyond CPU, by estimate.Target
	// label ("peak_memory", "elapsed"; targets.go); nil: the CPU only.
	Targets map[string]*TargetOutput `json:"targets,omitempty"`
	// Novelty is the optional novelty section (novelty.go): the families
	// the model was trained on and how much wider its errors are off
	// them; nil without one.
	Novelty *Novelty `json:"novelty,omitempty"`
}

// Target is the normalization of the training target.
type Target struct {
	Transform string  `json:"transform"` // a key of targetRanges
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
}

// targetRanges: the target transforms a bundle may name and the range its
// normalized output y is clipped to. "ln_cpu_seconds_minmax" is a sigmoid
// model's [0, 1]; "_open" is a model whose output is not bounded (the cost
// anchor: it extrapolates to plans larger than its training set), kept
// within half the training range beyond either end.
var targetRanges = map[string][2]float64{
	"ln_cpu_seconds_minmax":      {0, 1},
	"ln_cpu_seconds_minmax_open": {-0.5, 1.5},
}

// CPUSeconds de-normalizes a model output: exp(min + y·(max − min)), y
// clipped to its transform's range (NaN to the bottom).
func (t Target) CPUSeconds(y float32) float64 {
	r, ok := targetRanges[t.Transform]
	if !ok {
		r = targetRanges["ln_cpu_seconds_minmax"]
	}
	v := float64(y)
	if math.IsNaN(v) || v < r[0] {
		v = r[0]
	}
	if v > r[1] {
		v = r[1]
	}
	return math.Exp(t.Min + v*(t.Max-t.Min))
}

// Tree is the O-T-P tree's readings the manifest names (tree_features;
// a read bundle's are valid: validate checked them).
func (m *Manifest) Tree() featurize.TreeOptions {
	o, _ := featurize.ParseTreeFeatures(m.TreeFeatures)
	return o
}

// Untrained reports whether the manifest marks the model as untrained (a
// test fixture with random weights).
func (m *Manifest) Untrained() bool { return m.Training.Untrained }

// TrainedOn reports whether the model saw plans of engine in training
// (Unknown counts as Trino).
func (m *Manifest) TrainedOn(engine dialect.Engine) bool {
	if engine == dialect.Unknown {
		engine = dialect.Trino
	}
	if len(m.Training.Engines) == 0 {
		return engine == dialect.Trino
	}
	return slices.Contains(m.Training.Engines, string(engine))
}

// Bundle is a model bundle read from disk and checked for consistency
// (everything but the model's outputs: see LoadModel).
type Bundle struct {
	Source   string // where it came from, for messages
	Manifest Manifest
	Ops      *featurize.Vocab
	Tables   *featurize.Vocab
	Vectors  *featurize.MapVectors // Global = manifest.global_pred_vector
	Model    []byte                // model.onnx
	Golden   *Golden
	// TextModel is text.onnx, read when the manifest has a text section.
	TextModel []byte
}

// Golden are the golden cases of golden.npz: model inputs in the
// TENSORS.md layout with the expected (normalized) predictions.
type Golden struct {
	Names                  []string
	B, K, S, Pf            int
	Op, Table, Left, Right []int32
	Vote, Pred             []float32
	Est, Plan              []float32 // nil unless the model takes EstimateInputs
	Expected               []float32
	// Targets are the expected normalized outputs of the manifest's
	// targets beyond CPU, by label (each TargetOutput.Golden's array).
	Targets map[string][]float32
}

// ReadBundle reads and checks the bundle in directory dir.
func Read(dir string) (*Bundle, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, &BundleError{Bundle: dir, Err: err}
	}
	if !st.IsDir() {
		return nil, &BundleError{Bundle: dir, Err: errors.New("not a directory")}
	}
	return ReadFS(os.DirFS(dir), dir)
}

// ReadBundleFS reads and checks a bundle held at the root of fsys (an
// embedded one, for instance); source names it in errors.
func ReadFS(fsys fs.FS, source string) (*Bundle, error) {
	b := &Bundle{Source: source}
	fail := func(file string, format string, args ...any) error {
		return &BundleError{Bundle: source, File: file, Err: fmt.Errorf(format, args...)}
	}
	read := func(name string, limit int64) ([]byte, error) {
		f, err := fsys.Open(name)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fail(name, "missing")
			}
			return nil, fail(name, "%v", err)
		}
		defer f.Close()
		data, err := io.ReadAll(io.LimitReader(f, limit+1))
		if err != nil {
			return nil, fail(name, "%v", err)
		}
		if int64(len(data)) > limit {
			return nil, fail(name, "larger than %d bytes", limit)
		}
		if len(data) == 0 {
			return nil, fail(name, "empty")
		}
		return data, nil
	}

	// manifest.json
	data, err := read(ManifestFile, maxFileBytes)
	if err != nil {
		return nil, err
	}
	m := &b.Manifest
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fail(ManifestFile, "malformed JSON: %v", err)
	}
	if err := m.validate(); err != nil {
		return nil, fail(ManifestFile, "%v", err)
	}

	// Vocabularies.
	for _, v := range []struct {
		file string
		dst  **featurize.Vocab
	}{{OpsFile, &b.Ops}, {TablesFile, &b.Tables}} {
		data, err := read(v.file, maxFileBytes)
		if err != nil {
			return nil, err
		}
		voc := featurize.NewVocab()
		if err := json.Unmarshal(data, voc); err != nil {
			return nil, fail(v.file, "%v", err)
		}
		*v.dst = voc
	}

	// tokens.vec
	data, err = read(TokensFile, maxFileBytes)
	if err != nil {
		return nil, err
	}
	var count, dim int
	header, _, _ := bytes.Cut(data, []byte("\n"))
	if _, err := fmt.Sscan(string(header), &count, &dim); err != nil {
		return nil, fail(TokensFile, "bad header line %q, want \"<count> <Pf>\"", header)
	}
	vecs, err := featurize.LoadWord2VecText(bytes.NewReader(data))
	if err != nil {
		return nil, fail(TokensFile, "%v", err)
	}
	if vecs.Dim != m.Pf {
		return nil, fail(TokensFile, "vectors have %d dimensions, manifest Pf=%d", vecs.Dim, m.Pf)
	}
	if len(vecs.Tokens) != count {
		return nil, fail(TokensFile, "header says %d tokens, file holds %d (truncated?)", count, len(vecs.Tokens))
	}
	for tok, v := range vecs.Tokens {
		for _, x := range v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return nil, fail(TokensFile, "token %q has a non-finite value", tok)
			}
		}
	}
	vecs.Global = m.GlobalPredVector
	b.Vectors = vecs

	// model.onnx: read here, checked when a session opens it (LoadModel).
	if b.Model, err = read(ModelFile, maxModelBytes); err != nil {
		return nil, err
	}

	// golden.npz
	data, err = read(GoldenFile, maxFileBytes)
	if err != nil {
		return nil, err
	}
	if b.Golden, err = readGolden(data, m); err != nil {
		return nil, fail(GoldenFile, "%v", err)
	}

	// text.onnx, when the manifest has a text section.
	if m.Text != nil {
		if b.TextModel, err = read(TextFile, maxModelBytes); err != nil {
			return nil, err
		}
	}

	// families.txt, when the manifest has a novelty section.
	if m.Novelty != nil {
		if data, err = read(NoveltyFile, maxFileBytes); err != nil {
			return nil, err
		}
		if err := m.Novelty.readFamilies(data); err != nil {
			return nil, fail(NoveltyFile, "%v", err)
		}
	}
	return b, nil
}

// UsesEstimates reports whether the model takes the optimizer-estimate
// inputs (any of EstimateInputs listed; validate requires all of them).
func (m *Manifest) UsesEstimates() bool {
	for _, in := range EstimateInputs {
		if slices.Contains(m.Inputs, in) {
			return true
		}
	}
	return false
}

// validate checks the manifest on its own.
func (m *Manifest) validate() error {
	if m.FormatVersion < 1 || m.FormatVersion > FormatVersion {
		return fmt.Errorf("format_version %d, this server reads 1 to %d", m.FormatVersion, FormatVersion)
	}
	if len(m.TreeFeatures) > 0 && m.FormatVersion < 2 {
		return fmt.Errorf("tree_features %q need format_version 2, have %d", m.TreeFeatures, m.FormatVersion)
	}
	if _, err := featurize.ParseTreeFeatures(m.TreeFeatures); err != nil {
		return err
	}
	if m.TensorFormatVersion < 1 || m.TensorFormatVersion > featurize.TensorFormatVersion {
		return fmt.Errorf("tensor_format_version %d, this server reads 1 to %d", m.TensorFormatVersion, featurize.TensorFormatVersion)
	}
	if strings.TrimSpace(m.ModelID) == "" {
		return errors.New("model_id is empty")
	}
	switch m.Kind {
	case "subtree":
		if err := (featurize.SamplerConfig{N: m.N, K: m.K, C: m.C}).Validate(); err != nil {
			return fmt.Errorf("N=%d K=%d C=%d: %v", m.N, m.K, m.C, err)
		}
		if m.K < 1 {
			return fmt.Errorf("K=%d, want ≥ 1", m.K)
		}
		if m.Slots != m.N+1 {
			return fmt.Errorf("slots=%d, want N+1=%d", m.Slots, m.N+1)
		}
	case "full":
		if m.K != 1 || m.Slots < 2 {
			return fmt.Errorf("full-tree bundle with K=%d slots=%d, want K=1 and slots ≥ 2", m.K, m.Slots)
		}
	default:
		return fmt.Errorf("kind %q, want \"subtree\" or \"full\"", m.Kind)
	}
	if m.Pf < 1 || m.Pf > 4096 {
		return fmt.Errorf("Pf=%d, want 1..4096", m.Pf)
	}
	if _, ok := targetRanges[m.Target.Transform]; !ok {
		return fmt.Errorf("target.transform %q, want \"ln_cpu_seconds_minmax\" or \"ln_cpu_seconds_minmax_open\"", m.Target.Transform)
	}
	if !(m.Target.Max > m.Target.Min) || math.IsInf(m.Target.Min, 0) || math.IsInf(m.Target.Max, 0) || m.Target.Max-m.Target.Min > 100 {
		return fmt.Errorf("target min=%v max=%v, want finite min < max", m.Target.Min, m.Target.Max)
	}
	if len(m.GlobalPredVector) != m.Pf {
		return fmt.Errorf("global_pred_vector has %d values, Pf=%d", len(m.GlobalPredVector), m.Pf)
	}
	want := ModelInputs
	if m.UsesEstimates() {
		if m.TensorFormatVersion < 2 {
			return fmt.Errorf("inputs %q: %q need tensor_format_version ≥ 2", m.Inputs, EstimateInputs)
		}
		want = append(want[:len(want):len(want)], EstimateInputs...)
	}
	if len(m.Inputs) != len(want) {
		return fmt.Errorf("inputs %q, want %q (optionally with %q)", m.Inputs, ModelInputs, EstimateInputs)
	}
	for _, w := range want {
		if !slices.Contains(m.Inputs, w) {
			return fmt.Errorf("inputs %q lack %q", m.Inputs, w)
		}
	}
	if m.Output == "" {
		return errors.New("output is empty")
	}
	if err := m.validateTargets(); err != nil {
		return err
	}
	if m.Novelty != nil {
		if err := m.Novelty.validate(); err != nil {
			return err
		}
	}
	if m.Text != nil {
		return m.Text.validate()
	}
	return nil
}

// readGolden reads golden.npz and checks its shapes against the manifest.
func readGolden(data []byte, m *Manifest) (*Golden, error) {
	arrs, err := npy.ReadNPZ(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	g := &Golden{K: m.K, S: m.Slots, Pf: m.Pf}
	exp, err := npzArray[float32](arrs, "expected")
	if err != nil {
		return nil, err
	}
	g.Expected = exp.data
	if len(exp.shape) != 1 || len(g.Expected) == 0 {
		return nil, fmt.Errorf("expected: shape %v, want (G,) with G ≥ 1", exp.shape)
	}
	g.B = len(g.Expected)
	want := []int{g.B, g.K, g.S}
	ints := []struct {
		name string
		dst  *[]int32
	}{{"op", &g.Op}, {"table", &g.Table}, {"left", &g.Left}, {"right", &g.Right}}
	for _, in := range ints {
		a, err := npzArray[int32](arrs, in.name)
		if err != nil {
			return nil, err
		}
		if !sameShape(a.shape, want) {
			return nil, fmt.Errorf("%s: shape %v, want %v", in.name, a.shape, want)
		}
		*in.dst = a.data
	}
	vote, err := npzArray[float32](arrs, "vote")
	if err != nil {
		return nil, err
	}
	if !sameShape(vote.shape, want) {
		return nil, fmt.Errorf("vote: shape %v, want %v", vote.shape, want)
	}
	g.Vote = vote.data
	pred, err := npzArray[float32](arrs, "pred")
	if err != nil {
		return nil, err
	}
	if wp := append(want[:3:3], g.Pf); !sameShape(pred.shape, wp) {
		return nil, fmt.Errorf("pred: shape %v, want %v", pred.shape, wp)
	}
	g.Pred = pred.data
	if m.UsesEstimates() {
		for _, in := range []struct {
			name  string
			shape []int
			dst   *[]float32
		}{{"est", append(want[:3:3], featurize.EstDim), &g.Est}, {"plan", []int{g.B, featurize.PlanDim}, &g.Plan}} {
			a, err := npzArray[float32](arrs, in.name)
			if err != nil {
				return nil, err
			}
			if !sameShape(a.shape, in.shape) {
				return nil, fmt.Errorf("%s: shape %v, want %v", in.name, a.shape, in.shape)
			}
			*in.dst = a.data
		}
	}
	for _, label := range sortedKeys(m.Targets) {
		name := m.Targets[label].Golden
		a, err := npzArray[float32](arrs, name)
		if err != nil {
			return nil, fmt.Errorf("targets.%s: %w", label, err)
		}
		if !sameShape(a.shape, []int{g.B}) {
			return nil, fmt.Errorf("%s (targets.%s): shape %v, want (%d,)", name, label, a.shape, g.B)
		}
		if g.Targets == nil {
			g.Targets = map[string][]float32{}
		}
		g.Targets[label] = a.data
	}
	if names, err := npzArray[uint8](arrs, "names"); err == nil {
		g.Names = strings.Split(string(names.data), "|")
		if len(g.Names) != g.B {
			return nil, fmt.Errorf("names: %d names for %d cases", len(g.Names), g.B)
		}
	} else {
		for i := 0; i < g.B; i++ {
			g.Names = append(g.Names, "case-"+strconv.Itoa(i))
		}
	}
	return g, nil
}

type npzData[T any] struct {
	shape []int
	data  []T
}

func npzArray[T int32 | float32 | uint8](arrs map[string]*npy.Array, name string) (npzData[T], error) {
	a, ok := arrs[name]
	if !ok {
		return npzData[T]{}, fmt.Errorf("array %q missing", name)
	}
	d, ok := a.Data.([]T)
	if !ok {
		var zero T
		return npzData[T]{}, fmt.Errorf("array %q has dtype %s, want %T", name, a.Descr, zero)
	}
	return npzData[T]{shape: a.Shape, data: d}, nil
}

func sameShape(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
