package estimator

import (
	"math"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/internal/dialect"
)

// modelStage scores the hot-path EXPLAIN's plan with the model
// (estimatePlan; the scoreHook in tests), caches its raw estimate and the
// plan under the estimate cache's key, and answers with the estimate
// corrected by the deployment's global offset and the shape's residual
// (correct: source model, or model+residual), the calibrated optimizer's
// number beside it. Without a model, or when it fails on the plan, it
// passes with request.merr to the optimizer stage.
type modelStage struct{}

func (modelStage) run(s *Service, r *request) (*estimate.Estimate, error) {
	if r.merr != nil {
		return nil, nil
	}
	var e *estimate.Estimate
	var err error
	if s.scoreHook != nil {
		e, err = s.scoreHook(r.res.PlanJSON)
	} else {
		e, err = s.estimatePlan(r.ctx, r.m, r.res.PlanJSON)
	}
	if err != nil {
		r.merr = err
		return nil, nil
	}
	r.explained(e)
	if r.key != "" {
		s.opts.Cache.Set(r.key, *e)
		if s.opts.PlanCache != nil {
			s.opts.PlanCache.Set(r.key, r.res.PlanJSON)
		}
	}
	e.Plan = r.res.PlanJSON
	s.correct(r.reads, e, r.b, s.modelPrior(r.manifest(), r.engine))
	if !r.textFar {
		blendTextTargets(e, r.manifest(), r.text)
		if r.text != nil {
			e.TextCPUSeconds = r.text.CPUSeconds
		}
	}
	if secs, sd, ok := s.calibrated(r.reads, r.b); ok {
		e.OptimizerCPUSeconds = secs
		s.blendOptimizer(r.reads, e, r.b, secs, sd)
	}
	widenNovel(e, r.b, r.manifest())
	if r.text != nil && foreign(r.manifest(), r.engine) {
		sd := r.text.Sigma
		if r.textFar {
			sd += textFarSigma
		}
		blend(e, r.text.CPUSeconds, sd)
	}
	return e, nil
}

// setModelTargets puts the model's raw predictions of the targets beyond
// CPU into e (its PeakMemory and Elapsed, with the bundle's sigma); a
// single-target bundle leaves them zero. What the cascade corrects is the
// CPU (correct); the other targets are the model's numbers as they are.
func setModelTargets(e *estimate.Estimate, m *bundle.Model, p bundle.Prediction) {
	for _, t := range estimate.Targets {
		if t != estimate.TargetCPU {
			if q := m.Quantity(t, p); q.Known() {
				e.Set(t, q)
			}
		}
	}
}

// blendTextTargets combines, for each target beyond CPU whose manifest
// entry has a text blend (bundle.TextBlend), the model's number in e with
// the text stage's number of the same statement (text; each as its stage
// corrected it) in ln, at the weight fitted on the validation templates:
// the two read different things (the plan's shape and estimates; the
// statement and its tables' sizes) and their blend was better than either
// (on the test templates, peak memory 1.69 → 1.52 and elapsed 1.52 → 1.49
// in the median q-error; models/README.md, "Beyond CPU"). The served Sigma
// is the smaller of the model's and the blend's. Without a text number (or
// a blend), or when the statement is far from the text model's training
// (request.textFar: a table's size unknown or beyond any it saw; with the
// largest scale held out its peak memory was 16× off in the median), the
// model's number stands.
func blendTextTargets(e *estimate.Estimate, mf *bundle.Manifest, text *estimate.Estimate) {
	if text == nil {
		return
	}
	for _, t := range beyondCPU {
		tb := mf.TextBlend(t)
		m, x := e.Of(t), text.Of(t)
		if tb == nil || !m.Known() || !x.Known() {
			continue
		}
		ln := (1-tb.Weight)*math.Log(m.Median) + tb.Weight*math.Log(x.Median)
		e.Set(t, estimate.Quantity{Median: math.Exp(ln), Sigma: min(m.Sigma, tb.Sigma)})
	}
}

// textFarSigma widens the text model's spread (ln CPU) when the statement
// is far from its training (a table's size not known yet, or larger than
// any it saw) before it is blended with a foreign model's number: still
// three times the foreign model's precision.
const textFarSigma = 1.0

// foreignModelSigma is the prior standard deviation of ln CPU around the
// model's number on a cluster whose engine the model never saw in training
// (bundle.Manifest.TrainedOn), where ModelSigma is for its own: a model
// trained on Trino's plans reads PrestoDB's without their cost estimates,
// and on held-out PrestoDB TPC-H templates it was 17x (tiny) to 57x (sf1)
// low in the median (ln 2.8 to 4.0; models/README.md, "On PrestoDB"). The
// engine's learned offset and residuals shrink it as queries finish.
const foreignModelSigma = 3.0

// foreign reports whether the model of manifest mf never saw engine's
// plans (nil mf: the tests' scoreHook, taken as trained on every engine).
func foreign(mf *bundle.Manifest, engine dialect.Engine) bool {
	return mf != nil && !mf.TrainedOn(engine)
}

// modelPrior is the prior standard deviation of ln CPU around the number
// of the model of manifest mf on a cluster of engine: ModelSigma, or
// foreignModelSigma when it never saw engine's plans.
func (s *Service) modelPrior(mf *bundle.Manifest, engine dialect.Engine) float64 {
	if foreign(mf, engine) {
		return foreignModelSigma
	}
	return s.opts.Cascade.ModelSigma
}

// blendOptimizer combines the model's corrected estimate e with the
// calibrated optimizer's number (secs, its fit's prediction spread sd) on
// the same plan. The two err differently — the Tree-CNN reads the plan's
// shape, the optimizer's cost grows with the data a plan reads — and
// which of them to trust more is the deployment's to say:
//
//   - A statement without residuals of its own (source model) is served
//     the blend line's prediction once it is fitted (blendLine: ln actual
//     − ln model on ln optimizer − ln model through the origin, learned
//     from the statements it served so, its slope the optimizer's weight
//     in [0, 1]), with that line's prediction spread as its Sigma. The
//     precision weights below take both spreads as independent and each
//     line as unbiased where the statement lies; on Parquet neither held:
//     the optimizer's line under-predicts the largest statements
//     (models/README.md, "Where the ≥ 1 s first sights are missed") and
//     its spread is not the error of its number at a statement it
//     extrapolates to, so the blend pulled the model's right number down.
//     Replaying 21 committed served runs in the order they ran, the line
//     fitted prequentially, put the first sights of at least 1 s CPU at a
//     median / p90 q-error of 1.47 / 2.65 against the precision weights'
//     1.57 / 2.77 (all first sights level: 1.57 / 3.70 against 1.56 /
//     3.70; models/README.md, "A blend the deployment learns"); served
//     live it was within the runs' noise.
//   - Until then, and for model+residual (a shape with narrow residuals
//     keeps nearly its own number), the precision-weighted mean in ln CPU
//     (blend: e.Sigma² against sd²), the served Sigma the smaller.
//
// b (may be nil) records the pair for the blend line (Basis.Blend).
func (s *Service) blendOptimizer(v *reads, e *estimate.Estimate, b *Basis, secs, sd float64) {
	if b == nil || e.Source != estimate.SourceModel || !(e.CPUSeconds > 0) || !(secs > 0) {
		blend(e, secs, sd)
		return
	}
	lm, lo := math.Log(e.CPUSeconds), math.Log(secs)
	b.Blend = &BlendPoint{LnModel: lm, LnOptimizer: lo}
	c, ok := v.get(globalKey(keyBlend, b.Engine))
	if !ok || c.Count < uint64(s.opts.Cascade.MinCalibration) {
		blend(e, secs, sd)
		return
	}
	y, ysd, ok := blendLine(c, lo-lm, s.opts.Cascade.Alpha)
	if !ok {
		blend(e, secs, sd)
		return
	}
	e.CPUSeconds, e.Sigma = math.Exp(lm+y), max(ysd, sigmaFloor)
}

// blendLine is what the blend line's statistics c (x: ln optimizer − ln
// model, y: ln actual − ln model; fitted with recency weight
// slowAlpha(alpha)) predict at x, with the standard deviation of a new
// point there: the least-squares line through the origin (the two
// numbers' bias is the global offset's and the calibration's to correct)
// whose slope, held to [0, 1], is the optimizer's weight, and the
// prediction error of such a line, s²·(1 + x²/(n·E[x²])) with s² the mean
// squared residual unbiased by n/(n−1) and n the fit's effective count. A
// line with an intercept too was no better in the median on the
// committed runs (1.62 against 1.48 at ≥ 1 s; models/README.md).
func blendLine(c history.Stats, x, alpha float64) (y, sd float64, ok bool) {
	xx := c.VarX + c.MeanX*c.MeanX // E[x²]
	if c.Count < 2 || xx <= 1e-12 {
		return 0, 0, false
	}
	xy := c.Cov + c.MeanX*c.Mean
	w := min(max(xy/xx, 0), 1)
	res := max(c.Var+c.Mean*c.Mean-2*w*xy+w*w*xx, 0) // E[(y − w·x)²]
	n := 1 / meanVariance(c.Count, slowAlpha(alpha))
	s2 := res * n / max(n-1, 1)
	return w * x, math.Sqrt(s2 * (1 + x*x/(n*xx))), true
}

// blend combines e with another number on the same statement (secs, its
// spread sd in ln CPU), precision-weighted in ln CPU; the served Sigma is
// the smaller of the two (no narrower: the errors are not independent).
// On a cluster of an engine the model never saw, the text model's number
// (which reads the statement and the tables' sizes, not the engine's plan)
// is blended in too: until the engine's offset is learned it carries the
// estimate, then the model's shrinking spread takes over.
func blend(e *estimate.Estimate, secs, sd float64) {
	if !(e.CPUSeconds > 0) || !(secs > 0) {
		return
	}
	vm := max(e.Sigma*e.Sigma, sigmaFloor*sigmaFloor)
	vo := max(sd*sd, sigmaFloor*sigmaFloor)
	w := vm / (vm + vo) // the other number's weight
	e.CPUSeconds = math.Exp((1-w)*math.Log(e.CPUSeconds) + w*math.Log(secs))
	e.Sigma = math.Sqrt(min(vm, vo))
}

// correct turns the model's raw estimate into the cascade's: the global
// offset (shrunk toward 0), then the shape's residual (shrunk toward the
// global offset), with the uncertainty of each; per target the model
// predicts (correctTargets).
func (s *Service) correct(v *reads, e *estimate.Estimate, b *Basis, sigma0 float64) {
	e.ModelCPUSeconds, e.Source = e.CPUSeconds, estimate.SourceModel
	e.Sigma = sigma0
	if b == nil {
		return
	}
	b.Source = estimate.SourceModel
	s.correctTargets(v, e, b, keyModel, keyResidual, keyFamRes, &b.ModelBy, false)
	if !(e.CPUSeconds > 0) {
		return
	}
	lnRaw := math.Log(e.CPUSeconds)
	b.LnModel = lnRaw
	off, sigma, shaped := s.modelOffset(v, b, sigma0)
	if shaped {
		e.Source = estimate.SourceModelResidual
	}
	e.CPUSeconds, e.Sigma = math.Exp(lnRaw+off), sigma
	b.Source = e.Source
}
