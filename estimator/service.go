package estimator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
)

// EstimateCache caches estimates by EstimateKey, with a TTL. Best-effort;
// cached values are never modified. cache.TTL[estimate.Estimate] fits.
type EstimateCache interface {
	Get(key string) (estimate.Estimate, bool)
	Set(key string, e estimate.Estimate)
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
	// CacheShapeOnly keys both caches on the statement's shape alone (its
	// Fingerprint), as before they keyed on its range literals too
	// (cacheFingerprint): a statement whose date range moved is then
	// served the estimate made for the first range, until the TTL.
	CacheShapeOnly bool
	// Logger receives reload messages. Nil means slog.Default().
	Logger *slog.Logger
	// History is where the cascade learns from completed queries
	// (Observe). Nil means no history stages: every estimate is the model's
	// (or the cheap constant). The Service closes it.
	History history.Store
	// Cascade tunes the cascade's stages; its zero value is documented per
	// field.
	Cascade CascadeOptions
	// TableStats gives the text stage the statistics of the tables a
	// statement names, when the bundle's text model reads them
	// (tablestats.Cache fits; the Service closes one that has a Close
	// method). Nil means every table's size is unknown.
	TableStats TableStatsSource
}

// Service estimates queries: classify, EXPLAIN as the caller, featurize,
// infer (micro-batched). It is safe for concurrent use; the model can be
// swapped while it serves (Swap, WatchBundle).
type Service struct {
	opts ServiceOptions
	// dropPlans: background results keep no plan (DropPlans).
	dropPlans atomic.Bool
	model     atomic.Pointer[bundle.Model]
	b         *batcher
	log       *slog.Logger
	learn     *learner // nil without History
	closed    atomic.Bool
	// inflight counts the EXPLAINs running per planner URL (*atomic.Int64).
	inflight sync.Map
	// scoreHook, when set (tests only), stands in for the model: the raw
	// estimate of a plan.
	scoreHook func(planJSON []byte) (*estimate.Estimate, error)
	// hookID, when set (tests only), is the scoreHook's model id: the
	// estimate cache serves its estimates.
	hookID string
	// textHook, when set (tests only), stands in for the text model: its
	// quantiles and the CPU seconds at each.
	textHook func(sql string) (quantiles, seconds []float64)
	// textHookReads, when positive (tests only), makes textHook a model
	// that reads table sizes, trained on tables up to this ln(1 + rows).
	textHookReads float64

	// The text stage's background EXPLAINs (background.go).
	pending                     pendingSet
	bgCtx                       context.Context
	bgCancel                    context.CancelFunc
	bgMu                        sync.Mutex // bgClosed and bgWG.Add
	bgClosed                    bool
	bgWG                        sync.WaitGroup
	handoffs                    struct{ left, refreshed, taken, missed atomic.Uint64 }
	leaving                     sync.Map // query id -> chan struct{} closed once its Leave has been written (Forget waits for it)
	bgDone, bgFailed, bgSkipped atomic.Uint64
	// bgKeys holds the estimate cache keys whose background EXPLAIN is
	// running (another user's repeat meanwhile starts none).
	bgKeys sync.Map

	// ceilings holds each planner's EXPLAIN token bucket (*rate.Limiter,
	// CascadeOptions.ExplainRate; explain_rate.go); explains counts the
	// EXPLAINs by reason.
	ceilings sync.Map
	explains [numExplainReasons]atomic.Uint64
	// drift, when set (tests only), stands in for the drift sample's draw.
	drift func() float64
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
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.model.Store(m)
	s.b = newBatcher(o.Workers, o.MaxBatch, o.MaxWait)
	if o.History != nil {
		s.learn = newLearner(o.History, o.Cascade, o.Logger)
	}
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

// ErrNoModel means the Service serves without a model (NewService(nil,
// ...)): only the cascade's stages that need none answer.
var ErrNoModel = errors.New("estimator: no model loaded")

// Close cancels the background EXPLAINs, stops the inference workers,
// flushes the history and closes the model.
func (s *Service) Close() {
	s.closed.Store(true)
	s.stopBackground()
	s.b.close()
	if s.learn != nil {
		s.learn.close()
	}
	if c, ok := s.opts.TableStats.(interface{ Close() }); ok {
		c.Close()
	}
	if m := s.model.Swap(nil); m != nil {
		m.Close()
	}
}

// acquire returns the current model with a reference held.
func (s *Service) acquire() (*bundle.Model, error) {
	for {
		m := s.model.Load()
		if m == nil && s.closed.Load() {
			return nil, errServiceClosed
		}
		if m == nil {
			return nil, ErrNoModel
		}
		if m.Acquire() {
			return m, nil
		}
		// Retired between Load and acquire: a newer model is in place.
	}
}

// Estimate estimates sql for the caller described by h (read only; its
// X-Trino-* headers and Authorization go to the EXPLAIN), planning on the
// Trino coordinator at server: EstimateOn with one planner.
func (s *Service) Estimate(ctx context.Context, server, sql string, h http.Header) (*estimate.Estimate, error) {
	return s.EstimateOn(ctx, []string{server}, sql, h)
}

// EstimatePlan estimates an EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) plan.
func (s *Service) EstimatePlan(ctx context.Context, planJSON []byte) (*estimate.Estimate, error) {
	m, err := s.acquire()
	if err != nil {
		return nil, err
	}
	defer m.Release()
	return s.estimatePlan(ctx, m, planJSON)
}

func (s *Service) estimatePlan(ctx context.Context, m *bundle.Model, planJSON []byte) (*estimate.Estimate, error) {
	t0 := time.Now()
	f, err := m.Featurize(planJSON)
	if err != nil {
		return nil, err
	}
	t1 := time.Now()
	p, err := s.b.infer(ctx, m, f)
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	y := p.Y[estimate.TargetCPU]
	e := &estimate.Estimate{
		Estimated: true, Statement: plan.StmtQuery.String(),
		CPUSeconds: m.CPUSeconds(y), Normalized: y,
		Model: m.ID(), Untrained: m.Manifest().Untrained(),
		Featurize: t1.Sub(t0), Infer: t2.Sub(t1),
		Tables: f.Tables, UnknownTables: f.UnknownTables,
	}
	setModelTargets(e, m, p)
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
