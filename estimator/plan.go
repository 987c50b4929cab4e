package estimator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Plan is a parsed `EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)` plan with its
// fragments stitched into one tree at their RemoteSource nodes.
type Plan struct {
	// Root is the root of fragment "0" (or the single node of a logical plan),
	// with every RemoteSource / RemoteMerge node's Children replaced by the
	// roots of the fragments it names in descriptor.sourceFragmentIds.
	Root *PlanNode
	// Fragments maps a fragment id to its root node (nil map for logical plans).
	Fragments map[string]*PlanNode
	// Nodes is the number of nodes in the stitched tree.
	Nodes int
	// Unreferenced lists fragment ids that no RemoteSource names (sorted); they
	// are not part of Root. Trino does not produce them; kept for diagnosis.
	Unreferenced []string
}

// PlanNode is one rendered plan node (Trino's JsonRenderedNode).
type PlanNode struct {
	ID         string
	Name       string            // e.g. "InnerJoin", "ScanFilterProject"; unknown names are kept
	Descriptor map[string]string // every value a string; non-string JSON values are kept as their JSON text
	Outputs    []Symbol
	Details    []string
	// Estimates has one entry per underlying plan node folded into this one
	// (ScanFilterProject: scan, filter, project); empty when all are unknown.
	Estimates []Estimate
	Children  []*PlanNode
	// Fragment is the id of the fragment the node belongs to ("" for logical plans).
	Fragment string
}

// Symbol is one output symbol. Trino ≥ 445 writes {"type","name"}; older
// releases wrote {"symbol","type"}: both are read.
type Symbol struct {
	Name string
	Type string
}

// Estimate holds the optimizer's estimates for one plan node. Unknown values
// (Trino writes the string "NaN") are math.NaN().
type Estimate struct {
	OutputRowCount    float64
	OutputSizeInBytes float64
	CPUCost           float64
	MemoryCost        float64
	NetworkCost       float64
}

// Limits bound the work ParsePlanLimits does on untrusted input.
type Limits struct {
	// MaxBytes is the largest plan JSON accepted. 0 means DefaultMaxPlanBytes.
	MaxBytes int64
	// MaxNodes is the largest stitched node count accepted. 0 means DefaultMaxPlanNodes.
	MaxNodes int
}

const (
	// DefaultMaxPlanBytes is the default plan size limit (also ExplainClient's).
	DefaultMaxPlanBytes = 64 << 20
	// DefaultMaxPlanNodes bounds the stitched tree. The largest TPC-DS plans
	// have a few hundred nodes; a UNION ALL of every TPC-DS query ~10,000.
	DefaultMaxPlanNodes = 200_000
)

// Errors returned (wrapped) by the plan parser; branch with errors.Is.
var (
	ErrPlanTooLarge    = errors.New("estimator: plan too large")
	ErrPlanCycle       = errors.New("estimator: plan fragments form a cycle")
	ErrUnknownFragment = errors.New("estimator: plan refers to an unknown fragment")
	ErrBadPlan         = errors.New("estimator: malformed plan")
)

// ParsePlan parses EXPLAIN JSON with the default Limits.
func ParsePlan(planJSON []byte) (*Plan, error) {
	return ParsePlanLimits(planJSON, Limits{})
}

// ParsePlanLimits parses EXPLAIN JSON: either the distributed form (an object
// mapping fragment id to fragment root) or a single root node (TYPE LOGICAL in
// Trino ≤ 478). Unknown node names and keys are tolerated. The input is only
// read; the Plan holds no reference to it.
func ParsePlanLimits(planJSON []byte, lim Limits) (*Plan, error) {
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = DefaultMaxPlanBytes
	}
	if lim.MaxNodes <= 0 {
		lim.MaxNodes = DefaultMaxPlanNodes
	}
	if int64(len(planJSON)) > lim.MaxBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPlanTooLarge, len(planJSON), lim.MaxBytes)
	}
	trimmed := bytes.TrimSpace(planJSON)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%w: plan JSON is not an object", ErrBadPlan)
	}
	// Cheap early rejection: every rendered node has a "children" key.
	if keys := countKey(trimmed, `"children"`); keys > lim.MaxNodes {
		return nil, fmt.Errorf("%w: about %d nodes, limit %d", ErrPlanTooLarge, keys, lim.MaxNodes)
	}
	p := &Plan{}
	count := 0
	frags, err := decodeFast(trimmed, &count, lim.MaxNodes)
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		// Some value has an unexpected JSON type (a numeric id, a non-string
		// descriptor value, a single-node logical plan): decode leniently.
		count = 0
		frags, err = decodeLenient(trimmed, p, &count, lim.MaxNodes)
		if err == nil && frags == nil {
			return p, nil // a single-node plan, already in p
		}
	}
	if err != nil {
		return nil, err
	}
	if len(frags) == 0 {
		return nil, fmt.Errorf("%w: plan has no fragments", ErrBadPlan)
	}
	p.Fragments = frags
	rootID := "0"
	if _, ok := p.Fragments[rootID]; !ok {
		return nil, fmt.Errorf("%w: no root fragment \"0\"", ErrBadPlan)
	}
	st := stitcher{frags: p.Fragments, state: map[string]uint8{}, nodes: count, max: lim.MaxNodes}
	if err := st.fragment(rootID); err != nil {
		return nil, err
	}
	p.Root, p.Nodes = p.Fragments[rootID], st.total
	for id := range p.Fragments {
		if st.state[id] == 0 {
			p.Unreferenced = append(p.Unreferenced, id)
		}
	}
	sort.Strings(p.Unreferenced)
	return p, nil
}

// countKey counts occurrences of key followed (after white space) by ':'.
func countKey(b []byte, key string) int {
	n := 0
	for {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			return n
		}
		b = b[i+len(key):]
		j := 0
		for j < len(b) && (b[j] == ' ' || b[j] == '\n' || b[j] == '\t' || b[j] == '\r') {
			j++
		}
		if j < len(b) && b[j] == ':' {
			n++
		}
	}
}

// decodeFast decodes the distributed form with plain Go types in one pass;
// it fails with a *json.UnmarshalTypeError when a value has another type.
func decodeFast(b []byte, count *int, max int) (map[string]*PlanNode, error) {
	var top map[string]fastNode
	if err := json.Unmarshal(b, &top); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	frags := make(map[string]*PlanNode, len(top))
	for id := range top {
		fn := top[id]
		n, err := fn.convert(id, count, max)
		if err != nil {
			return nil, fmt.Errorf("%w (fragment %q)", err, id)
		}
		frags[id] = n
	}
	return frags, nil
}

// decodeLenient accepts any JSON value types. A single-node (logical) plan
// is stored in p and returns (nil, nil).
func decodeLenient(b []byte, p *Plan, count *int, max int) (map[string]*PlanNode, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	if _, isNode := top["name"]; isNode {
		root, err := decodeNode(b, "", count, max)
		if err != nil {
			return nil, err
		}
		p.Root, p.Nodes = root, *count
		return nil, nil
	}
	frags := make(map[string]*PlanNode, len(top))
	for id, raw := range top {
		n, err := decodeNode(raw, id, count, max)
		if err != nil {
			return nil, fmt.Errorf("%w (fragment %q)", err, id)
		}
		frags[id] = n
	}
	return frags, nil
}

// fastNode is JsonRenderedNode with the types Trino writes.
type fastNode struct {
	ID         string            `json:"id"`
	Name       string            `json:"name"`
	Descriptor map[string]string `json:"descriptor"`
	Outputs    []struct {
		Name   string `json:"name"`
		Symbol string `json:"symbol"`
		Type   string `json:"type"`
	} `json:"outputs"`
	Details   []string      `json:"details"`
	Estimates []rawEstimate `json:"estimates"`
	Children  []fastNode    `json:"children"`
}

func (r *fastNode) convert(frag string, count *int, max int) (*PlanNode, error) {
	*count++
	if *count > max {
		return nil, fmt.Errorf("%w: more than %d nodes", ErrPlanTooLarge, max)
	}
	if r.Name == "" {
		return nil, fmt.Errorf("%w: node %s has no name", ErrBadPlan, r.ID)
	}
	n := &PlanNode{ID: r.ID, Name: r.Name, Fragment: frag, Descriptor: r.Descriptor, Details: r.Details}
	if len(r.Outputs) > 0 {
		n.Outputs = make([]Symbol, len(r.Outputs))
		for i, o := range r.Outputs {
			name := o.Name
			if name == "" {
				name = o.Symbol
			}
			n.Outputs[i] = Symbol{Name: name, Type: o.Type}
		}
	}
	if len(r.Estimates) > 0 {
		n.Estimates = make([]Estimate, len(r.Estimates))
		for i, e := range r.Estimates {
			n.Estimates[i] = Estimate{
				OutputRowCount: float64(e.OutputRowCount), OutputSizeInBytes: float64(e.OutputSizeInBytes),
				CPUCost: float64(e.CPUCost), MemoryCost: float64(e.MemoryCost), NetworkCost: float64(e.NetworkCost),
			}
		}
	}
	if len(r.Children) > 0 {
		n.Children = make([]*PlanNode, len(r.Children))
		for i := range r.Children {
			c, err := r.Children[i].convert(frag, count, max)
			if err != nil {
				return nil, err
			}
			n.Children[i] = c
		}
	}
	return n, nil
}

// stitcher links fragments at RemoteSource nodes, depth first, detecting
// cycles (a fragment reached again while it is being stitched) and fragments
// referenced twice (which would duplicate sub-trees).
type stitcher struct {
	frags map[string]*PlanNode
	state map[string]uint8 // 0 unseen, 1 in progress, 2 done
	nodes int              // nodes decoded in all fragments
	total int              // nodes in the stitched tree
	max   int
}

func (s *stitcher) fragment(id string) error {
	switch s.state[id] {
	case 1:
		return fmt.Errorf("%w: fragment %q is its own source", ErrPlanCycle, id)
	case 2:
		return fmt.Errorf("%w: fragment %q is referenced twice", ErrBadPlan, id)
	}
	s.state[id] = 1
	// Iterative walk: stitched plans can be deep.
	stack := []*PlanNode{s.frags[id]}
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s.total++
		if s.total > s.max {
			return fmt.Errorf("%w: more than %d nodes", ErrPlanTooLarge, s.max)
		}
		if ids, ok := n.Descriptor["sourceFragmentIds"]; ok && len(n.Children) == 0 {
			refs := splitList(ids)
			for _, ref := range refs {
				src, ok := s.frags[ref]
				if !ok {
					return fmt.Errorf("%w: node %s (%s) names fragment %q", ErrUnknownFragment, n.ID, n.Name, ref)
				}
				if err := s.fragment(ref); err != nil {
					return err
				}
				n.Children = append(n.Children, src)
			}
			continue // the sources were counted by their own fragment walk
		}
		for i := len(n.Children) - 1; i >= 0; i-- {
			stack = append(stack, n.Children[i])
		}
	}
	s.state[id] = 2
	return nil
}

// splitList splits Trino's rendered list "[a, b]" into its items.
func splitList(s string) []string {
	s = strings.TrimSpace(s)
	s = strings.TrimPrefix(s, "[")
	s = strings.TrimSuffix(s, "]")
	if strings.TrimSpace(s) == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// rawNode mirrors JsonRenderedNode with lenient field types.
type rawNode struct {
	ID         json.RawMessage            `json:"id"`
	Name       string                     `json:"name"`
	Descriptor map[string]json.RawMessage `json:"descriptor"`
	Outputs    []json.RawMessage          `json:"outputs"`
	Details    []json.RawMessage          `json:"details"`
	Estimates  []rawEstimate              `json:"estimates"`
	Children   []rawNode                  `json:"children"`
}

type rawEstimate struct {
	OutputRowCount    flexFloat `json:"outputRowCount"`
	OutputSizeInBytes flexFloat `json:"outputSizeInBytes"`
	CPUCost           flexFloat `json:"cpuCost"`
	MemoryCost        flexFloat `json:"memoryCost"`
	NetworkCost       flexFloat `json:"networkCost"`
}

// flexFloat reads a JSON number or Jackson's "NaN" / "Infinity" strings;
// absent or null means NaN (unknown).
type flexFloat float64

func (f *flexFloat) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := strconv.ParseFloat(s, 64) // accepts NaN, Infinity, -Infinity
		if err != nil {
			v = math.NaN()
		}
		*f = flexFloat(v)
		return nil
	}
	if string(b) == "null" {
		*f = flexFloat(math.NaN())
		return nil
	}
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("bad estimate %s", b)
	}
	*f = flexFloat(v)
	return nil
}

func nanEstimate() rawEstimate {
	n := flexFloat(math.NaN())
	return rawEstimate{n, n, n, n, n}
}

// decodeNode decodes one node and its children in one pass (depth is bounded
// by encoding/json's nesting limit).
func decodeNode(raw []byte, frag string, count *int, max int) (*PlanNode, error) {
	var r rawNode
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadPlan, err)
	}
	return convertNode(&r, frag, count, max)
}

func convertNode(r *rawNode, frag string, count *int, max int) (*PlanNode, error) {
	*count++
	if *count > max {
		return nil, fmt.Errorf("%w: more than %d nodes", ErrPlanTooLarge, max)
	}
	if r.Name == "" {
		return nil, fmt.Errorf("%w: node %s has no name", ErrBadPlan, rawText(r.ID))
	}
	n := &PlanNode{ID: rawText(r.ID), Name: r.Name, Fragment: frag}
	if len(r.Descriptor) > 0 {
		n.Descriptor = make(map[string]string, len(r.Descriptor))
		for k, v := range r.Descriptor {
			n.Descriptor[k] = rawText(v)
		}
	}
	for _, o := range r.Outputs {
		n.Outputs = append(n.Outputs, decodeSymbol(o))
	}
	for _, d := range r.Details {
		n.Details = append(n.Details, rawText(d))
	}
	for _, e := range r.Estimates {
		n.Estimates = append(n.Estimates, Estimate{
			OutputRowCount: float64(e.OutputRowCount), OutputSizeInBytes: float64(e.OutputSizeInBytes),
			CPUCost: float64(e.CPUCost), MemoryCost: float64(e.MemoryCost), NetworkCost: float64(e.NetworkCost),
		})
	}
	for i := range r.Children {
		child, err := convertNode(&r.Children[i], frag, count, max)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, child)
	}
	return n, nil
}

// UnmarshalJSON lets rawEstimate default every missing field to NaN.
func (e *rawEstimate) UnmarshalJSON(b []byte) error {
	type plain rawEstimate
	v := plain(nanEstimate())
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*e = rawEstimate(v)
	return nil
}

// rawText returns a JSON string's value, or the raw JSON text of any other value.
func rawText(b json.RawMessage) string {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if json.Unmarshal(b, &s) == nil {
			return s
		}
	}
	if string(b) == "null" {
		return ""
	}
	return string(b)
}

func decodeSymbol(b json.RawMessage) Symbol {
	if len(b) > 0 && b[0] == '"' {
		return Symbol{Name: rawText(b)}
	}
	var s struct {
		Name   json.RawMessage `json:"name"`
		Symbol json.RawMessage `json:"symbol"`
		Type   json.RawMessage `json:"type"`
	}
	if json.Unmarshal(b, &s) != nil {
		return Symbol{Name: string(b)}
	}
	name := rawText(s.Name)
	if name == "" {
		name = rawText(s.Symbol)
	}
	return Symbol{Name: name, Type: rawText(s.Type)}
}
