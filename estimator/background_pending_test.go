package estimator

import (
	"testing"
	"time"
)

// A full set of waiting results makes room by dropping the finished one
// that has waited longest; only a set of running entries refuses.
func TestPendingSetDropsTheLongestWaitingResultWhenFull(t *testing.T) {
	var p pendingSet
	toks := make([]string, maxPending)
	for i := range maxPending {
		tok, e := p.add()
		if e == nil {
			t.Fatalf("add %d refused below the bound", i)
		}
		toks[i] = tok
		p.finish(e, Background{})
	}
	// The 10th waited longest: make it the oldest finished.
	p.mu.Lock()
	p.m[toks[10]].at = time.Now().Add(-time.Minute)
	p.mu.Unlock()
	tok, e := p.add()
	if e == nil || tok == "" {
		t.Fatal("a full set of finished results refused a new one; want the longest-waiting dropped")
	}
	if p.has(toks[10]) {
		t.Fatal("the longest-waiting result is still held")
	}
	if !p.has(toks[11]) || !p.has(tok) {
		t.Fatal("another result was dropped, or the new one is missing")
	}

	var running pendingSet
	for i := range maxPending {
		if _, e := running.add(); e == nil {
			t.Fatalf("add %d refused below the bound", i)
		}
	}
	if _, e := running.add(); e != nil {
		t.Fatal("a set of running entries took one more past its bound")
	}
}
