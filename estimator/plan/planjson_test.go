package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
)

// TestPlanDecoderMatchesEncodingJSON decodes every captured Trino plan with
// the hand-written decoder and with encoding/json (generic values) and
// compares every node field, fragment by fragment, before stitching.
func TestPlanDecoderMatchesEncodingJSON(t *testing.T) {
	for f, b := range trinotest.Plans(t) {
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
		if _, err := Parse([]byte(s)); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	invalid := []string{
		`{"0":{"name":"X"}`, `{"0":{"name":"X"}}}`, `{"0":{"name":"X",}}`, `{"0":{"name":"X"} "1":{}}`,
		`{"0":{"name":"X","d":01}}`, `{"0":{"name":"X","d":1.}}`, `{"0":{"name":"X","d":.5}}`, `{"0":{"name":"X","d":1e}}`,
		`{"0":{"name":"X","d":tru}}`, `{"0":{"name":"X","d":"\x"}}`, "{\"0\":{\"name\":\"a\nb\"}}", `{"0":{"name":"X","d":"\u12"}}`,
		`{"0":{"name":"X","d":[1 2]}}`, `{"0":{name:"X"}}`, `{"0":{"name":"X"}} x`, "{\"0\":{\"name\":\"X\"}}\x00", `{"0":{"name":"X","d":"abc}}`,
	}
	for _, s := range invalid {
		if json.Valid([]byte(s)) {
			t.Fatalf("test case %s is valid JSON", s)
		}
		if _, err := Parse([]byte(s)); err == nil {
			t.Errorf("%s: accepted invalid JSON", s)
		}
	}
	// Escapes decode as encoding/json decodes them.
	p, err := Parse([]byte(valid[0]))
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
	if _, err := Parse([]byte(deep)); err == nil {
		t.Fatal("20,000 nested arrays accepted")
	}
}

// TestExactDecimalMatchesStrconv: the fast path gives bit for bit what
// strconv.ParseFloat gives, and declines what it cannot do exactly.
func TestExactDecimalMatchesStrconv(t *testing.T) {
	cases := []string{"0", "0.0", "-0.0", "63.0", "900.0", "1.5", "-2.25", "123456789012345", "12345678901234.5",
		"0.1", "0.3", "999999999999999", "0.00000000000001", ".5", "5.", "007"}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		digits := 1 + rng.IntN(15)
		var sb strings.Builder
		if rng.IntN(4) == 0 {
			sb.WriteByte('-')
		}
		dot := rng.IntN(digits + 1)
		for i := range digits {
			if i == dot && i > 0 {
				sb.WriteByte('.')
			}
			sb.WriteByte(byte('0' + rng.IntN(10)))
		}
		cases = append(cases, sb.String())
	}
	for _, s := range cases {
		got, ok := exactDecimal(s)
		want, err := strconv.ParseFloat(s, 64)
		if !ok || err != nil {
			t.Fatalf("%q: fast path ok=%v, strconv err=%v", s, ok, err)
		}
		if math.Float64bits(got) != math.Float64bits(want) {
			t.Fatalf("%q: fast path %v, strconv %v", s, got, want)
		}
	}
	for _, s := range []string{"", "-", ".", "1e5", "1.0E10", "NaN", "Infinity", "1234567890123456", "1.7976931348623157", "1.2.3", "0x10", "1_0", "+1"} {
		if v, ok := exactDecimal(s); ok {
			t.Errorf("%q: fast path took it as %v", s, v)
		}
	}
}

// TestPlanDecoderStringsAtEveryOffset: the word-at-a-time scan finds the
// byte that ends a string's plain part wherever it falls in a word.
func TestPlanDecoderStringsAtEveryOffset(t *testing.T) {
	for _, special := range []string{`\n`, `\"`, `\u00e9`, "é", "\xff", "\x01", "\x7f", "~", "!", "#", "[", "]"} {
		for at := range 20 {
			for pad := range 10 {
				val := strings.Repeat("a", at) + special + strings.Repeat("b", pad)
				doc := `{"0": {"id": "` + val + `", "name": "N"` + strings.Repeat(" ", at) + `}}`
				frags, _, _, err := decodePlanJSON([]byte(doc), Limits{MaxNodes: 10})
				var want map[string]map[string]string
				jerr := json.Unmarshal([]byte(doc), &want)
				if (err == nil) != (jerr == nil) {
					t.Fatalf("%q: decoder error %v, encoding/json error %v", doc, err, jerr)
				}
				if err == nil && frags["0"].ID != want["0"]["id"] {
					t.Fatalf("%q: id %q, encoding/json %q", doc, frags["0"].ID, want["0"]["id"])
				}
			}
		}
	}
}
