package estimator

import (
	"math"
	"net/http"
	"testing"

	"github.com/prestroid/prestroid/estimate"
)

func TestBasisRoundTripsItsUnknowns(t *testing.T) {
	// Real history keys are SHA-256 digests: bytes that are not UTF-8.
	exact, shape := HistoryKeys("SELECT count(*) FROM orders WHERE o_orderkey = 7", http.Header{"X-Trino-Catalog": {"tpch"}})
	for _, b := range []*Basis{
		{Exact: exact, Shape: shape, LnModel: 0.5, LnCost: math.NaN(), Source: estimate.SourceHistory},
		{Exact: "x:1", Shape: "s:2", LnModel: math.NaN(), LnCost: 1.5, Source: estimate.SourceOptimizer},
		{Exact: "x:3", Shape: "s:4", LnModel: -0.25, LnCost: math.NaN(), Source: estimate.SourceModel, Blend: &BlendPoint{LnModel: -0.1, LnOptimizer: -1.5}},
		{Source: estimate.SourceCheap, LnModel: math.NaN(), LnCost: math.NaN()},
		// Real keys are binary digests, not UTF-8.
		{Exact: "x:\xff\xfe\x00\x80", Shape: "s:\xc3\x28", LnModel: 1, LnCost: 2, Source: estimate.SourceModelResidual},
		{Exact: "x:5", Shape: "s:6", LnModel: math.NaN(), LnCost: math.NaN(), LnText: -2, Source: estimate.SourceText, Pending: "k-7"},
	} {
		got := UnmarshalBasis(MarshalBasis(b))
		same := func(a, b float64) bool { return a == b || (math.IsNaN(a) && math.IsNaN(b)) }
		if got == nil || got.Exact != b.Exact || got.Shape != b.Shape || got.Source != b.Source || got.Pending != b.Pending ||
			!same(got.LnModel, b.LnModel) || !same(got.LnCost, b.LnCost) || !same(got.LnText, b.LnText) ||
			(got.Blend == nil) != (b.Blend == nil) || (b.Blend != nil && *got.Blend != *b.Blend) {
			t.Errorf("%+v came back as %+v", b, got)
		}
	}
	if got := UnmarshalBasis(MarshalBasis(&Basis{Blend: &BlendPoint{LnModel: math.Inf(1)}})); got.Blend != nil {
		t.Errorf("a blend pair with an infinite number came back: %+v", got.Blend)
	}
	if MarshalBasis(nil) != nil || UnmarshalBasis(nil) != nil || UnmarshalBasis([]byte("{")) != nil {
		t.Error("nil or garbage must give nil")
	}
}
