package estimator

import (
	"math"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/history"
)

// Targets: the cascade keeps a value per target (estimate.Target: the CPU
// time, the peak memory, the elapsed time). The history, the residual
// calibrations and the repeats' noise are the CPU time's, repeated per
// target under the target's own keys (targetKey); a stage that sets a
// target's Quantity gets it calibrated (correctTargets), tempered by the
// statement's own runs (temper) and checked against the target's decision
// bounds (CascadeOptions.Bounds) without knowing which target it is. The
// optimizer's calibration (Trino's cpuCost) stays the CPU time's.

// numTargets is the number of targets (estimate.Targets).
const numTargets = len(estimate.Targets)

// targetKey is key's history key for target t: key itself for the CPU
// time (the keys written before targets beyond CPU existed read as they
// did), key + "/" + the target's label for the others. A statement's
// digest keys have a fixed length, so no suffixed key is another's.
func targetKey(key string, t estimate.Target) string {
	if t == estimate.TargetCPU {
		return key
	}
	return key + "/" + t.String()
}

// runs are a statement's (or a shape's) statistics per target, indexed by
// estimate.Target: Count 0 where none are recorded.
type runs [numTargets]history.Stats

// readRuns reads key's statistics for every target in one store call
// (history.GetMany: one MGET on Redis).
func (l *learner) readRuns(key string) (rs runs) {
	var keys [numTargets]string
	for _, t := range estimate.Targets {
		keys[t] = targetKey(key, t)
	}
	st, ok := history.GetMany(l.store, keys[:]...)
	for i := range rs {
		if ok[i] {
			rs[i] = st[i]
		}
	}
	return rs
}

// lnModel is ln of the model's raw number for target t, NaN when the
// model did not predict it (or did not run).
func (b *Basis) lnModel(t estimate.Target) float64 {
	if t == estimate.TargetCPU {
		return b.LnModel
	}
	return lnOrNaN(b.ModelBy[t])
}

// lnText is lnModel for the text stage's raw number.
func (b *Basis) lnText(t estimate.Target) float64 {
	if t == estimate.TargetCPU {
		return b.LnText
	}
	return lnOrNaN(b.TextBy[t])
}

func lnOrNaN(v float64) float64 {
	if !(v > 0) || math.IsInf(v, 0) {
		return math.NaN()
	}
	return math.Log(v)
}

// beyondCPU lists the targets other than the CPU time.
var beyondCPU = estimate.Targets[1:]

// correctTargets applies what the history learned of a stage (the model:
// keyModel and keyResidual; the text model: keyText and keyTextRes) to
// the targets beyond CPU that the stage's raw estimate e sets (family: the
// prefix of the family's residuals, offset's fallback), as correct
// and correctText do for the CPU time: the global offset (shrunk toward
// 0), then the shape's residual (shrunk toward it), the σ the stage gave
// as the prior of their spread. raw records each raw median in b
// (Basis.ModelBy or TextBy) so that the query's outcome teaches them.
// atLeastPrior keeps at least the stage's own σ until the shape has
// residuals (the text stage's rule).
func (s *Service) correctTargets(v *reads, e *estimate.Estimate, b *Basis, global, residual, family string, raw *[numTargets]float64, atLeastPrior bool) {
	if b == nil {
		return
	}
	for _, t := range beyondCPU {
		q := e.Of(t)
		if !q.Known() {
			continue
		}
		raw[t] = q.Median
		off, sigma, shaped := s.offset(v, targetKey(globalKey(global, b.Engine), t), b.residualKeys(residual, family, t), q.Sigma)
		if atLeastPrior && !shaped {
			sigma = max(sigma, q.Sigma)
		}
		e.Set(t, estimate.Quantity{Median: q.Median * math.Exp(off), Sigma: max(sigma, sigmaFloor)})
	}
}
