package estimator

import (
	"math"
	"net/http"
	"testing"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/internal/dialect"
)

// The model's interval is widened by the bundle's factor for a statement
// of a family it was not trained on, and left as it is for other literals
// of one it was — run in another session, under another user — and for
// every model+residual answer. FamilyID (what the training step writes)
// and the family the cascade keys a served statement by agree.
func TestNovelFamiliesGetTheBundlesWidening(t *testing.T) {
	const trained = "SELECT * FROM orders WHERE o_orderkey = 1"
	mf := &bundle.Manifest{Novelty: bundle.NewNovelty(1.5,
		[]uint64{FamilyID(trained, "tpch", "tiny", dialect.Trino)})}
	bob := http.Header{"X-Trino-User": {"bob"}, "X-Trino-Catalog": {"tpch"}, "X-Trino-Schema": {"tiny"},
		"X-Trino-Session": {"join_distribution_type=BROADCAST"}}
	for _, c := range []struct {
		name string
		sql  string
		h    http.Header
		mf   *bundle.Manifest
		want float64 // the served σ over the model's own
	}{
		{"the statement it was trained on", trained, alice, mf, 1},
		{"other literals, another user and session", "SELECT * FROM orders WHERE o_orderkey = 99", bob, mf, 1},
		{"a statement it never saw", "SELECT * FROM lineitem WHERE l_orderkey = 1", alice, mf, 1.5},
		{"the trained statement in another schema", trained,
			http.Header{"X-Trino-User": {"alice"}, "X-Trino-Catalog": {"tpch"}, "X-Trino-Schema": {"sf1"}}, mf, 1.5},
		{"a bundle without the section", "SELECT * FROM lineitem WHERE l_orderkey = 1", alice, &bundle.Manifest{}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newCascade(t, defaults, constModel(2))
			r := explainedRequest(s, c.sql)
			r.h, r.mf = c.h, c.mf
			historyStage{}.run(s, r) // the basis of this session
			e, err := modelStage{}.run(s, r)
			if err != nil || e == nil || e.Source != estimate.SourceModel {
				t.Fatalf("got %+v %v", e, err)
			}
			if want := defaults.ModelSigma * c.want; math.Abs(e.Sigma-want) > 1e-12 || e.CPUSeconds != 2 {
				t.Errorf("σ %v, median %v: want σ %v around the model's 2 s", e.Sigma, e.CPUSeconds, want)
			}
		})
	}
	t.Run("a cached estimate of a new family is widened as the model's", func(t *testing.T) {
		const novel = "SELECT * FROM lineitem WHERE l_orderkey = 1"
		s := cachedCascade(t, defaults)
		ask := func() *estimate.Estimate {
			r := explainedRequest(s, novel)
			r.mf = mf
			if e, err := (cacheStage{}).run(s, r); e != nil || err != nil {
				return e
			}
			e, err := modelStage{}.run(s, r)
			if err != nil || e == nil {
				t.Fatalf("got %+v %v", e, err)
			}
			return e
		}
		first := ask()
		s.opts.Cache.(*cache.TTL[estimate.Estimate]).Wait()
		second := ask()
		if first.Cached || !second.Cached || second.Sigma != first.Sigma || second.Sigma != defaults.ModelSigma*1.5 {
			t.Errorf("σ %v then %v (cached %v, %v): want the cache's answer widened as the model's, %v",
				first.Sigma, second.Sigma, first.Cached, second.Cached, defaults.ModelSigma*1.5)
		}
	})
	t.Run("model+residual keeps its residuals' spread", func(t *testing.T) {
		const novel = "SELECT * FROM lineitem WHERE l_orderkey = 1"
		s := newCascade(t, defaults, constModel(2))
		exact, shape := HistoryKeys(novel, alice)
		s.Observe(&Basis{Exact: exact, Shape: shape, LnModel: math.Log(2), LnCost: math.NaN(), LnText: math.NaN()}, estimate.Actual{CPUSeconds: 8})
		s.Flush()
		want := func(mf *bundle.Manifest) float64 {
			r := explainedRequest(s, novel)
			r.mf = mf
			e, err := modelStage{}.run(s, r)
			if err != nil || e == nil || e.Source != estimate.SourceModelResidual {
				t.Fatalf("got %+v %v; want model+residual", e, err)
			}
			return e.Sigma
		}
		if with, without := want(mf), want(nil); with != without {
			t.Errorf("σ %v with the novelty section, %v without: want the same", with, without)
		}
	})
}

// The text stage weighs an EXPLAIN against the σ the model's answer would
// carry, widened for a family the model was not trained on as the model
// stage would widen it: 1.13 s with σ 0.5 straddles the 1 s bound, and
// under the 0.9 class quantile the plan's answer (σ 1 as the prior says)
// could still place it small, so a statement of a trained family is
// explained; one of a new family, whose plan answer would carry σ 1.5 and
// be routed by its higher quantile, goes to the large class either way
// and is routed by the text stage at once.
func TestTextStageWeighsTheModelsWidenedUncertainty(t *testing.T) {
	const (
		trained = "SELECT count(*) FROM orders WHERE o_orderkey = 1 -- text 0.5954 1.13 2.1446"
		novel   = "SELECT count(*) FROM lineitem WHERE l_orderkey = 1 -- text 0.5954 1.13 2.1446"
	)
	mf := &bundle.Manifest{Novelty: bundle.NewNovelty(1.5, []uint64{FamilyID(trained, "tpch", "tiny", dialect.Trino)})}
	co := defaults
	co.Explain, co.ClassBounds, co.ClassQuantile = ExplainWhenUncertain, []float64{1, 0}, 0.9
	for _, c := range []struct {
		sql      string
		mf       *bundle.Manifest
		answered bool
	}{{trained, mf, false}, {novel, mf, true}, {novel, nil, false}} {
		s := newCascade(t, co, constModel(1))
		s.textHook = textModel
		r := newRequest([]string{"http://planner"}, c.sql)
		r.mf = c.mf
		historyStage{}.run(s, r)
		e, err := textStage{}.run(s, r)
		if err != nil || (e != nil) != c.answered || e != nil && e.Source != estimate.SourceText {
			t.Errorf("%q (novelty section %v): %+v %v; want answered by the text stage %v", c.sql, c.mf != nil, e, err, c.answered)
		}
	}
}
