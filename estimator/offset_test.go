package estimator

import (
	"fmt"
	"math"
	"net/http/httptest"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

// observeModel runs sql through the cascade (the model stand-in answering
// raw) and teaches it that the query cost actual.
func observeModel(t *testing.T, s *Service, url, sql string, raw *float64, r, actual float64) *estimate.Estimate {
	t.Helper()
	*raw = r
	e := estimateSQL(t, s, []string{url}, sql)
	s.Observe(basisOf(e), estimate.Actual{CPUSeconds: actual})
	s.Flush()
	return e
}

// The global offset held at 0 (its mean within two standard errors of 0)
// leaves the residuals' mean uncorrected: a new shape's interval is the
// residuals' spread around the offset applied (0), not around their mean,
// so it covers that mean too.
func TestOffsetSpreadIsAroundTheAppliedOffset(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	var raw float64
	s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) {
		return &estimate.Estimate{Estimated: true, CPUSeconds: raw}, nil
	})
	// Residuals ln actual − ln model: 0.3 ± 0.9, six of them. Their mean
	// is within two standard errors (2·0.9/√6 = 0.73) of 0: held at 0.
	res := []float64{1.2, -0.6, 1.2, -0.6, 1.2, -0.6}
	for i, d := range res {
		observeModel(t, s, srv.URL, fmt.Sprintf("SELECT * FROM t%d", i), &raw, 1, math.Exp(d))
	}
	raw = 1
	e := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM fresh")
	if e.Source != estimate.SourceModel || math.Abs(e.CPUSeconds-1) > 1e-12 {
		t.Fatalf("new shape: %s %.4f s; want the model's own 1 s (the offset held at 0)", e.Source, e.CPUSeconds)
	}
	n, k, sigma0 := float64(len(res)), defaults.Shrink, defaults.ModelSigma
	var ms float64 // the residuals' mean square around 0
	for _, d := range res {
		ms += d * d / n
	}
	// Served times the model stage's interval factor, which the six
	// outcomes taught (cover.go).
	c := factorFor(s, dialect.Trino, "model").Factor
	if want := c * math.Sqrt((n*ms+k*sigma0*sigma0)/(n+k)); math.Abs(e.Sigma-want) > 1e-9 {
		t.Fatalf("new shape's sigma %.4f; want %.4f, the residuals' RMS around the applied 0 shrunk toward %g (their spread around their mean alone: %.4f), times the factor %.4f",
			e.Sigma, want, sigma0, c*math.Sqrt((n*0.81+k*sigma0*sigma0)/(n+k)), c)
	}
}

// A shape's one residual far from the global offset is applied shrunk
// halfway (Shrink 1): what it leaves uncorrected widens the shape's
// interval, which would otherwise claim the global spread halved.
func TestShapeSpreadCoversTheShrunkResidual(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	var raw float64
	s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) {
		return &estimate.Estimate{Estimated: true, CPUSeconds: raw}, nil
	})
	// The model is right on average (residuals ±0.2: global offset held
	// at 0, spread 0.2 shrunk toward 1), then one shape's run is 4x over.
	for i := range 20 {
		observeModel(t, s, srv.URL, fmt.Sprintf("SELECT * FROM t%d", i), &raw, 1, math.Exp(0.2*float64(1-2*(i%2))))
	}
	observeModel(t, s, srv.URL, "SELECT * FROM big WHERE k = 1", &raw, 1, 4)
	e := observeModel(t, s, srv.URL, "SELECT * FROM big WHERE k = 2", &raw, 1, 4)
	if e.Source != estimate.SourceModelResidual {
		t.Fatalf("new literals: source %s; want model+residual", e.Source)
	}
	// The global residuals: the twenty ±0.2 and the shape's first run
	// (ln 4). Their mean, 0.066, is within two standard errors of 0: the
	// global offset stays 0, its spread² is their mean square shrunk
	// toward 1.
	d := math.Log(4)
	ms := (20*0.04 + d*d) / 21
	g2 := (21*ms + 1) / 22
	off := d / 2
	want := math.Sqrt(((d-off)*(d-off) + g2 + off*off) / 2)
	if math.Abs(math.Log(e.CPUSeconds)-off) > 1e-9 || math.Abs(e.Sigma-want) > 1e-9 {
		t.Fatalf("new literals: %.4f s, sigma %.4f; want %.4f s, sigma %.4f (not %.4f, the spread around the shape's mean)",
			e.CPUSeconds, e.Sigma, math.Exp(off), want, math.Sqrt(g2/2))
	}
	// Served at the shape's 80% interval, the run it learned from is inside.
	if lo, hi := e.Interval(); 4 < lo || 4 > hi {
		t.Fatalf("new literals: 80%% interval [%.3f, %.3f] leaves out the 4 s the shape just cost", lo, hi)
	}
}

// The global offset describes the deployment, not its last few
// statements: it is the mean of the residuals of every shape explained
// (recency weight globalAlpha), not of the last ~9 (the history's alpha).
func TestGlobalOffsetIsTheDeployments(t *testing.T) {
	srv := httptest.NewServer(&fakePlanner{})
	defer srv.Close()
	var raw float64
	s := newCascade(t, defaults, func([]byte) (*estimate.Estimate, error) {
		return &estimate.Estimate{Estimated: true, CPUSeconds: raw}, nil
	})
	// 30 new shapes 2x over the model, then 10 at it: the deployment's
	// mean residual is ¾·ln 2; the last ten alone say 0.
	for i := range 40 {
		a := 2.0
		if i >= 30 {
			a = 1
		}
		observeModel(t, s, srv.URL, fmt.Sprintf("SELECT * FROM t%d", i), &raw, 1, a)
	}
	raw = 1
	e := estimateSQL(t, s, []string{srv.URL}, "SELECT * FROM fresh")
	mean := 0.75 * math.Log(2)
	if want := 40 * mean / 41; math.Abs(math.Log(e.CPUSeconds)-want) > 1e-9 {
		t.Fatalf("new shape: %.4f s; want %.4f s, the mean of all 40 residuals shrunk by 40/41 (at the history's alpha 0.2: %.4f s)",
			e.CPUSeconds, math.Exp(want), math.Exp(math.Log(2)*math.Pow(0.8, 10)))
	}
}
