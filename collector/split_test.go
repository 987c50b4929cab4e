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
