package estimator

import (
	"errors"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// failCache fails the test when read or written.
type failCache struct{ t *testing.T }

func (c failCache) Get(string) (estimate.Estimate, bool) {
	c.t.Error("estimate cache read")
	return estimate.Estimate{}, false
}
func (c failCache) Set(string, estimate.Estimate) { c.t.Error("estimate cache written") }

// The cache stage's answer (a hit) needs a loaded model: the end-to-end
// tests (testing/e2e) serve it with the real one.
func TestCacheStage(t *testing.T) {
	const q = "SELECT * FROM orders"
	t.Run("no model and no history: fails before any EXPLAIN", func(t *testing.T) {
		s := NewService(nil, ServiceOptions{Workers: 1, Cache: failCache{t}})
		defer s.Close()
		r := newRequest(nil, q)
		if e, err := (cacheStage{}).run(s, r); e != nil || !errors.Is(err, ErrNoModel) || r.m != nil {
			t.Fatalf("got %+v %v; want ErrNoModel", e, err)
		}
	})
	t.Run("no model with a history: passes, the EXPLAIN can still teach the calibration", func(t *testing.T) {
		s := NewService(nil, ServiceOptions{Workers: 1, History: history.NewMemory(10), Cache: failCache{t}})
		defer s.Close()
		r := newRequest(nil, q)
		r.b, r.reads = &r.basis, s.reads()
		if e, err := (cacheStage{}).run(s, r); e != nil || err != nil || !errors.Is(r.merr, ErrNoModel) || r.m != nil || r.key != "" {
			t.Fatalf("got %+v %v, merr %v; want a pass with the model's error kept", e, err, r.merr)
		}
	})
	t.Run("the model stand-in takes no model and reads no cache", func(t *testing.T) {
		s := newCascade(t, defaults, constModel(1))
		s.opts.Cache = failCache{t}
		r := newRequest(nil, q)
		if e, err := (cacheStage{}).run(s, r); e != nil || err != nil || r.merr != nil || r.m != nil {
			t.Fatalf("got %+v %v, merr %v; want a pass", e, err, r.merr)
		}
	})
}
