package estimator

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPlanDecoderMatchesEncodingJSON decodes every captured Trino plan with
// the hand-written decoder and with encoding/json (generic values) and
// compares every node field, fragment by fragment, before stitching.
func TestPlanDecoderMatchesEncodingJSON(t *testing.T) {
	files, _ := filepath.Glob("testdata/explain/*.json")
	bench, _ := filepath.Glob("testdata/bench/*.json")
	files = append(files, bench...)
	if len(files) < 200 {
		t.Fatalf("want the captured plans under testdata, found %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		frags, root, _, err := decodePlanJSON(b, Limits{MaxNodes: DefaultMaxPlanNodes})
		if err != nil || root != nil {
			t.Fatalf("%s: decode: root=%v err=%v", f, root != nil, err)
		}
		var ref map[string]map[string]any
		if err := json.Unmarshal(b, &ref); err != nil {
			t.Fatal(err)
		}
		if len(ref) != len(frags) {
			t.Fatalf("%s: %d fragments, encoding/json %d", f, len(frags), len(ref))
		}
		for id, want := range ref {
			if err := sameNode(frags[id], want, id); err != nil {
				t.Fatalf("%s fragment %s: %v", f, id, err)
			}
		}
	}
}

func sameNode(n *PlanNode, want map[string]any, frag string) error {
	str := func(k string) string { s, _ := want[k].(string); return s }
	if n.ID != str("id") || n.Name != str("name") || n.Fragment != frag {
		return fmt.Errorf("node %q/%q: got %q/%q in fragment %q", str("id"), str("name"), n.ID, n.Name, n.Fragment)
	}
	desc, _ := want["descriptor"].(map[string]any)
	if len(desc) != len(n.Descriptor) {
		return fmt.Errorf("node %s: %d descriptor keys, want %d", n.ID, len(n.Descriptor), len(desc))
	}
	for k, v := range desc {
		if n.Descriptor[k] != v.(string) {
			return fmt.Errorf("node %s descriptor %s: %q, want %q", n.ID, k, n.Descriptor[k], v)
		}
	}
	outs, _ := want["outputs"].([]any)
	if len(outs) != len(n.Outputs) {
		return fmt.Errorf("node %s: %d outputs, want %d", n.ID, len(n.Outputs), len(outs))
	}
	for i, o := range outs {
		m := o.(map[string]any)
		if n.Outputs[i].Name != m["name"].(string) || n.Outputs[i].Type != m["type"].(string) {
			return fmt.Errorf("node %s output %d: %+v, want %v", n.ID, i, n.Outputs[i], m)
		}
	}
	details, _ := want["details"].([]any)
	if len(details) != len(n.Details) {
		return fmt.Errorf("node %s: %d details, want %d", n.ID, len(n.Details), len(details))
	}
	for i, d := range details {
		if n.Details[i] != d.(string) {
			return fmt.Errorf("node %s detail %d: %q, want %q", n.ID, i, n.Details[i], d)
		}
	}
	ests, _ := want["estimates"].([]any)
	if len(ests) != len(n.Estimates) {
		return fmt.Errorf("node %s: %d estimates, want %d", n.ID, len(n.Estimates), len(ests))
	}
	for i, e := range ests {
		m := e.(map[string]any)
		got := n.Estimates[i]
		for k, v := range map[string]float64{"outputRowCount": got.OutputRowCount, "outputSizeInBytes": got.OutputSizeInBytes,
			"cpuCost": got.CPUCost, "memoryCost": got.MemoryCost, "networkCost": got.NetworkCost} {
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
	}
	kids, _ := want["children"].([]any)
	if len(kids) != len(n.Children) {
		return fmt.Errorf("node %s: %d children, want %d", n.ID, len(n.Children), len(kids))
	}
	for i, c := range kids {
		if err := sameNode(n.Children[i], c.(map[string]any), frag); err != nil {
			return err
		}
	}
	return nil
}

// TestPlanDecoderJSONGrammar: the decoder accepts exactly what encoding/json
// accepts as an object of plan nodes, on hand-picked edge cases.
func TestPlanDecoderJSONGrammar(t *testing.T) {
	valid := []string{
		`{"0":{"id":"1","name":"A\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t","descriptor":{"k":-0.5e+3,"b":true,"n":null,"o":{"x":[1,{}]}}}}`,
		"{\"0\":{\"name\":\"X\",\"details\":[\"caf\xc3\xa9\"],\"estimates\":[{\"cpuCost\":1E2},null]}}",
		`{"0":{"name":"X","outputs":null,"children":[],"extra":[[[]]]}}`,
	}
	for _, s := range valid {
		if _, err := ParsePlan([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	invalid := []string{
		`{"0":{"name":"X"}`, `{"0":{"name":"X"}}}`, `{"0":{"name":"X",}}`, `{"0":{"name":"X"} "1":{}}`,
		`{"0":{"name":"X","d":01}}`, `{"0":{"name":"X","d":1.}}`, `{"0":{"name":"X","d":.5}}`, `{"0":{"name":"X","d":1e}}`,
		`{"0":{"name":"X","d":tru}}`, `{"0":{"name":"X","d":"\x"}}`, "{\"0\":{\"name\":\"a\nb\"}}", `{"0":{"name":"X","d":"\u12"}}`,
		`{"0":{"name":"X","d":[1 2]}}`, `{"0":{name:"X"}}`, `{"0":{"name":"X"}} x`, `{"0":{"name":"X","d":"abc}}`,
	}
	for _, s := range invalid {
		if json.Valid([]byte(s)) {
			t.Fatalf("test case %s is valid JSON", s)
		}
		if _, err := ParsePlan([]byte(s)); err == nil {
			t.Errorf("%s: accepted invalid JSON", s)
		}
	}
	// Escapes decode as encoding/json decodes them.
	p, err := ParsePlan([]byte(valid[0]))
	if err != nil {
		t.Fatal(err)
	}
	var ref map[string]map[string]any
	_ = json.Unmarshal([]byte(valid[0]), &ref)
	if p.Root.Name != ref["0"]["name"] {
		t.Errorf("name %q, encoding/json %q", p.Root.Name, ref["0"]["name"])
	}
	if got := p.Root.Descriptor["o"]; got != `{"x":[1,{}]}` {
		t.Errorf("non-string descriptor value kept as %q", got)
	}
	if got := p.Root.Descriptor["n"]; got != "" {
		t.Errorf("null descriptor value %q", got)
	}
}

// TestPlanDecoderDeepNesting: nesting beyond the limit is an error, not a
// stack overflow.
func TestPlanDecoderDeepNesting(t *testing.T) {
	deep := `{"0":{"name":"X","d":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}}`
	if _, err := ParsePlan([]byte(deep)); err == nil {
		t.Fatal("20,000 nested arrays accepted")
	}
}
