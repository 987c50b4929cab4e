package estimator

import (
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/plan"
)

// cheapStage classifies the statement (request.kind) and answers for those
// that need no model: a statement cheap by nature (plan.Cheap: SHOW,
// DESCRIBE, queries of system.* / information_schema / VALUES) with the
// constant CascadeOptions.CheapCPUSeconds, and one that must not be
// explained (plan.StatementKind.SafeToExplain: CREATE TABLE AS, SET
// SESSION, DDL, ...) with a not-estimated result and the reason. Neither
// contacts Trino or carries a Basis.
type cheapStage struct{}

func (cheapStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	r.kind = plan.Classify(r.sql)
	if plan.Cheap(r.sql, r.h.Get("X-Trino-Catalog"), r.h.Get("X-Trino-Schema")) {
		return &estimate.Estimate{Estimated: true, Statement: r.kind.String(), Source: estimate.SourceCheap, CPUSeconds: s.opts.Cascade.CheapCPUSeconds}, nil
	}
	if ok, why := r.kind.SafeToExplain(); !ok {
		return &estimate.Estimate{Statement: r.kind.String(), Reason: why}, nil
	}
	return nil, nil
}
