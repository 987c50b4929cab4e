package featurize

import (
	"errors"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

func TestNormalizeTable(t *testing.T) {
	for in, want := range map[string]string{
		"tpch:tiny:orders":         "tpch.tiny.orders",
		"tpch:sf1:lineitem":        "tpch.sf1.lineitem",
		"tpcds:store_sales:sf1.0":  "tpcds.sf1.store_sales",
		"tpcds:store_sales:sf0.01": "tpcds.tiny.store_sales",
		"tpcds:item:sf100.0":       "tpcds.sf100.item",
		"hive:web:clicks":          "hive.web.clicks",
		"iceberg:tpch_tiny.lineitem$data@7784862346912668410 constraint on [shipdate]": "iceberg.tpch_tiny.lineitem",
		"memory:0 some extra words": "memory.0",
		"":                          "",
	} {
		if got := NormalizeTable(in); got != want {
			t.Errorf("NormalizeTable(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBuildOTPRules(t *testing.T) {
	build := func(t *testing.T, js string) string {
		t.Helper()
		p, err := plan.Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		root, err := BuildOTP(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkOTPShape(root); err != nil {
			t.Fatal(err)
		}
		return RenderOTP(root)
	}
	t.Run("ScanFilterProject splits into Project, Filter with PRED, TableScan", func(t *testing.T) {
		got := build(t, trinotest.Node("1", "ScanFilterProject", map[string]string{"table": "tpch:tiny:orders", "filterPredicate": "(totalprice > double '1000.0')"}))
		want := "OPR Project\n  OPR Filter\n    OPR TableScan\n      TBL tpch.tiny.orders\n      ∅\n    PRED [totalprice >]\n  ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("a join keeps its children, distribution and criteria", func(t *testing.T) {
		got := build(t, trinotest.Node("1", "LeftJoin", map[string]string{"criteria": "(a = b_1)", "filter": "(c_2 <> d)", "distribution": "PARTITIONED"},
			trinotest.Node("2", "Values", nil), trinotest.Node("3", "Values", nil)))
		want := "OPR LeftJoin(PARTITIONED) on AND([a b =], [c d <>])\n  OPR Values\n    ∅\n    ∅\n  OPR Values\n    ∅\n    ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("more than two children chain left-deep; unknown operators are kept", func(t *testing.T) {
		got := build(t, trinotest.Node("1", "Union", nil, trinotest.Node("2", "FancyNewNode", nil), trinotest.Node("3", "Values", nil), trinotest.Node("4", "Values", nil)))
		want := "OPR Union\n  OPR Union\n    OPR FancyNewNode\n      ∅\n      ∅\n    OPR Values\n      ∅\n      ∅\n  OPR Values\n    ∅\n    ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("FilterProject over a child and an empty predicate", func(t *testing.T) {
		got := build(t, trinotest.Node("1", "FilterProject", map[string]string{"filterPredicate": ""}, trinotest.Node("2", "TableScan", map[string]string{"table": "tpch:tiny:nation"})))
		want := "OPR Project\n  OPR Filter\n    OPR TableScan\n      TBL tpch.tiny.nation\n      ∅\n    ∅\n  ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("an unparseable predicate keeps its identifiers and the error", func(t *testing.T) {
		p, _ := plan.Parse([]byte(trinotest.Node("1", "Filter", map[string]string{"filterPredicate": "(a = = b"}, trinotest.Node("2", "Values", nil))))
		root, _ := BuildOTP(p)
		pr := root.Right
		if pr.Kind != OTPPredicate || pr.PredErr == nil || pr.Value != "[a b ?]" {
			t.Errorf("got %s %q %v", pr.Kind, pr.Value, pr.PredErr)
		}
	})
}

func TestOTPSizeIsExact(t *testing.T) {
	for _, f := range planFiles(t)[:40] {
		p, root := loadOTP(t, f)
		if got, want := otpSize(p.Root), Stats(root).Nodes; got != want {
			t.Errorf("%s: otpSize %d, tree has %d", f, got, want)
		}
	}
}

func TestEstimatesFollowSplitPieces(t *testing.T) {
	js := `{"id": "1", "name": "ScanFilterProject", "descriptor": {"table": "tpch:tiny:orders", "filterPredicate": "(a = 1)"},
	  "estimates": [{"outputRowCount": 100, "outputSizeInBytes": 1, "cpuCost": 1, "memoryCost": 0, "networkCost": 0},
	                {"outputRowCount": 10, "outputSizeInBytes": 1, "cpuCost": 2, "memoryCost": 0, "networkCost": 0},
	                {"outputRowCount": "NaN", "outputSizeInBytes": 1, "cpuCost": 3, "memoryCost": 0, "networkCost": 0}]}`
	p, err := plan.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := BuildOTP(p)
	project, filter, scan := root, root.Left, root.Left.Left
	for _, c := range []struct {
		n    *OTPNode
		want float64
	}{{scan, 1}, {filter, 2}, {project, 3}} {
		e, ok := c.n.Estimate()
		if !ok || e.CPUCost != c.want {
			t.Errorf("%s: %+v %v, want cpuCost %v", c.n.Value, e, ok, c.want)
		}
	}
	if e, _ := project.Estimate(); !math.IsNaN(e.OutputRowCount) {
		t.Errorf("NaN lost: %+v", e)
	}
	if _, ok := scan.Left.Estimate(); ok {
		t.Error("a TBL node has an estimate")
	}
}

// TestOTPOfStitchedFragments: fragments stitched at a RemoteSource in listed
// order (plan's TestParsePlanShapes) keep that order in the O-T-P tree.
func TestOTPOfStitchedFragments(t *testing.T) {
	js := `{"0": ` + trinotest.Node("1", "Output", nil, trinotest.Node("2", "RemoteSource", map[string]string{"sourceFragmentIds": "[2, 1]"})) +
		`, "1": ` + trinotest.Node("3", "TableScan", map[string]string{"table": "tpch:tiny:nation"}) +
		`, "2": ` + trinotest.Node("4", "TableScan", map[string]string{"table": "tpcds:item:sf1.0"}) + `}`
	p, err := plan.Parse([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := BuildOTP(p)
	want := "OPR Output\n  OPR RemoteSource\n    OPR TableScan\n      TBL tpcds.sf1.item\n      ∅\n    OPR TableScan\n      TBL tpch.tiny.nation\n      ∅\n  ∅\n"
	if got := RenderOTP(root); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestDynamicFilterClauses: on a real plan (tpcds q03 at sf1: date_dim and
// store_sales wait for dynamic filters), the DynamicFilters reading adds a
// clause per dynamic filter to the scan's PRED, beside its own predicate or
// alone; without it the tree is BuildOTP's.
func TestDynamicFilterClauses(t *testing.T) {
	p, plain := loadOTP(t, filepath.Join(trinotest.ExplainDir, "tpcds-q03-sf1.json"))
	root, err := BuildOTPWith(p, TreeOptions{DynamicFilters: true})
	if err != nil {
		t.Fatal(err)
	}
	scanPreds := func(r *OTPNode) map[string]string {
		out := map[string]string{}
		r.Walk(func(n *OTPNode) {
			if n.Kind == OTPOperator && n.Value == "Filter" && n.Left.Kind == OTPOperator && n.Left.Value == "TableScan" {
				out[n.Left.Left.Value] = n.Right.Value
			}
		})
		return out
	}
	got, base := scanPreds(root), scanPreds(plain)
	want := map[string]string{
		"tpcds.sf1.date_dim":    "AND([d_moy =], [d_date_sk DYNAMIC])",
		"tpcds.sf1.store_sales": "[ss_item_sk DYNAMIC]",
	}
	for table, w := range want {
		if got[table] != w {
			t.Errorf("%s: PRED %q, want %q", table, got[table], w)
		}
	}
	if base["tpcds.sf1.date_dim"] != "[d_moy =]" || base["tpcds.sf1.store_sales"] != "" {
		t.Errorf("without the reading: %q", base)
	}
	if RenderOTP(root) == RenderOTP(plain) {
		t.Error("the reading left the tree as it was")
	}
	if got := slices.Collect(dynamicFilterColumns("{ws_sold_date_sk_398 = #df_5976, ws_item_sk_401 = #df_5977}")); !slices.Equal(got, []string{"ws_sold_date_sk", "ws_item_sk"}) {
		t.Errorf("dynamicFilterColumns: %q", got)
	}
	if got := slices.Collect(dynamicFilterColumns("{acctbal_12 > #df_1237}")); !slices.Equal(got, []string{"acctbal"}) {
		t.Errorf("dynamicFilterColumns of a range filter: %q", got)
	}
	// A descriptor that names a dynamic filter but no column: the scan's
	// own predicate alone (here none), not a panic.
	for _, d := range []string{"{#df_1}", "{ = #df_1}", "{x #df_1}"} {
		b := otpBuilder{preds: predParserPool.Get().(*predParser), tree: TreeOptions{DynamicFilters: true}}
		n := &plan.PlanNode{Name: "ScanFilter", Descriptor: map[string]string{"table": "t:s:x", "dynamicFilters": d}}
		if o := b.scanPred(n); o.Kind != OTPEmpty {
			t.Errorf("%q: PRED %s %q, want ∅", d, o.Kind, o.Value)
		}
		b.preds.release()
	}
	if got := slices.Collect(dynamicFilterColumns("{}")); got != nil {
		t.Errorf("dynamicFilterColumns({}): %q", got)
	}
}

func TestParseTreeFeatures(t *testing.T) {
	o, err := ParseTreeFeatures([]string{TreeFeatureDynamicFilters})
	if err != nil || !o.DynamicFilters || !slices.Equal(o.Names(), []string{"dynamic_filters"}) {
		t.Fatalf("%+v %v", o, err)
	}
	if o, err := ParseTreeFeatures(nil); err != nil || o != (TreeOptions{}) || o.Names() != nil {
		t.Fatalf("%+v %v", o, err)
	}
	if _, err := ParseTreeFeatures([]string{"dynamic_filters", "bloom"}); !errors.Is(err, ErrTreeFeature) {
		t.Fatalf("an unknown feature: %v", err)
	}
}
