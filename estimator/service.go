package estimator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/plan"
)

// CostEstimate is the cost estimate of one statement.
type CostEstimate struct {
	// Estimated is false for statements that get no estimate (SET
	// SESSION, SHOW, DDL...; see Explainable): then Statement and Reason
	// say why and the cost fields are zero.
	Estimated bool
	Statement plan.StatementKind
	Reason    string

	CPUSeconds float64 // predicted CPU time of the query, seconds
	Normalized float32 // the model output in [0, 1]
	ModelID    string
	Untrained  bool // the model is an untrained fixture: do not trust the number

	ExplainMillis   float64 // EXPLAIN round trip (0 on a cache hit)
	FeaturizeMicros int64   // plan JSON → tensors
	InferMicros     int64   // queued + batched inference
	Cached          bool    // served from the estimate cache
	ExplainQueryID  string  // the EXPLAIN query's id on Trino

	// Tables is the number of distinct tables the plan scans and
	// UnknownTables how many of them the model never saw in training.
	Tables, UnknownTables int
	// Plan is the EXPLAIN JSON the estimate was made from. Never kept in
	// the estimate cache (plans can be megabytes); a cache hit has it only
	// from ServiceOptions.PlanCache.
	Plan []byte `json:"-"`
}

// EstimateCache caches estimates by EstimateKey, with a TTL. Best-effort;
// cached values are never modified. cache.TTL[CostEstimate] fits.
type EstimateCache interface {
	Get(key string) (CostEstimate, bool)
	Set(key string, e CostEstimate)
}

// PlanCache caches EXPLAIN plans by EstimateKey (best-effort; cached plans
// are never modified).
type PlanCache interface {
	Get(key string) ([]byte, bool)
	Set(key string, plan []byte)
}

// ServiceOptions configure a Service. Zero values are documented per field.
type ServiceOptions struct {
	// Explain runs the EXPLAINs. Nil means a zero ExplainClient.
	Explain *plan.ExplainClient
	// ExplainTimeout bounds one EXPLAIN. Zero means 30s.
	ExplainTimeout time.Duration
	// MaxBatch is the largest inference batch. Zero means 32; 1 turns
	// micro-batching off.
	MaxBatch int
	// MaxWait is how long a worker holds a batch open for more requests
	// after the first. Zero means no wait: a batch is whatever queued up
	// while the workers were busy (no added latency when idle).
	MaxWait time.Duration
	// Workers is the number of concurrent inference runs. Zero means
	// GOMAXPROCS.
	Workers int
	// Cache caches estimates. Nil means no estimate cache.
	Cache EstimateCache
	// PlanCache keeps the plans of cached estimates under the same key, so
	// that a cache hit still carries its plan (for the feedback log). Nil
	// means cache hits have no plan. cache.NewPlans gives one.
	PlanCache PlanCache
	// Logger receives reload messages. Nil means slog.Default().
	Logger *slog.Logger
}

// Service estimates queries: classify, EXPLAIN as the caller, featurize,
// infer (micro-batched). It is safe for concurrent use; the model can be
// swapped while it serves (Swap, WatchBundle).
type Service struct {
	opts  ServiceOptions
	model atomic.Pointer[bundle.Model]
	b     *batcher
	log   *slog.Logger
}

// NewService serves m (which the Service then owns and closes).
func NewService(m *bundle.Model, o ServiceOptions) *Service {
	if o.Explain == nil {
		o.Explain = &plan.ExplainClient{}
	}
	if o.ExplainTimeout <= 0 {
		o.ExplainTimeout = 30 * time.Second
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 32
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	s := &Service{opts: o, log: o.Logger}
	s.model.Store(m)
	s.b = newBatcher(o.Workers, o.MaxBatch, o.MaxWait)
	return s
}

// Model returns the model being served.
func (s *Service) Model() *bundle.Model { return s.model.Load() }

// Swap serves m from now on; the previous model closes once its in-flight
// requests finish.
func (s *Service) Swap(m *bundle.Model) {
	if old := s.model.Swap(m); old != nil && old != m {
		old.Close()
	}
}

// Close stops the inference workers and closes the model.
func (s *Service) Close() {
	s.b.close()
	if m := s.model.Swap(nil); m != nil {
		m.Close()
	}
}

// acquire returns the current model with a reference held.
func (s *Service) acquire() (*bundle.Model, error) {
	for {
		m := s.model.Load()
		if m == nil {
			return nil, errServiceClosed
		}
		if m.Acquire() {
			return m, nil
		}
		// Retired between Load and acquire: a newer model is in place.
	}
}

// Estimate estimates sql for the caller described by h (read only; its
// X-Trino-* headers and Authorization go to the EXPLAIN) against the Trino
// coordinator at server. Statements that are not safe to explain
// (plan.StatementKind.SafeToExplain: not explainable, or CREATE TABLE AS)
// get a not-estimated result with the reason and a nil error, without
// contacting Trino.
func (s *Service) Estimate(ctx context.Context, server, sql string, h http.Header) (*CostEstimate, error) {
	kind := plan.Classify(sql)
	if ok, why := kind.SafeToExplain(); !ok {
		return &CostEstimate{Statement: kind, Reason: why}, nil
	}
	m, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer m.Release()
	var key string
	if s.opts.Cache != nil {
		key = EstimateKey(m.ID(), sql, h)
		if e, ok := s.opts.Cache.Get(key); ok {
			e.Cached, e.ExplainMillis, e.FeaturizeMicros, e.InferMicros = true, 0, 0, 0
			if s.opts.PlanCache != nil {
				e.Plan, _ = s.opts.PlanCache.Get(key)
			}
			return &e, nil
		}
	}
	ectx, cancel := context.WithTimeout(ctx, s.opts.ExplainTimeout)
	res, err := s.opts.Explain.Explain(ectx, server, sql, h)
	cancel()
	if err != nil {
		return nil, err
	}
	e, err := s.estimatePlan(ctx, m, res.PlanJSON)
	if err != nil {
		return nil, err
	}
	e.Statement = kind
	e.ExplainMillis = float64(res.Wall.Microseconds()) / 1000
	e.ExplainQueryID = res.QueryID
	if key != "" {
		s.opts.Cache.Set(key, *e)
		if s.opts.PlanCache != nil {
			s.opts.PlanCache.Set(key, res.PlanJSON)
		}
	}
	e.Plan = res.PlanJSON
	return e, nil
}

// EstimatePlan estimates an EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) plan.
func (s *Service) EstimatePlan(ctx context.Context, planJSON []byte) (*CostEstimate, error) {
	m, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer m.Release()
	return s.estimatePlan(ctx, m, planJSON)
}

func (s *Service) estimatePlan(ctx context.Context, m *bundle.Model, planJSON []byte) (*CostEstimate, error) {
	t0 := time.Now()
	f, err := m.Featurize(planJSON)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	y, err := s.b.infer(ctx, m, f)
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	e := &CostEstimate{
		Estimated: true, Statement: plan.StmtQuery,
		CPUSeconds: m.CPUSeconds(y), Normalized: y,
		ModelID: m.ID(), Untrained: m.Manifest().Untrained(),
		FeaturizeMicros: t1.Sub(t0).Microseconds(), InferMicros: t2.Sub(t1).Microseconds(),
		Tables: f.Tables, UnknownTables: f.UnknownTables,
	}
	f.Release() // answered: no worker reads f any more
	return e, nil
}

// Reload loads a new model with load and swaps it in. A refused model
// leaves the current one serving; the error says why.
func (s *Service) Reload(load func() (*bundle.Model, error)) error {
	m, err := load()
	if err != nil {
		return err
	}
	if m == nil {
		return errors.New("estimator: reload: no model")
	}
	old := s.Model()
	s.Swap(m)
	oldID := ""
	if old != nil {
		oldID = old.ID()
	}
	s.log.Info("estimator: model loaded", "model", m.ID(), "source", m.Source(), "previous", oldID, "untrained", m.Manifest().Untrained())
	return nil
}
