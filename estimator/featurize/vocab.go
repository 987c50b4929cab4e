package featurize

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Vocabulary ids shared by every vocabulary (docs/design.md §2.5).
const (
	IDNone    int32 = 0 // no node, ∅, or a node of another kind
	IDUnknown int32 = 1 // a name not seen when the vocabulary was built
)

// Vocab maps operator or table names to ids: 0 is "none", 1 is "unknown",
// known names have ids 2, 3, ... in the order they were added. A Vocab is
// safe for concurrent lookups once it is no longer being added to.
type Vocab struct {
	names []string // names[id]; names[0] = "<none>", names[1] = "<unknown>"
	ids   map[string]int32
}

// NewVocab returns a vocabulary holding only "none" and "unknown".
func NewVocab() *Vocab {
	return &Vocab{names: []string{"<none>", "<unknown>"}, ids: map[string]int32{}}
}

// VocabFrom builds a vocabulary from names, sorted and de-duplicated so the
// ids do not depend on input order.
func VocabFrom(names []string) *Vocab {
	s := append([]string(nil), names...)
	sort.Strings(s)
	v := NewVocab()
	for _, n := range s {
		v.Add(n)
	}
	return v
}

// Add inserts name (if new) and returns its id. The empty string is IDNone.
func (v *Vocab) Add(name string) int32 {
	if name == "" {
		return IDNone
	}
	if id, ok := v.ids[name]; ok {
		return id
	}
	id := int32(len(v.names))
	v.names = append(v.names, name)
	v.ids[name] = id
	return id
}

// ID returns name's id: IDNone for "", IDUnknown when not in the vocabulary.
func (v *Vocab) ID(name string) int32 {
	if name == "" {
		return IDNone
	}
	if v == nil {
		return IDUnknown
	}
	if id, ok := v.ids[name]; ok {
		return id
	}
	return IDUnknown
}

// Name returns the name of id ("" when out of range).
func (v *Vocab) Name(id int32) string {
	if id < 0 || int(id) >= len(v.names) {
		return ""
	}
	return v.names[id]
}

// Len is the number of ids, reserved ones included (the embedding size).
func (v *Vocab) Len() int { return len(v.names) }

// MarshalJSON writes the vocabulary as a JSON array of names indexed by id
// (entries 0 and 1 are "<none>" and "<unknown>").
func (v *Vocab) MarshalJSON() ([]byte, error) { return json.Marshal(v.names) }

// UnmarshalJSON reads the array written by MarshalJSON.
func (v *Vocab) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("estimator: vocabulary: %w", err)
	}
	if len(names) < 2 || names[0] != "<none>" || names[1] != "<unknown>" {
		return fmt.Errorf("estimator: vocabulary: must start with \"<none>\", \"<unknown>\"")
	}
	nv := NewVocab()
	for _, n := range names[2:] {
		if _, dup := nv.ids[n]; dup || n == "" {
			return fmt.Errorf("estimator: vocabulary: empty or duplicate name %q", n)
		}
		nv.Add(n)
	}
	*v = *nv
	return nil
}

// BuildVocabs collects the operator and table names of O-T-P trees into two
// vocabularies (sorted, so the result is deterministic).
func BuildVocabs(trees []*OTPNode) (ops, tables *Vocab) {
	opSet, tblSet := map[string]struct{}{}, map[string]struct{}{}
	for _, root := range trees {
		root.Walk(func(n *OTPNode) {
			switch n.Kind {
			case OTPOperator:
				opSet[n.Value] = struct{}{}
			case OTPTable:
				tblSet[n.Value] = struct{}{}
			}
		})
	}
	keys := func(m map[string]struct{}) []string {
		out := make([]string, 0, len(m))
		for k := range m {
			out = append(out, k)
		}
		return out
	}
	return VocabFrom(keys(opSet)), VocabFrom(keys(tblSet))
}

// Walk calls f on every node of the tree rooted at n, pre-order, left
// before right; iterative, so deep plans cannot overflow the stack. It is
// the one O-T-P walker: featurization, training, statistics and tests all
// use it (or WalkDepth).
func (n *OTPNode) Walk(f func(*OTPNode)) { n.WalkDepth(func(n *OTPNode, _ int) { f(n) }) }

// WalkDepth is Walk with each node's depth below n (n itself is 0).
func (n *OTPNode) WalkDepth(f func(n *OTPNode, depth int)) { n.WalkTo(-1, f) }

// WalkTo is WalkDepth over the nodes at most maxDepth levels below n (all
// of them when maxDepth < 0).
func (n *OTPNode) WalkTo(maxDepth int, f func(n *OTPNode, depth int)) {
	if n == nil {
		return
	}
	type item struct {
		n *OTPNode
		d int
	}
	stack := []item{{n, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f(it.n, it.d)
		if it.d == maxDepth {
			continue
		}
		if it.n.Right != nil {
			stack = append(stack, item{it.n.Right, it.d + 1})
		}
		if it.n.Left != nil {
			stack = append(stack, item{it.n.Left, it.d + 1})
		}
	}
}
