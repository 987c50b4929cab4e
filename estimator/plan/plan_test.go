package plan

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
)

func TestParsePlanShapes(t *testing.T) {
	t.Run("NaN strings, old {symbol,type} outputs and unknown keys are read", func(t *testing.T) {
		js := `{"0": {"id": "1", "name": "Output", "descriptor": {"columnNames": "[a]", "hash": "[]", "n": 3},
		  "outputs": [{"symbol": "a", "type": "bigint"}, {"type": "varchar", "name": "b"}],
		  "details": ["x := y"], "estimates": [{"outputRowCount": "NaN", "outputSizeInBytes": 10.5, "cpuCost": "Infinity", "memoryCost": 0.0}],
		  "children": [], "someFutureKey": {"nested": [1, 2]}}}`
		p, err := Parse([]byte(js))
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
		p, err := Parse([]byte(trinotest.Node("1", "Output", nil, trinotest.Node("2", "TableScan", map[string]string{"table": "tpch:tiny:nation"}))))
		if err != nil || p.Nodes != 2 || p.Fragments != nil {
			t.Fatalf("%v %+v", err, p)
		}
	})
	t.Run("fragments are stitched at RemoteSource in listed order", func(t *testing.T) {
		js := `{"0": ` + trinotest.Node("1", "Output", nil, trinotest.Node("2", "RemoteSource", map[string]string{"sourceFragmentIds": "[2, 1]"})) +
			`, "1": ` + trinotest.Node("3", "TableScan", map[string]string{"table": "tpch:tiny:nation"}) +
			`, "2": ` + trinotest.Node("4", "TableScan", map[string]string{"table": "tpcds:item:sf1.0"}) + `}`
		p, err := Parse([]byte(js))
		if err != nil {
			t.Fatal(err)
		}
		rs := p.Root.Children[0]
		if len(rs.Children) != 2 || rs.Children[0].ID != "4" || rs.Children[1].ID != "3" || p.Nodes != 4 {
			t.Fatalf("stitched wrong: %+v", rs)
		}
		// The O-T-P tree of this plan: featurize's TestOTPOfStitchedFragments.
	})
}

func TestParsePlanBadInput(t *testing.T) {
	rs := func(ids string) string {
		return trinotest.Node("9", "RemoteSource", map[string]string{"sourceFragmentIds": ids})
	}
	cases := []struct {
		name string
		js   string
		want error
	}{
		{"invalid JSON", `{"0": {"id": "1", "name": `, ErrBadPlan},
		{"not an object", `[1, 2]`, ErrBadPlan},
		{"empty input", ``, ErrBadPlan},
		{"no fragments", `{}`, ErrBadPlan},
		{"no root fragment", `{"1": ` + trinotest.Node("1", "Output", nil) + `}`, ErrBadPlan},
		{"a node without a name", `{"0": {"id": "1"}}`, ErrBadPlan},
		{"children of the wrong type", `{"0": {"id": "1", "name": "X", "children": {"a": 1}}}`, ErrBadPlan},
		{"a fragment naming itself", `{"0": ` + trinotest.Node("1", "Output", nil, rs("[0]")) + `}`, ErrPlanCycle},
		{"a cycle between fragments", `{"0": ` + trinotest.Node("1", "Output", nil, rs("[1]")) + `, "1": ` + trinotest.Node("2", "Filter", nil, rs("[2]")) + `, "2": ` + trinotest.Node("3", "Filter", nil, rs("[1]")) + `}`, ErrPlanCycle},
		{"an unknown fragment", `{"0": ` + trinotest.Node("1", "Output", nil, rs("[7]")) + `}`, ErrUnknownFragment},
		{"a fragment used twice", `{"0": ` + trinotest.Node("1", "Union", nil, rs("[1]"), rs("[1]")) + `, "1": ` + trinotest.Node("2", "Values", nil) + `}`, ErrBadPlan},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.js))
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
	leaf := trinotest.Node("x", "ScanFilterProject", map[string]string{"table": "tpch:tiny:orders", "filterPredicate": "(totalprice > double '1000.0')"})
	n := size/(len(leaf)+12) + 1
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprint(i + 1)
	}
	b.WriteString(`{"0": ` + trinotest.Node("1", "Output", nil, trinotest.Node("2", "RemoteSource", map[string]string{"sourceFragmentIds": "[" + strings.Join(ids, ", ") + "]"})))
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
		_, err := ParseLimits(js, Limits{MaxBytes: 10 << 20})
		if !errors.Is(err, ErrPlanTooLarge) || !strings.Contains(err.Error(), "limit 10485760") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("the node limit gives a clear error", func(t *testing.T) {
		start := time.Now()
		_, err := Parse(js)
		if !errors.Is(err, ErrPlanTooLarge) || !strings.Contains(err.Error(), "nodes") {
			t.Fatalf("got %v", err)
		}
		t.Logf("rejected %d MB in %s", len(js)>>20, time.Since(start))
	})
	t.Run("deep nesting is refused by the JSON decoder, not a crash", func(t *testing.T) {
		deep := strings.Repeat(`{"id":"1","name":"F","children":[`, 20000) + strings.Repeat(`]}`, 20000)
		_, err := Parse([]byte(`{"0":` + deep + `}`))
		if !errors.Is(err, ErrBadPlan) {
			t.Fatalf("got %v", err)
		}
	})
}
