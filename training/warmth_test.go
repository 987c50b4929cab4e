package training

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prestroid/prestroid/estimator/npy"
)

// The text matrices carry each row's warmth, and with --warm-labels a
// weight: a cold run of a shape that also ran warm weighs ColdWeight, a
// cold run with no warm sibling (the only label its shape has) and every
// warm or unknown run weigh 1.
func TestTextMatricesWeighColdRunsWithWarmSiblings(t *testing.T) {
	q := func(key, warmth, shape string) *Query {
		return &Query{Key: key, Split: "train", SQL: "SELECT 1", LnCPU: -1, Warmth: warmth, WarmShape: shape}
	}
	qs := []*Query{
		q("cold-with-warm", WarmthCold, "jvm1/s1"),
		q("warm", WarmthWarm, "jvm1/s1"),
		q("cold-alone", WarmthCold, "jvm1/s2"),
		q("cold-other-jvm", WarmthCold, "jvm2/s1"), // s1 ran warm on another JVM only
		q("unknown", "", ""),
	}
	cfg := &Config{WarmLabels: true, ColdWeight: 0.25}
	dir := t.TempDir()
	tm, err := WriteTextMatrices(dir, qs, 16, nil, coldWeight(qs, cfg.ColdWeight))
	if err != nil {
		t.Fatal(err)
	}
	if tm.Warm != 1 || tm.Cold != 3 || tm.ColdOfWarm != 1 || tm.UnknownWarmth != 1 {
		t.Fatalf("counts %+v: want warm 1, cold 3 (1 with a warm sibling), unknown 1", tm)
	}
	arrs := readNPZ(t, filepath.Join(dir, "text_train.npz"))
	if got, want := arrs["warm"].Data.([]float32), []float32{0, 1, 0, 0, -1}; !slices.Equal(got, want) {
		t.Errorf("warm %v, want %v", got, want)
	}
	if got, want := arrs["w"].Data.([]float32), []float32{0.25, 1, 1, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("w %v, want %v", got, want)
	}

	// Without --warm-labels: no weights, every row counts alike.
	if _, err := WriteTextMatrices(dir, qs, 16, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := readNPZ(t, filepath.Join(dir, "text_train.npz"))["w"]; ok {
		t.Error("weights written without --warm-labels")
	}
}

func readNPZ(t *testing.T, path string) map[string]*npy.Array {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	arrs, err := npy.ReadNPZ(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return arrs
}
