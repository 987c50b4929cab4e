// Package trainer_test runs the training pipeline end to end on a few dozen
// committed records: prestroid train (Go featurizer, Word2Vec, PyTorch,
// ONNX export, bundle) then prestroid eval, and checks the bundle against
// estimator/BUNDLE.md with the serving side's reader.
//
// It needs the Python training stack: set PRESTROID_PYTHON to a Python with
// the trainer package (make trainer-venv; `make test` sets it). Skipped
// otherwise. PRESTROID_BIN names a built prestroid binary (else it is built).
package trainer_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/npy"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/training"
)

const repo = "../.."

func python(t *testing.T) string {
	t.Helper()
	py := os.Getenv("PRESTROID_PYTHON")
	if py == "" {
		t.Skip("PRESTROID_PYTHON not set (make trainer-venv; the path of its python)")
	}
	out, err := exec.Command(py, "-c", "import torch, gensim, onnxruntime, sklearn").CombinedOutput()
	if err != nil {
		t.Fatalf("PRESTROID_PYTHON=%s lacks the trainer stack (make trainer-venv installs it): %v\n%s", py, err, out)
	}
	return py
}

func binary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("PRESTROID_BIN"); b != "" {
		if abs, err := filepath.Abs(b); err == nil {
			return abs
		}
		return b
	}
	bin := filepath.Join(t.TempDir(), "prestroid")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/prestroid")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// smallRecords writes up to perSplit[part] finished records of each split
// from the committed dataset into one file.
func smallRecords(t *testing.T, path string, perSplit map[string]int) []*collector.Record {
	t.Helper()
	var split collector.Split
	b, err := os.ReadFile(filepath.Join(repo, "data/split.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &split); err != nil {
		t.Fatal(err)
	}
	recs, err := collector.ReadAll(filepath.Join(repo, "data/records/tpc-seed1.jsonl.gz"))
	if err != nil && len(recs) == 0 {
		t.Fatal(err)
	}
	w, err := collector.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var kept []*collector.Record
	for _, r := range recs {
		if r.Status != collector.StatusFinished || r.Stats == nil || r.Stats.CPUMillis <= 0 || r.Workload == nil {
			continue
		}
		part := split.ByTemplate[r.Workload.Template]
		if perSplit[part] == 0 {
			continue
		}
		perSplit[part]--
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, r)
	}
	return kept
}

func run(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, args...)
	cmd.Dir = repo
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = append(os.Environ(), "PRESTROID_PYTHON="+os.Getenv("PRESTROID_PYTHON"))
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("prestroid %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	t.Logf("prestroid %s (%.1fs)\n%s", args[0], time.Since(start).Seconds(), stderr.String())
	return stdout.Bytes()
}

// setup returns the trainer's Python, the prestroid binary, a temporary
// directory and a records file of that many committed records per split.
func setup(t *testing.T, perSplit map[string]int) (py, bin, dir, recPath string, recs []*collector.Record) {
	t.Helper()
	py, bin, dir = python(t), binary(t), t.TempDir()
	recPath = filepath.Join(dir, "records.jsonl.gz")
	if recs = smallRecords(t, recPath, perSplit); len(recs) < 20 {
		t.Skipf("only %d usable committed records", len(recs))
	}
	return py, bin, dir, recPath, recs
}

func TestTinyTrainingProducesAValidBundle(t *testing.T) {
	py, bin, dir, recPath, recs := setup(t, map[string]int{"train": 30, "validation": 6, "test": 6})
	bundleDir := filepath.Join(dir, "bundle")
	work := filepath.Join(dir, "work")
	run(t, bin, "train", "--data", recPath, "--out", bundleDir, "--workdir", work, "--python", py,
		"--pf", "8", "--epochs", "2", "--kernels", "16,16,16", "--dense", "8,4", "--full")

	t.Run("the bundle passes the serving side's checks", func(t *testing.T) {
		b, err := bundle.Read(bundleDir)
		if err != nil {
			t.Fatal(err)
		}
		m := b.Manifest
		if m.Kind != "subtree" || m.N != 15 || m.K != 9 || m.C != 3 || m.Pf != 8 || m.Slots != 16 {
			t.Errorf("manifest: kind %q N %d K %d C %d Pf %d slots %d", m.Kind, m.N, m.K, m.C, m.Pf, m.Slots)
		}
		if m.Training.Records != len(recs) {
			t.Errorf("training.records = %d, want %d", m.Training.Records, len(recs))
		}
		if !(m.Target.Min < m.Target.Max) {
			t.Errorf("target %+v", m.Target)
		}
		if !m.UsesEstimates() || m.TensorFormatVersion != featurize.TensorFormatVersion {
			t.Errorf("manifest inputs %q, tensor format %d: want the estimate inputs, format %d",
				m.Inputs, m.TensorFormatVersion, featurize.TensorFormatVersion)
		}
		g := b.Golden
		if g.B < 1 || g.B > 8 || len(g.Names) != g.B || len(g.Expected) != g.B {
			t.Fatalf("golden: %d cases, %d names, %d expected", g.B, len(g.Names), len(g.Expected))
		}
		for _, y := range g.Expected {
			if !(y > 0 && y < 1) {
				t.Errorf("golden expected %v outside (0, 1)", y)
			}
		}
	})

	t.Run("golden tensors equal the serving encoder's output for the named queries", func(t *testing.T) {
		b, err := bundle.Read(bundleDir)
		if err != nil {
			t.Fatal(err)
		}
		enc := &featurize.Encoder{Ops: b.Ops, Tables: b.Tables, Vectors: b.Vectors, Dim: b.Manifest.Pf,
			Sampler: featurize.SamplerConfig{N: b.Manifest.N, K: b.Manifest.K, C: b.Manifest.C}}
		byKey := map[string]*collector.Record{}
		for _, r := range recs {
			byKey[r.Key] = r
		}
		g := b.Golden
		per := g.K * g.S
		for i, name := range g.Names {
			r := byKey[name]
			if r == nil {
				t.Fatalf("golden case %q is not one of the records", name)
			}
			f, err := enc.Featurize(r.Plan.JSON)
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j < per; j++ {
				o := i*per + j
				if f.Op[j] != g.Op[o] || f.Table[j] != g.Table[o] || f.Left[j] != g.Left[o] ||
					f.Right[j] != g.Right[o] || f.Vote[j] != g.Vote[o] {
					t.Fatalf("case %s slot %d differs from the encoder", name, j)
				}
			}
			for j := 0; j < per*g.Pf; j++ {
				if math.Abs(float64(f.Pred[j]-g.Pred[i*per*g.Pf+j])) > 1e-6 {
					t.Fatalf("case %s pred[%d]: encoder %v, golden %v", name, j, f.Pred[j], g.Pred[i*per*g.Pf+j])
				}
			}
			for j := 0; j < per*featurize.EstDim; j++ {
				if f.Est[j] != g.Est[i*per*featurize.EstDim+j] {
					t.Fatalf("case %s est[%d]: encoder %v, golden %v", name, j, f.Est[j], g.Est[i*per*featurize.EstDim+j])
				}
			}
			for j, v := range f.Plan {
				if v != g.Plan[i*featurize.PlanDim+j] {
					t.Fatalf("case %s plan[%d]: encoder %v, golden %v", name, j, v, g.Plan[i*featurize.PlanDim+j])
				}
			}
		}
	})

	t.Run("the cv step predicts every train and validation query out of fold, never a test one", func(t *testing.T) {
		run(t, bin, "train", "--workdir", work, "--python", py, "--steps", "cv", "--cv-name", "tiny",
			"--cv-folds", "3", "--cv-seeds", "1", "--epochs", "1", "--kernels", "16,16,16", "--dense", "8,4")
		raw, err := os.ReadFile(filepath.Join(work, "cv_tiny.json"))
		if err != nil {
			t.Fatal(err)
		}
		var res struct {
			Keys          []string   `json:"keys"`
			FoldOf        []int      `json:"fold_of"`
			FoldTemplates [][]string `json:"fold_templates"`
			Runs          map[string]map[string]struct {
				Pred    []float64 `json:"pred"`
				HeldOut int       `json:"held_out"`
			} `json:"runs"`
			Summary struct {
				Ensemble struct {
					MSE float64 `json:"mse"`
				} `json:"ensemble"`
			} `json:"summary"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, part := range []string{"train", "val"} {
			b, err := os.ReadFile(filepath.Join(work, part+".keys.txt"))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, strings.Fields(string(b))...)
		}
		test, err := os.ReadFile(filepath.Join(work, "test.keys.txt"))
		if err != nil {
			t.Fatal(err)
		}
		isTest := map[string]bool{}
		for _, k := range strings.Fields(string(test)) {
			isTest[k] = true
		}
		if strings.Join(res.Keys, ",") != strings.Join(want, ",") {
			t.Errorf("cv pooled %d queries, want the %d train and validation ones", len(res.Keys), len(want))
		}
		for _, k := range res.Keys {
			if isTest[k] {
				t.Errorf("test query %s in the cross-validation", k)
			}
		}
		predicted := 0
		for fold, r := range res.Runs["1"] {
			f, _ := strconv.Atoi(fold)
			n := 0
			for _, x := range res.FoldOf {
				if x == f {
					n++
				}
			}
			if len(r.Pred) != n || r.HeldOut != n || len(res.FoldTemplates[f]) == 0 {
				t.Errorf("fold %s: %d predictions, %d held out, %d templates; want %d queries", fold, len(r.Pred),
					r.HeldOut, len(res.FoldTemplates[f]), n)
			}
			predicted += len(r.Pred)
		}
		if len(res.Runs["1"]) != 3 || predicted != len(want) || !(res.Summary.Ensemble.MSE > 0) {
			t.Errorf("%d folds, %d of %d queries predicted, ensemble MSE %v", len(res.Runs["1"]), predicted,
				len(want), res.Summary.Ensemble.MSE)
		}

		// a baseline on the same folds
		run(t, bin, "train", "--workdir", work, "--python", py, "--steps", "cv", "--cv-baseline", "trino",
			"--cv-folds", "3")
		raw, err = os.ReadFile(filepath.Join(work, "cv_trino.json"))
		if err != nil {
			t.Fatal(err)
		}
		var base struct {
			Keys   []string       `json:"keys"`
			FoldOf []int          `json:"fold_of"`
			Params map[string]any `json:"params"`
			Runs   map[string]any `json:"runs"`
		}
		if err := json.Unmarshal(raw, &base); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(base.Keys, base.FoldOf) != fmt.Sprint(res.Keys, res.FoldOf) || base.Params["baseline"] != "trino" ||
			len(base.Runs) != 1 {
			t.Errorf("baseline cv: params %v, %d seeds; folds equal the network's: %v", base.Params, len(base.Runs),
				fmt.Sprint(base.FoldOf) == fmt.Sprint(res.FoldOf))
		}
	})

	t.Run("the novelty step names the training families and fits the widening off them", func(t *testing.T) {
		run(t, bin, "train", "--workdir", work, "--out", bundleDir, "--python", py, "--steps", "novelty")
		b, err := bundle.Read(bundleDir)
		if err != nil {
			t.Fatal(err)
		}
		n := b.Manifest.Novelty
		if n == nil || !(n.Widen >= 1 && n.Widen <= 4) || n.Quantile != 0.8 {
			t.Fatalf("novelty %+v: want a widening in [1, 4] at the 80%% quantile", n)
		}
		qs, _, err := training.LoadQueries([]string{recPath}, filepath.Join(repo, "data/split.json"))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := training.TrainFamilies(qs)
		if err != nil || n.Families != len(ids) || len(ids) == 0 {
			t.Fatalf("%d families in the bundle, %d distinct among the training statements (%v)", n.Families, len(ids), err)
		}
		for _, q := range qs {
			engine, _ := dialect.Parse(q.Engine)
			if got := n.Familiar(estimator.FamilyID(q.SQL, q.Catalog, q.Schema, engine)); got != (q.Split == "train") {
				t.Errorf("%s (%s, %s): familiar %v", q.Key, q.Template, q.Split, got)
			}
		}
	})

	t.Run("the text step adds a text stage whose golden statements the Go encoder reproduces", func(t *testing.T) {
		run(t, bin, "train", "--workdir", work, "--out", bundleDir, "--python", py, "--steps", "text",
			"--text-dim", "256", "--text-hidden", "16", "--epochs", "20", "--patience", "5")
		b, err := bundle.Read(bundleDir)
		if err != nil {
			t.Fatal(err)
		}
		tm := b.Manifest.Text
		if tm == nil || len(b.TextModel) == 0 {
			t.Fatal("no text section or text.onnx in the bundle")
		}
		if tm.Dim != 256 || tm.Featurizer != bundle.TextFeaturizer || len(tm.Quantiles) != 3 {
			t.Errorf("text section: dim %d featurizer %q quantiles %v", tm.Dim, tm.Featurizer, tm.Quantiles)
		}
		byKey := map[string]*collector.Record{}
		for _, r := range recs {
			byKey[r.Key] = r
		}
		if len(tm.Golden) == 0 {
			t.Fatal("no golden statements")
		}
		for _, g := range tm.Golden {
			r := byKey[g.Name]
			if r == nil {
				t.Fatalf("golden statement %q is not one of the records", g.Name)
			}
			if g.SQL != r.SQL || g.Catalog != r.Catalog || g.Schema != r.Schema {
				t.Errorf("golden %q: SQL/catalog/schema differ from its record", g.Name)
			}
			if !(g.Expected[0] <= g.Expected[1] && g.Expected[1] <= g.Expected[2]) {
				t.Errorf("golden %q: quantiles %v cross", g.Name, g.Expected)
			}
		}
		// The text matrices are the serving encoder's output (the model
		// was trained on exactly what serving will feed it).
		arrs := readNPZ(t, filepath.Join(work, "text_test.npz"))
		keys := readLines(t, filepath.Join(work, "text_test.keys.txt"))
		x := arrs["x"].Data.([]float32)
		for i, k := range keys {
			r := byKey[k]
			want := featurize.EncodeText(make([]float32, 256), r.SQL,
				featurize.TextContext{Catalog: r.Catalog, Schema: r.Schema, Session: r.SessionProperties})
			for j, v := range want {
				if x[i*256+j] != v {
					t.Fatalf("text_test.npz row %d (%s) slot %d: %v, encoder %v", i, k, j, x[i*256+j], v)
				}
			}
		}
	})

	t.Run("eval reports every model and baseline", func(t *testing.T) {
		out := run(t, bin, "eval", "--bundle", bundleDir, "--data", recPath, "--report", filepath.Join(dir, "report"),
			"--train-workdir", work, "--python", py, "--json", "--quick")
		var res struct {
			Models []map[string]any `json:"models"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("eval --json: %v\n%s", err, out)
		}
		names := map[string]bool{}
		for _, m := range res.Models {
			names[m["model"].(string)] = true
			for _, k := range []string{"mse", "qerror_p50", "qerror_p90", "qerror_p95", "qerror_p99", "qerror_max",
				"pearson_r", "over_provisioned_cpu", "under_provisioned_cpu", "per_template"} {
				if _, ok := m[k]; !ok {
					t.Errorf("model %v lacks %q", m["model"], k)
				}
			}
		}
		for _, want := range []string{"prestroid(15-9-8)", "trino", "logbin", "svr", "tfidf_gbr", "mscn", "wcnn"} {
			if !names[want] {
				t.Errorf("eval lacks model %q (have %v)", want, names)
			}
		}
		if len(res.Models) < 9 {
			t.Errorf("%d models, want the bundle's, 2 full-tree and the baselines", len(res.Models))
		}
		for _, f := range []string{"report.md", "pred_vs_actual.png", "qerror_cdf.png", "eval.json"} {
			if _, err := os.Stat(filepath.Join(dir, "report", f)); err != nil {
				t.Error(err)
			}
		}
	})
}

// TestTinyTrainingWithDynamicFilters: `train --dynamic-filters` makes a
// format-2 bundle that names the reading, and its golden tensors are what
// the serving side builds with the bundle's readings (its encoder, as
// training.LoadBundleEncoder builds it from the manifest),
// not what it would build without them.
func TestTinyTrainingWithDynamicFilters(t *testing.T) {
	py, bin, dir, recPath, recs := setup(t, map[string]int{"train": 30, "validation": 6, "test": 6})
	bundleDir := filepath.Join(dir, "bundle")
	run(t, bin, "train", "--data", recPath, "--out", bundleDir, "--workdir", filepath.Join(dir, "work"), "--python", py,
		"--pf", "8", "--epochs", "1", "--kernels", "16,16,16", "--dense", "8,4", "--dynamic-filters")
	b, err := bundle.Read(bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	if m := b.Manifest; m.FormatVersion != 2 || !slices.Equal(m.TreeFeatures, []string{featurize.TreeFeatureDynamicFilters}) || !b.Manifest.Tree().DynamicFilters {
		t.Fatalf("manifest format_version %d, tree_features %q", m.FormatVersion, m.TreeFeatures)
	}
	served, _, err := training.LoadBundleEncoder(bundleDir)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]*collector.Record{}
	for _, r := range recs {
		byKey[r.Key] = r
	}
	g := b.Golden
	per := g.K * g.S * g.Pf
	differs := 0
	for i, name := range g.Names {
		r := byKey[name]
		if r == nil {
			t.Fatalf("golden case %q is not one of the records", name)
		}
		want := g.Pred[i*per : (i+1)*per]
		for _, tree := range []featurize.TreeOptions{served.Tree, {}} {
			enc := *served
			enc.Tree = tree
			f, err := enc.Featurize(r.Plan.JSON)
			if err != nil {
				t.Fatal(err)
			}
			same := true
			for j, v := range want {
				same = same && math.Abs(float64(f.Pred[j]-v)) <= 1e-6
			}
			switch {
			case tree.DynamicFilters && !same:
				t.Errorf("case %s: the encoder with the bundle's readings differs from its golden tensors", name)
			case !tree.DynamicFilters && !same:
				differs++
			}
		}
	}
	if differs == 0 {
		t.Fatalf("none of the %d golden cases reads differently without dynamic filter clauses: the test shows nothing", g.B)
	}
}

// TestRetrainScript runs scripts/retrain.sh (the documented daily retraining)
// on a few committed records plus a feedback log of live traffic: the first
// run installs its bundle; a run whose bundle does not pass the regression
// check leaves the serving one in place; a run that passes swaps it in and
// reloads.
func TestRetrainScript(t *testing.T) {
	py, bin, dir, recPath, recs := setup(t, map[string]int{"train": 20, "validation": 4, "test": 4})
	// The feedback log: the same queries as live traffic (no workload).
	os.MkdirAll(filepath.Join(dir, "feedback"), 0o755)
	w, err := collector.OpenWriter(filepath.Join(dir, "feedback", "feedback-20261203T000000Z.jsonl.gz"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		live := *r
		live.Key, live.Workload = "live-"+r.Key, nil
		if err := w.Write(&live); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	model := filepath.Join(dir, "model")
	reloaded := filepath.Join(dir, "reloaded")
	runs := 0
	retrain := func(tolerance string) (string, error) {
		runs++
		cmd := exec.Command("sh", "scripts/retrain.sh")
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "PRESTROID_PYTHON="+py, "PRESTROID_BIN="+bin,
			"PRESTROID_MODEL_DIR="+model, "PRESTROID_FEEDBACK_DIR="+filepath.Join(dir, "feedback"),
			"PRESTROID_TRAIN_WORKDIR="+filepath.Join(dir, "work"), "PRESTROID_TRAIN_DATA="+recPath,
			"PRESTROID_TRAIN_FLAGS=--pf 8 --epochs 2 --kernels 8,8,8 --dense 4,2 --min-count 1",
			"PRESTROID_MAX_REGRESSION="+tolerance, "PRESTROID_RELOAD=echo reload >> "+reloaded)
		if runs > 1 {
			// The heads beyond CPU are checked on the first run; the
			// swap rule's runs do without them.
			cmd.Env = append(cmd.Env, "PRESTROID_TARGETS=0")
		}
		if trino := os.Getenv("PRESTROID_TRINO_URL"); trino != "" {
			// The text stage reads the sizes of the records' tables from
			// the harness Trino (SHOW STATS), as the serving cache does.
			cmd.Env = append(cmd.Env, "PRESTROID_STATS_SERVER="+trino)
		}
		out, err := cmd.CombinedOutput()
		t.Logf("retrain.sh (tolerance %s):\n%s", tolerance, out)
		return string(out), err
	}
	modelID := func(dir string) string {
		b, err := bundle.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		return b.Manifest.ModelID
	}

	out, err := retrain("0.05")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, fmt.Sprintf("%d usable", 2*len(recs))) {
		t.Errorf("the live records were not all used (want %d usable)", 2*len(recs))
	}
	first := modelID(model)
	if !strings.Contains(first, "-gated-") { // PRESTROID_GATE defaults to 1, as models/default is built
		t.Errorf("serving %s: want a gated bundle (plain and cost-anchored network)", first)
	}
	// Every retrained bundle has a text stage, reading table sizes when
	// a coordinator gave them.
	b, err := bundle.Read(model)
	if err != nil {
		t.Fatal(err)
	}
	wantText := bundle.TextFeaturizer
	if os.Getenv("PRESTROID_TRINO_URL") != "" {
		wantText = bundle.TextStatsFeaturizer
	}
	if tm := b.Manifest.Text; tm == nil || tm.Featurizer != wantText {
		t.Errorf("retrained bundle's text stage %+v: want featurizer %s", tm, wantText)
	}
	// ... and predicts peak memory and elapsed time beside the CPU, as
	// models/default does.
	if _, ok := b.Manifest.Targets["peak_memory"]; !ok {
		t.Errorf("retrained bundle's targets %+v: want peak_memory and elapsed", b.Manifest.Targets)
	}
	if _, ok := b.Manifest.Targets["elapsed"]; !ok {
		t.Errorf("retrained bundle's targets %+v: want peak_memory and elapsed", b.Manifest.Targets)
	}
	// ... and names the families it was trained on, as models/default does.
	if n := b.Manifest.Novelty; n == nil || n.Families == 0 || !(n.Widen >= 1) {
		t.Errorf("retrained bundle's novelty %+v: want its training families and a widening", n)
	}

	time.Sleep(time.Second) // model ids have second resolution
	if _, err := retrain("-0.5"); err == nil {
		t.Fatal("a bundle that must halve the MSE to pass was accepted")
	}
	if modelID(model) != first {
		t.Fatal("a rejected bundle replaced the serving one")
	}
	if _, err := os.Stat(model + ".rejected"); err != nil {
		t.Fatal("the rejected bundle was not kept")
	}

	time.Sleep(time.Second)
	if _, err := retrain("0.05"); err != nil {
		t.Fatal(err)
	}
	if modelID(model) == first || modelID(model+".old") != first {
		t.Errorf("after a passing run: serving %s, old %s; want a new one and %s", modelID(model), modelID(model+".old"), first)
	}
	if b, _ := os.ReadFile(reloaded); strings.Count(string(b), "reload") != 2 {
		t.Errorf("reloads %q, want one per installed bundle (2)", b)
	}
}

func readNPZ(t *testing.T, path string) map[string]*npy.Array {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	arrs, err := npy.ReadNPZ(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return arrs
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}
