package estimator

import (
	"github.com/prestroid/prestroid/estimate"
)

// cacheStage takes the model for the stages after it (request.m, held
// until the cascade ends) and answers from the estimate cache: the same
// model's raw estimate of the statement's shape in the same session
// (estimateKey) with the same range literals (cacheFingerprint: a moved
// date range reads other partitions), corrected by what the history has learned since
// (correct; widenNovel), with the plan cache's plan. Without a model (request.merr)
// the cascade fails here unless the history can learn from an EXPLAIN
// (a Basis): with no model and no calibration to fall back on, no EXPLAIN
// is worth running. With the scoreHook (tests) no model is taken, and the
// cache is read only when the test names its stand-in (hookID). The key
// leaves out the user and the credentials (estimateKey): another user's
// repeat in the same session is served without an EXPLAIN.
type cacheStage struct{}

func (cacheStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if s.scoreHook == nil {
		if r.m, r.merr = s.acquire(); r.merr != nil && r.b == nil {
			return nil, r.merr
		}
	}
	id := s.hookID // the scoreHook's stand-in model (tests)
	if r.m != nil {
		id = r.m.ID()
	}
	if id == "" || s.opts.Cache == nil {
		return nil, nil
	}
	r.key = estimateKey(id, r.engine, r.cacheFP(s), r.h)
	e, ok := s.opts.Cache.Get(r.key)
	if !ok {
		return nil, nil
	}
	e.Cached, e.Explain, e.Featurize, e.Infer = true, 0, 0, 0
	if s.opts.PlanCache != nil {
		e.Plan, _ = s.opts.PlanCache.Get(r.key)
	}
	s.correct(r.reads, &e, r.b, s.modelPrior(r.manifest(), r.engine))
	widenNovel(&e, r.b, r.manifest())
	return &e, nil
}
