package training

import (
	"path/filepath"
	"testing"
)

func TestScaleSplitHoldsOutTheLargestScale(t *testing.T) {
	mk := func(key, scale, split string) *Query { return &Query{Key: key, Scale: scale, Split: split} }
	qs := []*Query{
		mk("a", "tiny", "train"), mk("b", "tiny", "test"), mk("c", "sf1", "val"),
		mk("d", "sf10", "train"), mk("e", "sf10", "test"), mk("f", "sf0.1", "test"), mk("g", "", "test"),
	}
	st := &LoadStats{}
	held, err := ApplyScaleSplit(qs, st, ScaleLargest)
	if err != nil {
		t.Fatal(err)
	}
	if held != "sf10" {
		t.Fatalf("held out %q, want sf10 (sf10 > sf1 > sf0.1 > tiny)", held)
	}
	want := map[string]string{"a": "train", "b": "train", "c": "val", "d": "test", "e": "test", "f": "train", "g": "train"}
	for _, q := range qs {
		if q.Split != want[q.Key] {
			t.Errorf("%s at %q: split %s, want %s", q.Key, q.Scale, q.Split, want[q.Key])
		}
	}
	if st.ScaleSplit != "sf10" || st.PerSplit["test"] != 2 || st.PerSplit["train"] != 4 || st.PerSplit["val"] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestScaleSplitByNameAndItsErrors(t *testing.T) {
	qs := []*Query{{Key: "a", Scale: "tiny", Split: "train"}, {Key: "b", Scale: "sf1", Split: "train"}}
	if held, err := ApplyScaleSplit(qs, nil, "tiny"); err != nil || held != "tiny" || qs[0].Split != "test" || qs[1].Split != "train" {
		t.Fatalf("held %q err %v, splits %s %s", held, err, qs[0].Split, qs[1].Split)
	}
	if _, err := ApplyScaleSplit(qs, nil, "sf100"); err == nil {
		t.Fatal("a scale no query has was accepted")
	}
	one := []*Query{{Key: "a", Scale: "sf1", Split: "train"}}
	if _, err := ApplyScaleSplit(one, nil, ScaleLargest); err == nil {
		t.Fatal("a split with nothing to train on was accepted")
	}
	if _, err := ApplyScaleSplit([]*Query{{Key: "a", Split: "train"}}, nil, ScaleLargest); err == nil {
		t.Fatal("queries without scales gave a largest scale")
	}
}

func TestLaterStepsFollowTheFeaturizeSplit(t *testing.T) {
	// sameQueries takes each query's split from queries.jsonl, so a scale
	// split decided by featurize holds in the tensors step and eval.
	path := filepath.Join(t.TempDir(), "queries.jsonl")
	written := []*Query{{Key: "a", Split: "test", Scale: "sf1"}, {Key: "b", Split: "train", Scale: "tiny"}}
	if err := WriteQueries(path, written); err != nil {
		t.Fatal(err)
	}
	reloaded := []*Query{{Key: "b", Split: "test", Scale: "tiny"}, {Key: "a", Split: "train", Scale: "sf1"}}
	got, err := sameQueries(path, reloaded)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Key != "a" || got[0].Split != "test" || got[1].Split != "train" {
		t.Fatalf("got %+v %+v", got[0], got[1])
	}
}
