package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
)

const fixtureDir = "../testdata/bundle-fixture"

// runtime returns a Runtime on PRESTROID_ORT_LIB: the test skips when it is
// unset and fails when it is set but the library does not load.
func runtime(t testing.TB) *Runtime {
	t.Helper()
	lib := os.Getenv("PRESTROID_ORT_LIB")
	if lib == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make ort)")
	}
	rt, err := New(Options{LibraryPath: lib})
	if err != nil {
		t.Fatalf("PRESTROID_ORT_LIB=%s: %v", lib, err)
	}
	return rt
}

func TestMissingLibraryNamesPath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	err := checkLibrary(missing)
	if !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want ErrLibrary naming %s", err, missing)
	}
	err = checkLibrary("")
	if !errors.Is(err, ErrLibrary) || !strings.Contains(err.Error(), "PRESTROID_ORT_LIB") {
		t.Fatalf("err = %v, want ErrLibrary naming PRESTROID_ORT_LIB", err)
	}
	if err := checkLibrary(t.TempDir()); !errors.Is(err, ErrLibrary) {
		t.Fatalf("a directory: err = %v", err)
	}
}

func TestFixtureGoldenCases(t *testing.T) {
	rt := runtime(t)
	b, err := bundle.Read(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.LoadModel(b, rt, bundle.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Manifest().Untrained() {
		t.Error("the fixture must be marked untrained")
	}
	t.Logf("model %s, ONNX Runtime %s, %d golden cases", m.ID(), Version(), b.Golden.B)
}

// TestTrainedBundleGoldenCases loads the trainer's default bundle
// (models/default, or PRESTROID_TEST_BUNDLE): every golden case's Go/ONNX
// Runtime prediction must equal the PyTorch one within 1e-4 (LoadModel
// refuses the bundle otherwise), and the featurizer must accept its
// vocabularies on a real plan.
func TestTrainedBundleGoldenCases(t *testing.T) {
	dir := os.Getenv("PRESTROID_TEST_BUNDLE")
	if dir == "" {
		dir = filepath.Join("..", "..", "models", "default")
	}
	if _, err := os.Stat(filepath.Join(dir, bundle.ManifestFile)); err != nil {
		t.Skipf("no trained bundle at %s", dir)
	}
	rt := runtime(t)
	b, err := bundle.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := bundle.LoadModel(b, rt, bundle.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	plan, _ := os.ReadFile(filepath.Join("..", "testdata", "explain", "tpcds-q64-sf1.json"))
	f, err := m.Featurize(plan)
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.Predict([]*featurize.Features{f})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %d golden cases within %g; tpcds-q64 sf1 → %.3f CPU s (untrained: %v)",
		m.ID(), b.Golden.B, bundle.GoldenTolerance, m.CPUSeconds(y[0]), m.Manifest().Untrained())
}
