package onnx

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/internal/prestotest"
	"github.com/prestroid/prestroid/internal/dialect"
)

// TestDefaultBundleOnPresto estimates PrestoDB queries end to end: the
// Service EXPLAINs on the live PrestoDB in its dialect, and the bundled
// model reads the plan as it reads Trino's.
func TestDefaultBundleOnPresto(t *testing.T) {
	server := prestotest.URL(t)
	rt := runtime(t)
	m := loadFixture(t, rt, copyDefault(t))
	svc := estimator.NewService(m, estimator.ServiceOptions{Workers: 1, History: history.NewMemory(100),
		Cascade: estimator.CascadeOptions{MinCount: 2, MaxSpread: 0.5, Shrink: 1, ModelSigma: 1}})
	defer svc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := prestotest.UserHeader("prestroid-e2e")
	const sql = "SELECT l.returnflag, sum(l.extendedprice) FROM tpch.%s.lineitem l JOIN tpch.%s.orders o ON l.orderkey = o.orderkey WHERE o.orderdate < DATE '1995-01-01' GROUP BY 1"
	cpu := map[string]float64{}
	for _, scale := range []string{"tiny", "sf1"} {
		e, err := svc.EstimateFor(ctx, dialect.Presto, []string{server}, sprintf2(sql, scale), h)
		if err != nil {
			t.Fatalf("%s: %v", scale, err)
		}
		t.Logf("%s: %s %.4g CPU s (σ %.2f), model %s, tables %v, EXPLAIN %v (query %s)", scale, e.Source, e.CPUSeconds, e.Sigma, e.Model, e.Tables, e.Explain, e.ExplainQueryID)
		if !e.Estimated || e.Source != estimate.SourceModel || !(e.CPUSeconds > 0) || math.IsInf(e.CPUSeconds, 0) || e.ExplainQueryID == "" {
			t.Fatalf("%s: %+v", scale, e)
		}
		if b := estimator.UnmarshalBasis(e.Learn); b == nil || b.Engine != dialect.Presto || math.IsNaN(b.LnCost) || b.LnCost <= 0 {
			t.Errorf("%s: basis %+v: want PrestoDB's, with the plan's row cost", scale, b)
		}
		cpu[scale] = e.CPUSeconds
	}
	if !(cpu["sf1"] > cpu["tiny"]) {
		t.Errorf("sf1 %.4g s, tiny %.4g s: want sf1 dearer", cpu["sf1"], cpu["tiny"])
	}
}

func sprintf2(format, s string) string { return fmt.Sprintf(format, s, s) }
