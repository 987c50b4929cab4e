package featurize

import (
	"errors"
	"fmt"
	"strings"
)

// SubTree is one sampled sub-tree (docs/design.md §2.4), nodes in breadth-first
// order: Nodes[0] is the sub-tree's root (tensor slot 1; slot i+1 holds
// Nodes[i]).
type SubTree struct {
	Nodes []*OTPNode
	// Left and Right index Nodes; -1 when the child is missing or lies
	// outside this sub-tree.
	Left, Right []int32
	// Vote is 1 for nodes whose convolution output counts (the node and its
	// descendants down to C levels are present and the node votes nowhere
	// else), 0 for nodes that only feed information to voters.
	Vote []uint8
	// Level is each node's depth below the sub-tree root (root 0).
	Level []int32
}

// Len is the number of nodes in the sub-tree.
func (s *SubTree) Len() int { return len(s.Nodes) }

// SamplerConfig holds the sampler's parameters.
type SamplerConfig struct {
	N int // node slots per sub-tree (∅ nodes count); N ≥ 2^(C+1) − 1
	K int // sub-trees kept; ≤ 0 keeps all of them
	C int // convolution depth (layers), ≥ 1
}

// ErrSamplerConfig is wrapped by invalid sampler parameters.
var ErrSamplerConfig = errors.New("estimator: invalid sub-tree sampler parameters")

// Validate checks N ≥ 2^(C+1) − 1 (a complete binary tree of depth C fits) and C ≥ 1.
func (c SamplerConfig) Validate() error {
	if c.C < 1 || c.C > 20 {
		return fmt.Errorf("%w: C=%d, want 1..20", ErrSamplerConfig, c.C)
	}
	if min := 1<<(c.C+1) - 1; c.N < min {
		return fmt.Errorf("%w: N=%d is below 2^(C+1)-1 = %d for C=%d", ErrSamplerConfig, c.N, min, c.C)
	}
	return nil
}

// SampleSubTrees runs the sub-tree sampler (docs/design.md §2.4, the paper's
// Algorithm 1) on an O-T-P tree and returns the first K sub-trees (all of
// them when K ≤ 0). Padding to K happens in the tensor encoder.
//
//  1. Queue the plan root. 2. Pop a root R and grow its sub-tree level by
//     level, taking all nodes of the next level, until the next level would
//     exceed N nodes or R's descendants run out; L is the deepest level kept.
//  3. New roots: the nodes at level L − C + 1 with descendants outside the
//     sub-tree. 4. A node votes iff neither it nor an ancestor in this
//     sub-tree is a new root. Push the new roots, left to right. 5. Repeat.
func SampleSubTrees(root *OTPNode, cfg SamplerConfig) ([]SubTree, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if root == nil {
		return nil, nil
	}
	var out []SubTree
	queue := []*OTPNode{root}
	// Scratch reused across sub-trees.
	var (
		nodes   []*OTPNode
		parent  []int32
		level   []int32
		outer   []bool // node has a child outside the sub-tree (level L only) / descendant outside
		blocked []bool // node or an ancestor in the sub-tree is a new root
	)
	// The sub-trees' slices are cut from shared slabs: three allocations
	// per slab instead of five per sub-tree. With K > 0 the first slabs hold
	// all K sub-trees (at most N nodes each).
	var sl subTreeSlabs
	if cfg.K > 0 {
		sl.grow(cfg.K * cfg.N)
	}
	for qi := 0; qi < len(queue); qi++ {
		if cfg.K > 0 && len(out) >= cfg.K {
			break
		}
		r := queue[qi]
		nodes, parent, level = append(nodes[:0], r), append(parent[:0], -1), append(level[:0], 0)
		start, L := 0, 0 // nodes[start:] is the deepest level kept
		exhausted := false
		for {
			nextCount := 0
			for _, n := range nodes[start:] {
				if n.Left != nil {
					nextCount++
				}
				if n.Right != nil {
					nextCount++
				}
			}
			if nextCount == 0 {
				exhausted = true
				break
			}
			if len(nodes)+nextCount > cfg.N {
				break
			}
			end := len(nodes)
			for i := start; i < end; i++ {
				n := nodes[i]
				if n.Left != nil {
					nodes, parent, level = append(nodes, n.Left), append(parent, int32(i)), append(level, int32(L+1))
				}
				if n.Right != nil {
					nodes, parent, level = append(nodes, n.Right), append(parent, int32(i)), append(level, int32(L+1))
				}
			}
			start, L = end, L+1
		}
		st := sl.cut(len(nodes))
		copy(st.Nodes, nodes)
		copy(st.Level, level)
		for i := range st.Left {
			st.Left[i], st.Right[i] = -1, -1
		}
		for i := 1; i < len(nodes); i++ {
			p := parent[i]
			if nodes[p].Left == nodes[i] && st.Left[p] < 0 {
				st.Left[p] = int32(i)
			} else {
				st.Right[p] = int32(i)
			}
		}
		if exhausted {
			for i := range st.Vote {
				st.Vote[i] = 1
			}
			out = append(out, st)
			continue
		}
		// Mark nodes with descendants outside: start at level L (children
		// not taken), propagate to parents, bottom-up (BFS order reversed).
		outer = outer[:0]
		for range nodes {
			outer = append(outer, false)
		}
		for i := start; i < len(nodes); i++ {
			outer[i] = !nodes[i].IsLeaf()
		}
		for i := len(nodes) - 1; i > 0; i-- {
			if outer[i] {
				outer[parent[i]] = true
			}
		}
		cut := int32(L - cfg.C + 1)
		if cut < 1 {
			cut = 1 // cannot happen for binary trees when N ≥ 2^(C+1)−1
		}
		// Votes top-down: blocked[i] = i or an ancestor is a new root.
		blocked = append(blocked[:0], make([]bool, len(nodes))...)
		for i := range nodes {
			b := i > 0 && blocked[parent[i]]
			if level[i] == cut && outer[i] {
				b = true
				queue = append(queue, nodes[i]) // BFS order = left to right
			}
			blocked[i] = b
			if !b {
				st.Vote[i] = 1
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// subTreeSlabs backs the slices of many sub-trees.
type subTreeSlabs struct {
	nodes  []*OTPNode
	ints   []int32 // Left, Right, Level: three per node
	votes  []uint8
	unused int // nodes left in the current slabs
}

func (sl *subTreeSlabs) grow(n int) {
	sl.nodes, sl.ints, sl.votes, sl.unused = make([]*OTPNode, n), make([]int32, 3*n), make([]uint8, n), n
}

// cut returns a sub-tree of n nodes with zero slices (full-slice
// expressions, so that an append to one cannot overwrite the next).
func (sl *subTreeSlabs) cut(n int) SubTree {
	if sl.unused < n {
		sl.grow(max(n, 2*len(sl.nodes), 64))
	}
	i := len(sl.nodes) - sl.unused
	sl.unused -= n
	ints := sl.ints[3*i : 3*(i+n) : 3*(i+n)]
	return SubTree{
		Nodes: sl.nodes[i : i+n : i+n],
		Left:  ints[:n:n], Right: ints[n : 2*n : 2*n], Level: ints[2*n:],
		Vote: sl.votes[i : i+n : i+n],
	}
}

// FullTree returns the whole tree as one sub-tree (the full-tree model
// variant): breadth-first order, every node voting.
func FullTree(root *OTPNode) SubTree {
	var st SubTree
	if root == nil {
		return st
	}
	st.Nodes = append(st.Nodes, root)
	st.Level = append(st.Level, 0)
	for i := 0; i < len(st.Nodes); i++ {
		n := st.Nodes[i]
		l, r := int32(-1), int32(-1)
		if n.Left != nil {
			l = int32(len(st.Nodes))
			st.Nodes, st.Level = append(st.Nodes, n.Left), append(st.Level, st.Level[i]+1)
		}
		if n.Right != nil {
			r = int32(len(st.Nodes))
			st.Nodes, st.Level = append(st.Nodes, n.Right), append(st.Level, st.Level[i]+1)
		}
		st.Left, st.Right = append(st.Left, l), append(st.Right, r)
	}
	st.Vote = make([]uint8, len(st.Nodes))
	for i := range st.Vote {
		st.Vote[i] = 1
	}
	return st
}

// RenderSubTrees writes each sub-tree as an indented tree with votes:
//
//	# sub-tree 1/3: 15 nodes, 9 voting
//	+ OPR Output
//	  + OPR Aggregate
//	    - PRED [d_year =]
//
// "+" marks a voter, "-" a non-voter.
func RenderSubTrees(sts []SubTree) string {
	var b strings.Builder
	for k := range sts {
		st := &sts[k]
		voters := 0
		for _, v := range st.Vote {
			voters += int(v)
		}
		fmt.Fprintf(&b, "# sub-tree %d/%d: %d nodes, %d voting\n", k+1, len(sts), st.Len(), voters)
		if st.Len() == 0 {
			continue
		}
		stack := []int32{0}
		for len(stack) > 0 {
			i := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			for j := int32(0); j < st.Level[i]; j++ {
				b.WriteString("  ")
			}
			if st.Vote[i] == 1 {
				b.WriteString("+ ")
			} else {
				b.WriteString("- ")
			}
			n := st.Nodes[i]
			b.WriteString(n.Kind.String())
			if n.Value != "" {
				b.WriteByte(' ')
				b.WriteString(n.Value)
			}
			b.WriteByte('\n')
			if st.Right[i] >= 0 {
				stack = append(stack, st.Right[i])
			}
			if st.Left[i] >= 0 {
				stack = append(stack, st.Left[i])
			}
		}
	}
	return b.String()
}
