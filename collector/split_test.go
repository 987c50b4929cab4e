package collector

import (
	"fmt"
	"testing"
)

// TestHashPart: a template's part is fixed, and the parts come out near
// MakeSplit's 80/10/10.
func TestHashPart(t *testing.T) {
	count := map[string]int{}
	for i := range 10000 {
		name := fmt.Sprintf("live/%06x", i)
		p := HashPart(name)
		if HashPart(name) != p {
			t.Fatalf("%s: part changes between calls", name)
		}
		count[p]++
	}
	for part, want := range map[string]int{"train": 8000, "validation": 1000, "test": 1000} {
		if got := count[part]; got < want*9/10 || got > want*11/10 {
			t.Errorf("%s: %d of 10,000 templates, want about %d", part, got, want)
		}
	}
}

func TestLoadSplitReadsThePartsOfTheCommittedSplit(t *testing.T) {
	s, err := LoadSplit("../data/split.json")
	if err != nil {
		t.Fatal(err)
	}
	test, ok := s.Part("test")
	if !ok || len(test) == 0 {
		t.Fatalf("test part %v (ok %v)", test, ok)
	}
	if p := s.ByTemplate[test[0]]; p != "test" {
		t.Errorf("%s of the test part is in %q by template", test[0], p)
	}
	if _, ok := s.Part("holdout"); ok {
		t.Error("an unknown part was found")
	}
	if _, err := LoadSplit("../data/no-such-split.json"); err == nil {
		t.Error("a missing file was read")
	}
}
