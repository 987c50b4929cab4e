package featurize

import (
	"errors"
	"fmt"
	"iter"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/prestroid/prestroid/estimator/plan"
)

// OTPKind is the type of an O-T-P node.
type OTPKind uint8

const (
	OTPEmpty     OTPKind = iota // ∅: a missing child; a leaf
	OTPOperator                 // OPR: a plan operator; always has exactly two children
	OTPTable                    // TBL: a scanned table; a leaf
	OTPPredicate                // PRED: a node's predicate; a leaf
)

func (k OTPKind) String() string {
	switch k {
	case OTPOperator:
		return "OPR"
	case OTPTable:
		return "TBL"
	case OTPPredicate:
		return "PRED"
	}
	return "∅"
}

// OTPNode is a node of the Operator-Table-Predicate binary tree (docs/design.md §2.2).
// OPR nodes have exactly two non-nil children; TBL, PRED and ∅ nodes have
// none. Trees returned by BuildOTP must not be modified (nodes are allocated
// in one block and may be shared by callers).
type OTPNode struct {
	Kind OTPKind
	// Value is the operator for OPR ("Aggregate", "InnerJoin(REPLICATED)"),
	// the table for TBL ("tpcds.sf1.store_sales"), the normalized predicate
	// text for PRED ("AND([d_year =], [d_moy BETWEEN])"), "" for ∅.
	Value string
	Left  *OTPNode
	Right *OTPNode
	// Pred is the parsed predicate of a PRED node, or the parsed join
	// criteria (AND the join filter) of a join OPR (kept for experiments; the
	// default encoding ignores it). Nil when absent or unparseable.
	Pred *Pred
	// Text is the predicate as Trino rendered it (PRED nodes, join OPRs).
	Text string
	// PredErr is the parse error of Text, if any; the node then carries a
	// best-effort clause of the identifiers found in Text.
	PredErr error
	// Plan is the plan node an OPR came from (shared by the parts of a split
	// fused node and by the links of a chained multi-child node).
	Plan *plan.PlanNode
	// part says which piece of a split fused node this OPR is.
	part otpPart
	// link marks the lower links of a chained multi-child node (every link
	// but the top one), so that per-plan-node sums count the node once.
	link bool
}

type otpPart uint8

const (
	partWhole otpPart = iota
	partScan
	partFilter
	partProject
)

// Estimate returns the optimizer's estimate for an OPR node. For a piece of a
// split fused node it is the matching entry (Trino lists them scan, filter,
// project); otherwise the plan node's last entry. ok is false when the plan
// gives none (the optimizer knew nothing) or for non-OPR nodes.
func (n *OTPNode) Estimate() (e plan.Estimate, ok bool) {
	if n.Kind != OTPOperator || n.Plan == nil || len(n.Plan.Estimates) == 0 {
		return e, false
	}
	est := n.Plan.Estimates
	if n.part == partWhole {
		return est[len(est)-1], true
	}
	var pieces []otpPart
	switch n.Plan.Name {
	case "ScanFilterProject":
		pieces = []otpPart{partScan, partFilter, partProject}
	case "ScanFilter":
		pieces = []otpPart{partScan, partFilter}
	case "ScanProject":
		pieces = []otpPart{partScan, partProject}
	case "FilterProject":
		pieces = []otpPart{partFilter, partProject}
	}
	if len(pieces) != len(est) {
		if n.part == pieces[len(pieces)-1] { // the top piece stands for the whole
			return est[len(est)-1], true
		}
		return e, false
	}
	for i, p := range pieces {
		if p == n.part {
			return est[i], true
		}
	}
	return e, false
}

// IsLeaf reports whether n has no children.
func (n *OTPNode) IsLeaf() bool { return n.Left == nil && n.Right == nil }

// BuildOTP converts a stitched plan into its O-T-P binary tree:
//   - every plan node becomes an OPR; fused ScanFilterProject, ScanFilter,
//     ScanProject and FilterProject nodes are split into Project → Filter →
//     TableScan (→ child);
//   - a non-join OPR gets its plan child on the left and a PRED (its filter
//     predicate) or ∅ on the right;
//   - a join keeps its children (left = probe, right = build); its value adds
//     the distribution ("InnerJoin(PARTITIONED)"); its criteria go to Pred;
//   - a table scan gets TBL (catalog.schema.table) on the left, ∅ on the right;
//   - a node with more than two plan children becomes a left-deep chain of
//     the same operator, Op(Op(c1, c2), c3), with no PRED child;
//   - missing children are ∅. Unknown operators are kept by name.
func BuildOTP(p *plan.Plan) (*OTPNode, error) { return buildOTP(p, true, TreeOptions{}) }

// BuildOTPWith is BuildOTP with the tree's optional readings.
func BuildOTPWith(p *plan.Plan, o TreeOptions) (*OTPNode, error) { return buildOTP(p, true, o) }

// TreeOptions are the O-T-P tree's optional readings of a plan. A bundle
// names those its model was trained with (manifest tree_features,
// TreeFeatures); the zero value is the tree of every bundle before them.
type TreeOptions struct {
	// DynamicFilters adds to the PRED of a scan's Filter one clause
	// [column DYNAMIC] per dynamic filter the scan waits for (the
	// descriptor's dynamicFilters): the scan reads only the rows whose
	// column matches the join's other side. Without dynamic filtering
	// (a session property) the same scan reads the table whole, and the
	// tree otherwise looks the same.
	DynamicFilters bool
}

// TreeFeatureDynamicFilters is TreeOptions.DynamicFilters's name in a
// manifest's tree_features.
const TreeFeatureDynamicFilters = "dynamic_filters"

// ErrTreeFeature is wrapped by a tree feature name this build does not know.
var ErrTreeFeature = errors.New("unknown O-T-P tree feature")

// ParseTreeFeatures reads a manifest's tree_features; a name it does not
// know is an error (a model trained on a reading this build cannot make).
func ParseTreeFeatures(names []string) (TreeOptions, error) {
	var o TreeOptions
	for _, n := range names {
		switch n {
		case TreeFeatureDynamicFilters:
			o.DynamicFilters = true
		default:
			return TreeOptions{}, fmt.Errorf("%w %q (this build reads %q)", ErrTreeFeature, n, TreeFeatureDynamicFilters)
		}
	}
	return o, nil
}

// Names are o's tree_features, nil for the zero value.
func (o TreeOptions) Names() []string {
	if o.DynamicFilters {
		return []string{TreeFeatureDynamicFilters}
	}
	return nil
}

// buildOTP is BuildOTP; without joinPreds a join OPR keeps its criteria
// Text but not their parse (Pred, PredErr), which only the training side's
// baselines read: the serving path skips that work.
func buildOTP(p *plan.Plan, joinPreds bool, o TreeOptions) (*OTPNode, error) {
	if p == nil || p.Root == nil {
		return nil, fmt.Errorf("%w: empty plan", plan.ErrBadPlan)
	}
	b := otpBuilder{arena: make([]OTPNode, 0, otpSize(p.Root)), preds: predParserPool.Get().(*predParser), joinPreds: joinPreds, tree: o}
	defer b.preds.release()
	return b.node(p.Root), nil
}

// withOTP builds p's serving O-T-P tree (as buildOTP(p, false, o)) in a
// pooled arena, calls use with its root and then returns the arena to the
// pool: the serving path, whose tree lives only while it is encoded. use
// must not keep any pointer into the tree. Reusing arenas spares the GC the
// tree's ~100 bytes per node on every query.
func withOTP[T any](p *plan.Plan, o TreeOptions, use func(*OTPNode) (T, error)) (T, error) {
	var zero T
	if p == nil || p.Root == nil {
		return zero, fmt.Errorf("%w: empty plan", plan.ErrBadPlan)
	}
	size := otpSize(p.Root)
	a, _ := otpArenaPool.Get().(*[]OTPNode)
	if a == nil || cap(*a) < size {
		fresh := make([]OTPNode, 0, size)
		a = &fresh
	}
	b := otpBuilder{arena: (*a)[:0], preds: predParserPool.Get().(*predParser), tree: o}
	root := b.node(p.Root)
	b.preds.release()
	out, err := use(root)
	// The arena is sized exactly (otpSize), so every node is in *a unless
	// alloc had to start a new block; then the arena is left to the GC.
	// Zero the nodes: alloc relies on zero slots, and the pool must not
	// keep plans alive.
	if n := len(b.arena); n > 0 && cap(*a) <= maxPooledOTPNodes && &b.arena[0] == &(*a)[:1][0] {
		clear((*a)[:n])
		otpArenaPool.Put(a)
	}
	return out, err
}

// otpArenaPool holds *[]OTPNode arenas for withOTP; arenas above
// maxPooledOTPNodes (about 6 MB) are left to the GC.
var otpArenaPool sync.Pool

const maxPooledOTPNodes = 1 << 16

// otpSize is the exact number of O-T-P nodes BuildOTP makes for n's tree.
func otpSize(root *plan.PlanNode) int {
	total := 0
	root.Walk(func(n *plan.PlanNode) {
		switch n.Name {
		case "ScanFilterProject":
			total += 7
			return
		case "ScanFilter", "ScanProject":
			total += 5
			return
		case "TableScan":
			total += 3
			return
		case "FilterProject":
			total += 2 // Project + its ∅; the Filter part is counted below
		}
		switch c := len(n.Children); {
		case c == 0 && n.Descriptor["table"] != "":
			total += 3
		case c == 0:
			total += 3 // OPR, ∅, PRED or ∅
		case c == 1:
			total += 2
		default:
			total += c - 1 // chain links
		}
	})
	return total
}

type otpBuilder struct {
	arena     []OTPNode
	preds     *predParser // one parser for every predicate of the plan
	joinPreds bool        // parse join criteria into OTPNode.Pred
	tree      TreeOptions
}

// alloc returns a new node from the arena (a new block when it is full, so
// earlier pointers stay valid).
func (b *otpBuilder) alloc(k OTPKind, v string) *OTPNode {
	if len(b.arena) == cap(b.arena) {
		b.arena = make([]OTPNode, 0, 2*cap(b.arena)+16)
	}
	// Extend and set two fields: the slot is already zero, and appending a
	// whole node would copy it with a write barrier per pointer while the
	// GC runs.
	b.arena = b.arena[:len(b.arena)+1]
	n := &b.arena[len(b.arena)-1]
	n.Kind, n.Value = k, v
	return n
}

func (b *otpBuilder) empty() *OTPNode { return b.alloc(OTPEmpty, "") }

// IsJoin reports whether a plan node name is a join (InnerJoin, LeftJoin,
// RightJoin, FullJoin, CrossJoin, SemiJoin, SpatialJoin, IndexJoin, ...).
func IsJoin(name string) bool { return strings.HasSuffix(name, "Join") }

// OperatorValue is the OPR value of a plan node: its name, plus the
// distribution in parentheses where the plan gives one (joins).
func OperatorValue(n *plan.PlanNode) string {
	if d := n.Descriptor["distribution"]; d != "" {
		if v, ok := joinValues[n.Name][d]; ok {
			return v // no allocation for the common values
		}
		return n.Name + "(" + d + ")"
	}
	return n.Name
}

// joinValues holds the OPR values of Trino's joins and distributions.
var joinValues = func() map[string]map[string]string {
	m := map[string]map[string]string{}
	for _, j := range []string{"InnerJoin", "LeftJoin", "RightJoin", "FullJoin", "CrossJoin", "SemiJoin", "SpatialJoin", "IndexJoin"} {
		m[j] = map[string]string{}
		for _, d := range []string{"PARTITIONED", "REPLICATED"} {
			m[j][d] = j + "(" + d + ")"
		}
	}
	return m
}()

func (b *otpBuilder) node(n *plan.PlanNode) *OTPNode {
	switch n.Name {
	case "ScanFilterProject":
		return b.piece(partProject, b.op(n, "Project", b.predFor(n, ""),
			b.piece(partFilter, b.op(n, "Filter", b.scanPred(n), b.piece(partScan, b.scan(n))))))
	case "ScanFilter":
		return b.piece(partFilter, b.op(n, "Filter", b.scanPred(n), b.piece(partScan, b.scan(n))))
	case "ScanProject":
		return b.piece(partProject, b.op(n, "Project", b.predFor(n, ""), b.piece(partScan, b.scan(n))))
	case "FilterProject":
		inner := b.piece(partFilter, b.generic(n, "Filter", n.Descriptor["filterPredicate"]))
		return b.piece(partProject, b.op(n, "Project", b.predFor(n, ""), inner))
	case "TableScan":
		return b.scan(n)
	}
	if len(n.Children) == 0 && n.Descriptor["table"] != "" {
		return b.scan(n)
	}
	if IsJoin(n.Name) {
		return b.join(n)
	}
	return b.generic(n, OperatorValue(n), n.Descriptor["filterPredicate"])
}

// piece marks o as one piece of a split fused node.
func (b *otpBuilder) piece(p otpPart, o *OTPNode) *OTPNode {
	o.part = p
	return o
}

// op builds OPR(value) with the given children.
func (b *otpBuilder) op(n *plan.PlanNode, value string, right, left *OTPNode) *OTPNode {
	o := b.alloc(OTPOperator, value)
	o.Plan, o.Left, o.Right = n, left, right
	return o
}

// scan builds TableScan OPR(TBL, ∅).
func (b *otpBuilder) scan(n *plan.PlanNode) *OTPNode {
	t := b.alloc(OTPTable, NormalizeTable(n.Descriptor["table"]))
	return b.op(n, "TableScan", b.empty(), t)
}

// generic handles a non-join node: one child + PRED, or a chain when it has
// two or more plan children.
func (b *otpBuilder) generic(n *plan.PlanNode, value, pred string) *OTPNode {
	switch len(n.Children) {
	case 0:
		return b.op(n, value, b.predFor(n, pred), b.empty())
	case 1:
		return b.op(n, value, b.predFor(n, pred), b.node(n.Children[0]))
	}
	return b.chain(n, value, n.Children)
}

func (b *otpBuilder) join(n *plan.PlanNode) *OTPNode {
	var o *OTPNode
	switch len(n.Children) {
	case 0:
		o = b.op(n, OperatorValue(n), b.empty(), b.empty())
	case 1:
		o = b.op(n, OperatorValue(n), b.empty(), b.node(n.Children[0]))
	default:
		o = b.chain(n, OperatorValue(n), n.Children)
	}
	text := n.Descriptor["criteria"]
	if f := n.Descriptor["filter"]; f != "" {
		if text != "" {
			text = "(" + text + ") AND (" + f + ")"
		} else {
			text = f
		}
	}
	o.Text = text
	if b.joinPreds {
		o.Pred, o.PredErr = b.parsePredicate(text)
	}
	return o
}

// chain builds the left-deep series Op(Op(Op(c1, c2), c3), c4).
func (b *otpBuilder) chain(n *plan.PlanNode, value string, children []*plan.PlanNode) *OTPNode {
	left := b.node(children[0])
	for i, c := range children[1:] {
		left = b.op(n, value, b.node(c), left)
		left.link = i < len(children)-2
	}
	return left
}

// predFor builds the PRED child for a predicate text, or ∅ when empty.
func (b *otpBuilder) predFor(_ *plan.PlanNode, text string) *OTPNode {
	if strings.TrimSpace(text) == "" {
		return b.empty()
	}
	pr, err := b.parsePredicate(text)
	if pr == nil { // a predicate that is TRUE
		return b.empty()
	}
	o := b.alloc(OTPPredicate, pr.String())
	o.Pred, o.Text, o.PredErr = pr, text, err
	return o
}

// scanPred builds the PRED of a scan's Filter: its predicate and, with
// TreeOptions.DynamicFilters, a clause [column DYNAMIC] for each dynamic
// filter the scan waits for, ANDed with it. The clauses come from the
// builder's parser chunks, as parsed predicates do.
func (b *otpBuilder) scanPred(n *plan.PlanNode) *OTPNode {
	text := n.Descriptor["filterPredicate"]
	if !b.tree.DynamicFilters {
		return b.predFor(n, text)
	}
	df := n.Descriptor["dynamicFilters"]
	if !strings.Contains(df, "#df") {
		return b.predFor(n, text)
	}
	var buf [8]*Pred
	kids := buf[:0]
	var err error
	if strings.TrimSpace(text) != "" {
		var own *Pred
		if own, err = b.parsePredicate(text); own != nil { // nil: TRUE
			kids = append(kids, own)
		}
	}
	pp := b.preds
	for col := range dynamicFilterColumns(df) {
		c := pp.newPred(PredClause)
		c.Columns, c.Operator = pp.keepCols([]string{col}), OpDynamic
		kids = append(kids, c)
	}
	if len(kids) == 0 { // "#df" but no column read, and no predicate of its own
		return b.predFor(n, text)
	}
	pr := kids[0]
	if len(kids) > 1 {
		pr = pp.newPred(PredAnd)
		pr.Children = pp.keepKids(kids)
	}
	o := b.alloc(OTPPredicate, pr.String())
	o.Pred, o.Text, o.PredErr = pr, text, err
	return o
}

// OpDynamic is the operator of a dynamic filter's clause
// (TreeOptions.DynamicFilters).
const OpDynamic = "DYNAMIC"

// dynamicFilterColumns yields the columns of a scan's dynamicFilters
// descriptor, "{ss_sold_date_sk = #df_1648, ss_item_sk_12 = #df_1644}" →
// ss_sold_date_sk, ss_item_sk (normalized as predicate columns are); the
// comparison may be another than "=" ("c_acctbal_4 > #df_12": a range
// dynamic filter).
func dynamicFilterColumns(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		s = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(s), "{"), "}")
		for part := range strings.SplitSeq(s, ",") {
			part = strings.TrimSpace(part)
			col, rest, ok := strings.Cut(part, " ")
			i := strings.LastIndexByte(rest, ' ')
			if ok && col != "" && i >= 0 && strings.HasPrefix(rest[i+1:], "#df") && strings.TrimSpace(rest[:i]) != "" {
				if !yield(normalizeSymbol(col)) {
					return
				}
			}
		}
	}
}

// parsePredicate parses text with the builder's parser; on error it returns
// a single clause of the identifiers found in it (operator "?") together
// with the error.
func (b *otpBuilder) parsePredicate(text string) (*Pred, error) {
	pr, err := b.preds.parse(text)
	if err == nil {
		return pr, nil
	}
	fb := &Pred{Kind: PredClause, Operator: "?"}
	if toks, lerr := lex(text, nil); lerr == nil {
		for _, t := range toks {
			if t.Kind == tIdent || t.Kind == tQuoted {
				fb.Columns = append(fb.Columns, normalizeSymbol(t.Text))
			}
		}
	}
	return fb, err
}

// NormalizeTable turns a Trino table handle as rendered in EXPLAIN into
// catalog.schema.table: "tpch:tiny:orders" → "tpch.tiny.orders",
// "tpcds:store_sales:sf1.0" → "tpcds.sf1.store_sales" (the tpcds connector
// prints table:sf<scale>; scale 0.01 is the schema "tiny"),
// "iceberg:tpch_tiny.lineitem$data@7784862346912668410" → "iceberg.tpch_tiny.lineitem"
// (iceberg names the snapshot read: every rewrite of a table would be a new
// table to the model). Other handles keep their parts in order, joined with
// dots; anything after a space is dropped.
func NormalizeTable(handle string) string {
	if v, ok := tableNames.Load(handle); ok {
		return v.(string)
	}
	v := normalizeTable(handle)
	if tableNamesLen.Add(1) <= maxTableNames { // a bounded memo: plans name few tables
		tableNames.Store(handle, v)
	}
	return v
}

var (
	tableNames    sync.Map // handle → catalog.schema.table
	tableNamesLen atomic.Int64
)

const maxTableNames = 100_000

func normalizeTable(handle string) string {
	h := strings.TrimSpace(handle)
	if i := strings.IndexByte(h, ' '); i > 0 {
		h = h[:i]
	}
	if i := strings.Index(h, "$data@"); i > 0 { // iceberg, whatever the catalog's name
		h = h[:i]
	}
	parts := strings.Split(h, ":")
	if len(parts) == 3 && isScaleSchema(parts[2]) && !isScaleSchema(parts[1]) {
		return parts[0] + "." + scaleSchema(parts[2]) + "." + parts[1]
	}
	return strings.Join(parts, ".")
}

func isScaleSchema(s string) bool {
	if len(s) < 3 || s[:2] != "sf" {
		return false
	}
	_, err := strconv.ParseFloat(s[2:], 64)
	return err == nil
}

func scaleSchema(s string) string {
	f, _ := strconv.ParseFloat(s[2:], 64)
	if f == 0.01 {
		return "tiny"
	}
	return "sf" + strconv.FormatFloat(f, 'f', -1, 64)
}

// OTPStats summarizes an O-T-P tree.
type OTPStats struct {
	Nodes    int      // all nodes: OPR, TBL, PRED and ∅
	MaxDepth int      // levels on the longest root-to-leaf path (a lone root has depth 1)
	Preds    int      // PRED nodes
	Tables   []string // distinct TBL values, sorted
}

// Stats counts nodes, depth, PRED nodes and tables of an O-T-P tree.
func Stats(root *OTPNode) OTPStats {
	var s OTPStats
	tables := map[string]struct{}{}
	root.WalkDepth(func(n *OTPNode, d int) {
		s.Nodes++
		s.MaxDepth = max(s.MaxDepth, d+1)
		switch n.Kind {
		case OTPPredicate:
			s.Preds++
		case OTPTable:
			tables[n.Value] = struct{}{}
		}
	})
	for t := range tables {
		s.Tables = append(s.Tables, t)
	}
	sort.Strings(s.Tables)
	return s
}

// RenderOTP writes the tree indented two spaces per level, one node a line:
// "OPR InnerJoin(PARTITIONED)", "TBL tpch.tiny.orders", "PRED [d_year =]", "∅".
// Join OPRs show their criteria after " on ".
func RenderOTP(root *OTPNode) string {
	var b strings.Builder
	root.WalkDepth(func(n *OTPNode, d int) {
		for i := 0; i < d; i++ {
			b.WriteString("  ")
		}
		b.WriteString(n.Kind.String())
		if n.Value != "" {
			b.WriteByte(' ')
			b.WriteString(n.Value)
		}
		if n.Kind == OTPOperator && n.Pred != nil {
			b.WriteString(" on ")
			b.WriteString(n.Pred.String())
		}
		b.WriteByte('\n')
	})
	return b.String()
}
