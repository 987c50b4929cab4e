package estimator

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func node(id, name string, desc map[string]string, children ...string) string {
	var d []string
	for k, v := range desc {
		d = append(d, fmt.Sprintf("%q: %q", k, v))
	}
	return fmt.Sprintf(`{"id": %q, "name": %q, "descriptor": {%s}, "outputs": [], "details": [], "estimates": [], "children": [%s]}`,
		id, name, strings.Join(d, ", "), strings.Join(children, ", "))
}

func TestParsePlanShapes(t *testing.T) {
	t.Run("NaN strings, old {symbol,type} outputs and unknown keys are read", func(t *testing.T) {
		js := `{"0": {"id": "1", "name": "Output", "descriptor": {"columnNames": "[a]", "hash": "[]", "n": 3},
		  "outputs": [{"symbol": "a", "type": "bigint"}, {"type": "varchar", "name": "b"}],
		  "details": ["x := y"], "estimates": [{"outputRowCount": "NaN", "outputSizeInBytes": 10.5, "cpuCost": "Infinity", "memoryCost": 0.0}],
		  "children": [], "someFutureKey": {"nested": [1, 2]}}}`
		p, err := ParsePlan([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		n := p.Root
		if n.Outputs[0] != (Symbol{"a", "bigint"}) || n.Outputs[1] != (Symbol{"b", "varchar"}) {
			t.Errorf("outputs %v", n.Outputs)
		}
		e := n.Estimates[0]
		if !math.IsNaN(e.OutputRowCount) || e.OutputSizeInBytes != 10.5 || !math.IsInf(e.CPUCost, 1) || e.MemoryCost != 0 || !math.IsNaN(e.NetworkCost) {
			t.Errorf("estimates %+v", e)
		}
		if n.Descriptor["n"] != "3" || n.Descriptor["hash"] != "[]" {
			t.Errorf("descriptor %v", n.Descriptor)
		}
	})
	t.Run("a logical plan (single root node) is read", func(t *testing.T) {
		p, err := ParsePlan([]byte(node("1", "Output", nil, node("2", "TableScan", map[string]string{"table": "tpch:tiny:nation"}))))
		if err != nil || p.Nodes != 2 || p.Fragments != nil {
			t.Fatalf("%v %+v", err, p)
		}
	})
	t.Run("fragments are stitched at RemoteSource in listed order", func(t *testing.T) {
		js := `{"0": ` + node("1", "Output", nil, node("2", "RemoteSource", map[string]string{"sourceFragmentIds": "[2, 1]"})) +
			`, "1": ` + node("3", "TableScan", map[string]string{"table": "tpch:tiny:nation"}) +
			`, "2": ` + node("4", "TableScan", map[string]string{"table": "tpcds:item:sf1.0"}) + `}`
		p, err := ParsePlan([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		rs := p.Root.Children[0]
		if len(rs.Children) != 2 || rs.Children[0].ID != "4" || rs.Children[1].ID != "3" || p.Nodes != 4 {
			t.Fatalf("stitched wrong: %+v", rs)
		}
		root, _ := BuildOTP(p)
		want := "OPR Output\n  OPR RemoteSource\n    OPR TableScan\n      TBL tpcds.sf1.item\n      ∅\n    OPR TableScan\n      TBL tpch.tiny.nation\n      ∅\n  ∅\n"
		if got := RenderOTP(root); got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
}

func TestParsePlanBadInput(t *testing.T) {
	rs := func(ids string) string { return node("9", "RemoteSource", map[string]string{"sourceFragmentIds": ids}) }
	cases := []struct {
		name string
		js   string
		want error
	}{
		{"invalid JSON", `{"0": {"id": "1", "name": `, ErrBadPlan},
		{"not an object", `[1, 2]`, ErrBadPlan},
		{"empty input", ``, ErrBadPlan},
		{"no fragments", `{}`, ErrBadPlan},
		{"no root fragment", `{"1": ` + node("1", "Output", nil) + `}`, ErrBadPlan},
		{"a node without a name", `{"0": {"id": "1"}}`, ErrBadPlan},
		{"children of the wrong type", `{"0": {"id": "1", "name": "X", "children": {"a": 1}}}`, ErrBadPlan},
		{"a fragment naming itself", `{"0": ` + node("1", "Output", nil, rs("[0]")) + `}`, ErrPlanCycle},
		{"a cycle between fragments", `{"0": ` + node("1", "Output", nil, rs("[1]")) + `, "1": ` + node("2", "Filter", nil, rs("[2]")) + `, "2": ` + node("3", "Filter", nil, rs("[1]")) + `}`, ErrPlanCycle},
		{"an unknown fragment", `{"0": ` + node("1", "Output", nil, rs("[7]")) + `}`, ErrUnknownFragment},
		{"a fragment used twice", `{"0": ` + node("1", "Union", nil, rs("[1]"), rs("[1]")) + `, "1": ` + node("2", "Values", nil) + `}`, ErrBadPlan},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := ParsePlan([]byte(c.js))
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if !strings.HasPrefix(err.Error(), "estimator: ") {
				t.Errorf("error lacks the package prefix: %v", err)
			}
		})
	}
}

// bigPlan returns a valid plan JSON of about size bytes: a fragment "0" whose
// RemoteSource names many small fragments.
func bigPlan(size int) []byte {
	var b bytes.Buffer
	leaf := node("x", "ScanFilterProject", map[string]string{"table": "tpch:tiny:orders", "filterPredicate": "(totalprice > double '1000.0')"})
	n := size/(len(leaf)+12) + 1
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
	}
	b.WriteString(`{"0": ` + node("1", "Output", nil, node("2", "RemoteSource", map[string]string{"sourceFragmentIds": "[" + strings.Join(ids, ", ") + "]"})))
	for _, id := range ids {
		fmt.Fprintf(&b, `, %q: %s`, id, leaf)
	}
	b.WriteString("}")
	return b.Bytes()
}

func TestParsePlan50MB(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB plan")
	}
	js := bigPlan(50 << 20)
	t.Run("the byte limit gives a clear error", func(t *testing.T) {
		_, err := ParsePlanLimits(js, Limits{MaxBytes: 10 << 20})
		if !errors.Is(err, ErrPlanTooLarge) || !strings.Contains(err.Error(), "limit 10485760") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the node limit gives a clear error", func(t *testing.T) {
		start := time.Now()
		_, err := ParsePlan(js)
		if !errors.Is(err, ErrPlanTooLarge) || !strings.Contains(err.Error(), "nodes") {
			t.Fatalf("got %v", err)
		}
		t.Logf("rejected %d MB in %s", len(js)>>20, time.Since(start))
	})
	t.Run("deep nesting is refused by the JSON decoder, not a crash", func(t *testing.T) {
		deep := strings.Repeat(`{"id":"1","name":"F","children":[`, 20000) + strings.Repeat(`]}`, 20000)
		_, err := ParsePlan([]byte(`{"0":` + deep + `}`))
		if !errors.Is(err, ErrBadPlan) {
			t.Fatalf("got %v", err)
		}
	})
}

func TestNormalizeTable(t *testing.T) {
	for in, want := range map[string]string{
		"tpch:tiny:orders":          "tpch.tiny.orders",
		"tpch:sf1:lineitem":         "tpch.sf1.lineitem",
		"tpcds:store_sales:sf1.0":   "tpcds.sf1.store_sales",
		"tpcds:store_sales:sf0.01":  "tpcds.tiny.store_sales",
		"tpcds:item:sf100.0":        "tpcds.sf100.item",
		"hive:web:clicks":           "hive.web.clicks",
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
		p, err := ParsePlan([]byte(js))
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
		got := build(t, node("1", "ScanFilterProject", map[string]string{"table": "tpch:tiny:orders", "filterPredicate": "(totalprice > double '1000.0')"}))
		want := "OPR Project\n  OPR Filter\n    OPR TableScan\n      TBL tpch.tiny.orders\n      ∅\n    PRED [totalprice >]\n  ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("a join keeps its children, distribution and criteria", func(t *testing.T) {
		got := build(t, node("1", "LeftJoin", map[string]string{"criteria": "(a = b_1)", "filter": "(c_2 <> d)", "distribution": "PARTITIONED"},
			node("2", "Values", nil), node("3", "Values", nil)))
		want := "OPR LeftJoin(PARTITIONED) on AND([a b =], [c d <>])\n  OPR Values\n    ∅\n    ∅\n  OPR Values\n    ∅\n    ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("more than two children chain left-deep; unknown operators are kept", func(t *testing.T) {
		got := build(t, node("1", "Union", nil, node("2", "FancyNewNode", nil), node("3", "Values", nil), node("4", "Values", nil)))
		want := "OPR Union\n  OPR Union\n    OPR FancyNewNode\n      ∅\n      ∅\n    OPR Values\n      ∅\n      ∅\n  OPR Values\n    ∅\n    ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("FilterProject over a child and an empty predicate", func(t *testing.T) {
		got := build(t, node("1", "FilterProject", map[string]string{"filterPredicate": ""}, node("2", "TableScan", map[string]string{"table": "tpch:tiny:nation"})))
		want := "OPR Project\n  OPR Filter\n    OPR TableScan\n      TBL tpch.tiny.nation\n      ∅\n    ∅\n  ∅\n"
		if got != want {
			t.Errorf("got\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("an unparseable predicate keeps its identifiers and the error", func(t *testing.T) {
		p, _ := ParsePlan([]byte(node("1", "Filter", map[string]string{"filterPredicate": "(a = = b"}, node("2", "Values", nil))))
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
	p, err := ParsePlan([]byte(js))
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
