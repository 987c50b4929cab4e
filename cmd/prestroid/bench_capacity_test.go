package main

import "testing"

// bench capacity-model refuses what it cannot model with a usage error
// and answers from the committed figures.
func TestBenchCapacityModelFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mix", "bogus=1"},
		{"--rates", "10k"},
		{"--rates", "-5"},
		{"--mix", "text"},
	} {
		if rc := benchCapacityModel(args); rc != 2 {
			t.Errorf("%v: exit %d, want 2", args, rc)
		}
	}
	if rc := benchCapacityModel([]string{"--features", "bogus"}); rc != 1 {
		t.Errorf("an unmeasured feature: exit %d, want 1", rc)
	}
	if rc := benchCapacityModel([]string{"--rates", "10000", "--redis", "history,usage"}); rc != 0 {
		t.Errorf("exit %d, want 0", rc)
	}
}
