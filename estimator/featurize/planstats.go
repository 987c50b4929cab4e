package featurize

import (
	"fmt"
	"sort"
	"strings"
)

// Plan statistics over many plans (`prestroid plan DIR`): per-plan O-T-P
// statistics, the node count × max depth distribution and the largest plan
// per workload. The command prints them; the counting lives here, beside
// Stats.

// PlanStat is one named plan's O-T-P statistics.
type PlanStat struct {
	Name     string   `json:"name,omitempty"`
	Workload string   `json:"workload,omitempty"`
	Nodes    int      `json:"nodes"`
	MaxDepth int      `json:"max_depth"`
	Preds    int      `json:"preds"`
	Tables   []string `json:"tables"` // never nil, so JSON shows []
}

// NewPlanStat is Stats of root under name; the workload is the name up to
// its first "-" (tpcds-q03 → tpcds), or the whole name.
func NewPlanStat(name string, root *OTPNode) PlanStat {
	s := Stats(root)
	wl := name
	if i := strings.IndexByte(name, '-'); i > 0 {
		wl = name[:i]
	}
	tables := s.Tables
	if tables == nil {
		tables = []string{}
	}
	return PlanStat{Name: name, Workload: wl, Nodes: s.Nodes, MaxDepth: s.MaxDepth, Preds: s.Preds, Tables: tables}
}

// WorkloadMax is the largest plan size and depth of one workload.
type WorkloadMax struct {
	Workload string `json:"workload"`
	Plans    int    `json:"plans"`
	MaxNodes int    `json:"max_nodes"`
	MaxDepth int    `json:"max_depth"`
}

// WorkloadMaxima groups the plans by workload, sorted by workload name.
func WorkloadMaxima(plans []PlanStat) []WorkloadMax {
	byWL := map[string]*WorkloadMax{}
	for _, p := range plans {
		m := byWL[p.Workload]
		if m == nil {
			m = &WorkloadMax{Workload: p.Workload}
			byWL[p.Workload] = m
		}
		m.Plans++
		m.MaxNodes, m.MaxDepth = max(m.MaxNodes, p.Nodes), max(m.MaxDepth, p.MaxDepth)
	}
	out := make([]WorkloadMax, 0, len(byWL))
	for _, m := range byWL {
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Workload < out[j].Workload })
	return out
}

// SizeDepthGrid counts plans per (max depth, node count) cell. Bucket i of
// an axis holds values in [Edges[i-1], Edges[i]); the first bucket is below
// Edges[0], the last at or above the last edge.
type SizeDepthGrid struct {
	NodeEdges, DepthEdges []int
	// Counts[depth bucket][node bucket]
	Counts [][]int
}

// Default grid edges of `prestroid plan DIR`.
var (
	DefaultNodeEdges  = []int{25, 50, 100, 200, 400, 800, 1600}
	DefaultDepthEdges = []int{10, 20, 30, 40, 50, 60, 80}
)

// NewSizeDepthGrid counts the plans over the given edges.
func NewSizeDepthGrid(plans []PlanStat, nodeEdges, depthEdges []int) SizeDepthGrid {
	g := SizeDepthGrid{NodeEdges: nodeEdges, DepthEdges: depthEdges, Counts: make([][]int, len(depthEdges)+1)}
	for i := range g.Counts {
		g.Counts[i] = make([]int, len(nodeEdges)+1)
	}
	for _, p := range plans {
		g.Counts[bucketOf(p.MaxDepth, depthEdges)][bucketOf(p.Nodes, nodeEdges)]++
	}
	return g
}

func bucketOf(v int, edges []int) int {
	for i, e := range edges {
		if v < e {
			return i
		}
	}
	return len(edges)
}

// BucketLabel names bucket i of an axis: "<25", "25-49", ..., "≥1600".
func BucketLabel(i int, edges []int) string {
	switch {
	case i == 0:
		return fmt.Sprintf("<%d", edges[0])
	case i == len(edges):
		return fmt.Sprintf("≥%d", edges[i-1])
	}
	return fmt.Sprintf("%d-%d", edges[i-1], edges[i]-1)
}

// PredicateSentences are the Word2Vec corpus sentences of one tree: the
// tokens of every PRED node (and, with joins, of every operator's join
// criteria), pre-order, left before right; empty ones are left out.
func PredicateSentences(root *OTPNode, joins bool) [][]string {
	var out [][]string
	root.Walk(func(n *OTPNode) {
		if n.Pred != nil && (n.Kind == OTPPredicate || joins && n.Kind == OTPOperator) {
			if toks := n.Pred.Tokens(); len(toks) > 0 {
				out = append(out, toks)
			}
		}
	})
	return out
}
