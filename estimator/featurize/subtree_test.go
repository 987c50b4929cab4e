package featurize

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomOTP builds a random O-T-P-shaped tree with about size OPR nodes:
// every OPR has exactly two children; leaves are TBL, PRED or ∅. Shapes mix
// long chains (unary operators with PRED children), joins (two OPR
// children) and scans.
func randomOTP(r *rand.Rand, size int) *OTPNode {
	budget := size
	var build func(depth int) *OTPNode
	leaf := func(k OTPKind) *OTPNode { return &OTPNode{Kind: k} }
	build = func(depth int) *OTPNode {
		budget--
		if budget <= 0 || depth > 400 || r.IntN(10) == 0 {
			return &OTPNode{Kind: OTPOperator, Value: "TableScan", Left: leaf(OTPTable), Right: leaf(OTPEmpty)}
		}
		switch r.IntN(4) {
		case 0: // join
			return &OTPNode{Kind: OTPOperator, Value: "InnerJoin", Left: build(depth + 1), Right: build(depth + 1)}
		default: // unary with PRED or ∅
			pr := leaf(OTPEmpty)
			if r.IntN(3) == 0 {
				pr = leaf(OTPPredicate)
			}
			return &OTPNode{Kind: OTPOperator, Value: "Filter", Left: build(depth + 1), Right: pr}
		}
	}
	return build(0)
}

func allNodes(root *OTPNode) []*OTPNode {
	var out []*OTPNode
	root.Walk(func(n *OTPNode) { out = append(out, n) })
	return out
}

// checkSampler verifies the docs/design.md §2.4 invariants for one tree and config.
func checkSampler(t *testing.T, root *OTPNode, cfg SamplerConfig) {
	t.Helper()
	cfg.K = 0
	sts, err := SampleSubTrees(root, cfg)
	if err != nil {
		t.Fatal(err)
	}
	votes := map[*OTPNode]int{}
	for si, st := range sts {
		if st.Len() > cfg.N {
			t.Fatalf("sub-tree %d has %d nodes, N=%d", si, st.Len(), cfg.N)
		}
		idx := make(map[*OTPNode]int32, st.Len())
		for i, n := range st.Nodes {
			idx[n] = int32(i)
		}
		for i, n := range st.Nodes {
			// links agree with the tree
			if l := st.Left[i]; l >= 0 && st.Nodes[l] != n.Left {
				t.Fatalf("sub-tree %d node %d: left link wrong", si, i)
			}
			if r := st.Right[i]; r >= 0 && st.Nodes[r] != n.Right {
				t.Fatalf("sub-tree %d node %d: right link wrong", si, i)
			}
			if st.Vote[i] == 0 {
				continue
			}
			votes[n]++
			// descendants down to C levels are present
			n.WalkTo(cfg.C, func(c *OTPNode, d int) {
				if _, ok := idx[c]; !ok {
					t.Fatalf("sub-tree %d: voter %q at %d misses a descendant %d levels down", si, n.Value, i, d)
				}
			})
		}
	}
	for _, n := range allNodes(root) {
		if votes[n] != 1 {
			t.Fatalf("node %s %q votes %d times", n.Kind, n.Value, votes[n])
		}
	}
}

func TestSamplerInvariantsOnRandomTrees(t *testing.T) {
	cfgs := []SamplerConfig{{N: 15, C: 3}, {N: 32, C: 3}, {N: 3, C: 1}, {N: 7, C: 2}, {N: 10, C: 2}, {N: 31, C: 4}, {N: 64, C: 3}, {N: 100, C: 5}}
	r := rand.New(rand.NewPCG(1, 2))
	trees := 3000
	if testing.Short() {
		trees = 300
	}
	for i := 0; i < trees; i++ {
		root := randomOTP(r, 1+r.IntN(600))
		cfg := cfgs[i%len(cfgs)]
		checkSampler(t, root, cfg)
	}
}

func TestSamplerKeepsFirstK(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	var root *OTPNode
	var all []SubTree
	for len(all) <= 5 {
		root = randomOTP(r, 400)
		var err error
		if all, err = SampleSubTrees(root, SamplerConfig{N: 15, C: 3}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := SampleSubTrees(root, SamplerConfig{N: 15, K: 5, C: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) <= 5 || len(first) != 5 {
		t.Fatalf("got %d of %d sub-trees", len(first), len(all))
	}
	for i := range first {
		if first[i].Nodes[0] != all[i].Nodes[0] {
			t.Fatalf("sub-tree %d differs", i)
		}
	}
}

func TestSamplerRejectsSmallN(t *testing.T) {
	for _, c := range []SamplerConfig{{N: 14, C: 3}, {N: 6, C: 2}, {N: 15, C: 0}} {
		_, err := SampleSubTrees(&OTPNode{}, c)
		if !errors.Is(err, ErrSamplerConfig) {
			t.Errorf("%+v: got %v, want ErrSamplerConfig", c, err)
		}
		if c.C == 3 && !strings.Contains(fmt.Sprint(err), "2^(C+1)-1 = 15") {
			t.Errorf("error does not explain the bound: %v", err)
		}
	}
}

func TestFullTreeVotesEverywhere(t *testing.T) {
	root := randomOTP(rand.New(rand.NewPCG(3, 4)), 200)
	ft := FullTree(root)
	if ft.Len() != len(allNodes(root)) {
		t.Fatalf("full tree has %d nodes, want %d", ft.Len(), len(allNodes(root)))
	}
	for i, v := range ft.Vote {
		if v != 1 {
			t.Fatalf("node %d does not vote", i)
		}
	}
}
