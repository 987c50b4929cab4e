package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/prestotest"
)

// TestPrestoPlansMatchEncodingJSON decodes every captured PrestoDB plan
// with the hand-written decoder and checks it against encoding/json's
// reading of the same text: ids, operator names (the name up to its step
// and groups), children, remote sources, row counts and sizes, and no
// cost (PrestoDB gives none).
func TestPrestoPlansMatchEncodingJSON(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(prestotest.ExplainDir, "*.json"))
	if len(files) < 40 {
		t.Fatalf("want the captured PrestoDB plans in %s, found %d", prestotest.ExplainDir, len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, lean := range []bool{false, true} {
			frags, root, _, err := decodePlanJSON(b, Limits{MaxNodes: DefaultMaxPlanNodes, Lean: lean})
			if err != nil || root != nil {
				t.Fatalf("%s: decode: root=%v err=%v", f, root != nil, err)
			}
			var ref map[string]struct{ Plan map[string]any }
			if err := json.Unmarshal(b, &ref); err != nil {
				t.Fatal(err)
			}
			if len(ref) != len(frags) {
				t.Fatalf("%s: %d fragments, encoding/json %d", f, len(frags), len(ref))
			}
			for id, want := range ref {
				if err := samePrestoNode(frags[id], want.Plan, id, lean); err != nil {
					t.Fatalf("%s fragment %s (lean %v): %v", f, id, lean, err)
				}
			}
		}
		if _, err := Parse(b); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func samePrestoNode(n *PlanNode, want map[string]any, frag string, lean bool) error {
	name := want["name"].(string)
	if i := strings.IndexAny(name, "(["); i > 0 {
		name = name[:i]
	}
	if n.ID != want["id"].(string) || n.Name != name || n.Fragment != frag {
		return fmt.Errorf("node %v/%v: got %q/%q in fragment %q", want["id"], want["name"], n.ID, n.Name, n.Fragment)
	}
	var srcs []string
	for _, s := range want["remoteSources"].([]any) {
		srcs = append(srcs, s.(string))
	}
	if len(srcs) > 0 && n.Descriptor["sourceFragmentIds"] != "["+strings.Join(srcs, ", ")+"]" {
		return fmt.Errorf("node %s: sourceFragmentIds %q, want %v", n.ID, n.Descriptor["sourceFragmentIds"], srcs)
	}
	if details := want["details"].(string); !lean && strings.Join(n.Details, "\n") != strings.TrimRight(strings.ReplaceAll(details, "\n\n", "\n"), "\n") {
		return fmt.Errorf("node %s: details %q, want %q", n.ID, n.Details, details)
	}
	ests := want["estimates"].([]any)
	if len(ests) != len(n.Estimates) {
		return fmt.Errorf("node %s: %d estimates, want %d", n.ID, len(n.Estimates), len(ests))
	}
	for i, e := range ests {
		m := e.(map[string]any)
		got := n.Estimates[i]
		for k, v := range map[string]float64{"outputRowCount": got.OutputRowCount, "totalSize": got.OutputSizeInBytes} {
			w := math.NaN()
			switch x := m[k].(type) {
			case float64:
				w = x
			case string:
				w, _ = strconv.ParseFloat(x, 64)
			}
			if !(v == w || math.IsNaN(v) && math.IsNaN(w)) {
				return fmt.Errorf("node %s estimate %d %s: %v, want %v", n.ID, i, k, v, w)
			}
		}
		if !math.IsNaN(got.CPUCost) || !math.IsNaN(got.MemoryCost) || !math.IsNaN(got.NetworkCost) {
			return fmt.Errorf("node %s estimate %d: costs %+v, want unknown", n.ID, i, got)
		}
	}
	kids := want["children"].([]any)
	if len(kids) != len(n.Children) {
		return fmt.Errorf("node %s: %d children, want %d", n.ID, len(n.Children), len(kids))
	}
	for i, c := range kids {
		if err := samePrestoNode(n.Children[i], c.(map[string]any), frag, lean); err != nil {
			return err
		}
	}
	return nil
}

// prestoDoc is a one-fragment PrestoDB plan of the node given by its name,
// identifier and details.
func prestoDoc(name, ident, details string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return `{"0": {"plan": {"id": "1", "name": ` + q(name) + `, "identifier": ` + q(ident) + `, "details": ` + q(details) +
		`, "children": [], "remoteSources": [], "estimates": [{"outputRowCount": 15000.0, "totalSize": "NaN", "confident": "HIGH", "variableStatistics": {"a<bigint>": {"lowValue": 1.0}}}]}}}`
}

func TestPrestoNodeMapping(t *testing.T) {
	cases := []struct {
		name                 string
		node, ident, details string
		wantName             string
		want                 map[string]string
		wantLean             map[string]string
	}{
		{"an aggregate's step and groups become Trino's type, keys and hash",
			"Aggregate(FINAL)[orderpriority][$hashvalue]", "", "count := count(1)\n", "Aggregate",
			map[string]string{"type": "FINAL", "keys": "[orderpriority]", "hash": "[$hashvalue]"}, nil},
		{"a single-step aggregate has an empty type",
			"Aggregate[orderkey_3, orderdate]", "", "", "Aggregate",
			map[string]string{"type": "", "keys": "[orderkey_3, orderdate]", "hash": "[]"}, nil},
		{"a scan's table handle reads as Trino's connector:table:scale and its filter is kept",
			"ScanFilterProject", "[table = TableHandle {connectorId='tpch', connectorHandle='orders:sf0.01', layout='Optional[orders:sf0.01]'}, grouped = false, filterPredicate = (comment) NOT LIKE (VARCHAR'%a, b]%'), projectLocality = LOCAL]", "", "ScanFilterProject",
			map[string]string{"table": "tpch:orders:sf0.01", "grouped": "false", "filterPredicate": "(comment) NOT LIKE (VARCHAR'%a, b]%')", "projectLocality": "LOCAL"},
			map[string]string{"table": "tpch:orders:sf0.01", "filterPredicate": "(comment) NOT LIKE (VARCHAR'%a, b]%')"}},
		{"a bare TableScan's unnamed handle is its table",
			"TableScan", "[TableHandle {connectorId='tpch', connectorHandle='lineitem:sf1.0', layout='Optional[lineitem:sf1.0]'}, grouped = false]", "", "TableScan",
			map[string]string{"table": "tpch:lineitem:sf1.0", "grouped": "false"}, map[string]string{"table": "tpch:lineitem:sf1.0"}},
		{"an inner join's criteria, hash and distribution are Trino's keys",
			"InnerJoin", `[("orderkey" = "orderkey_92") AND (suppkey_94) <> (suppkey)][$hashvalue_213, $hashvalue_214]`, "Distribution: PARTITIONED\n", "InnerJoin",
			map[string]string{"criteria": `("orderkey" = "orderkey_92") AND (suppkey_94) <> (suppkey)`, "hash": "[$hashvalue_213, $hashvalue_214]", "distribution": "PARTITIONED"},
			map[string]string{"criteria": `("orderkey" = "orderkey_92") AND (suppkey_94) <> (suppkey)`, "distribution": "PARTITIONED"}},
		{"a semi-join gets no distribution, as on Trino",
			"SemiJoin", "[custkey = custkey_1][$hashvalue, $hashvalue_14]", "Distribution: REPLICATED\n", "SemiJoin",
			map[string]string{"criteria": "custkey = custkey_1", "hash": "[$hashvalue, $hashvalue_14]"}, map[string]string{"criteria": "custkey = custkey_1"}},
		{"a cross join has no criteria",
			"CrossJoin", "", "Distribution: REPLICATED\n", "CrossJoin", nil, nil},
		{"TopN's count and order",
			"TopN", "[10 by (sum DESC_NULLS_LAST, orderdate ASC_NULLS_LAST)]", "", "TopN",
			map[string]string{"count": "10", "orderBy": "(sum DESC_NULLS_LAST, orderdate ASC_NULLS_LAST)"}, nil},
		{"a new operator keeps its name and its identifier",
			"MarkDistinct", "[distinct=custkey:bigint marker=custkey_10]", "", "MarkDistinct",
			map[string]string{"identifier": "[distinct=custkey:bigint marker=custkey_10]"}, nil},
		{"a name with text after its groups is kept whole",
			"Odd[a]b", "", "", "Odd[a]b", nil, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, lean := range []bool{false, true} {
				p, err := ParseLimits([]byte(prestoDoc(c.node, c.ident, c.details)), Limits{Lean: lean})
				if err != nil {
					t.Fatal(err)
				}
				n := p.Root
				want := c.want
				if lean {
					want = c.wantLean
				}
				if n.Name != c.wantName || len(n.Descriptor) != len(want) {
					t.Fatalf("lean %v: %q %v, want %q %v", lean, n.Name, n.Descriptor, c.wantName, want)
				}
				for k, v := range want {
					if n.Descriptor[k] != v {
						t.Errorf("lean %v: %s = %q, want %q", lean, k, n.Descriptor[k], v)
					}
				}
				e := n.Estimates[0]
				if e.OutputRowCount != 15000 || !math.IsNaN(e.OutputSizeInBytes) || !math.IsNaN(e.CPUCost) {
					t.Errorf("estimate %+v", e)
				}
			}
		})
	}
}

func TestPrestoFragments(t *testing.T) {
	t.Run("remote sources stitch fragments as Trino's sourceFragmentIds do", func(t *testing.T) {
		doc := `{"0": {"plan": {"id": "9", "name": "Output", "identifier": "[a]", "details": "", "children": [
			{"id": "3", "name": "RemoteSource", "identifier": "[1, 2] ", "details": "", "children": [], "remoteSources": ["1", "2"], "estimates": []}],
			"remoteSources": [], "estimates": []}},
			"1": {"plan": {"id": "4", "name": "Values", "identifier": "", "details": "", "children": [], "remoteSources": [], "estimates": []}},
			"2": {"plan": {"id": "5", "name": "Values", "identifier": "", "details": "", "children": [], "remoteSources": [], "estimates": []}}}`
		p, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if p.Nodes != 4 || len(p.Root.Children[0].Children) != 2 || len(p.Unreferenced) != 0 {
			t.Fatalf("nodes %d, unreferenced %v", p.Nodes, p.Unreferenced)
		}
	})
	t.Run("a fragment without its plan is malformed", func(t *testing.T) {
		if _, err := Parse([]byte(`{"0": {"plan": null}}`)); err == nil {
			t.Fatal("accepted")
		}
	})
	t.Run("a fragment referring to itself is a cycle", func(t *testing.T) {
		doc := `{"0": {"plan": {"id": "1", "name": "RemoteSource", "identifier": "", "children": [], "remoteSources": ["0"]}}}`
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Fatalf("got %v", err)
		}
	})
}
