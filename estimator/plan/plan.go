package plan

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sort"
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
	// Lean leaves PlanNode.Outputs and Details empty and keeps only the
	// descriptor keys the featurizer reads (leanDescriptorKey); the rest is
	// still checked as JSON. Outputs, details and descriptors are most of the
	// allocations. Estimates are kept (they are model features).
	Lean bool
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
func Parse(planJSON []byte) (*Plan, error) {
	return ParseLimits(planJSON, Limits{})
}

// ParsePlanLimits parses EXPLAIN JSON: either the distributed form (an object
// mapping fragment id to fragment root) or a single root node (TYPE LOGICAL in
// Trino ≤ 478). Unknown node names and keys are tolerated. The input is only
// read; the Plan holds no reference to it.
func ParseLimits(planJSON []byte, lim Limits) (*Plan, error) {
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
	frags, root, count, err := decodePlanJSON(trimmed, lim)
	if err != nil {
		return nil, err
	}
	p := &Plan{}
	if root != nil {
		p.Root, p.Nodes = root, count
		return p, nil
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

// Walk calls f on every node of the stitched plan below n, pre-order,
// children in plan order; iterative, so deep plans cannot overflow the
// stack. It is the one plan walker.
func (n *PlanNode) Walk(f func(*PlanNode)) {
	if n == nil {
		return
	}
	stack := append(make([]*PlanNode, 0, 32), n)
	for len(stack) > 0 {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		f(n)
		// Children go on in one append (a Union can have hundreds) and are
		// then reversed, so that the first child comes off first.
		top := len(stack)
		stack = append(stack, n.Children...)
		slices.Reverse(stack[top:])
	}
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

// leanDescriptorKey reports whether a lean parse keeps a descriptor key:
// those the fragment stitching and the O-T-P conversion read (otp.go). The
// test "a lean parse featurizes like a full one" checks the list against
// every captured plan.
func leanDescriptorKey(k string) bool {
	switch k {
	case "sourceFragmentIds", "table", "distribution", "filterPredicate", "criteria", "filter", "dynamicFilters":
		return true
	}
	return false
}
