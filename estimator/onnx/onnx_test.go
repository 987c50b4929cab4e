package onnx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator"
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
	b, err := estimator.ReadBundle(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := estimator.LoadModel(b, rt, estimator.ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !m.Manifest().Untrained() {
		t.Error("the fixture must be marked untrained")
	}
	t.Logf("model %s, ONNX Runtime %s, %d golden cases", m.ID(), Version(), b.Golden.B)
}
