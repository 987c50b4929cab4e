package plan

import (
	"strings"
)

// PrestoDB's EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) is a sibling of
// Trino's with another shape (PrestoDB 0.296):
//
//	{"0": {"plan": {"id": "9", "name": "Aggregate(FINAL)[orderpriority][$hashvalue]",
//	                "identifier": "", "details": "count := ...\n",
//	                "children": [...], "remoteSources": ["1"],
//	                "estimates": [{"outputRowCount": 15000.0, "totalSize": "NaN", "confident": "HIGH", ...}]}}}
//
// Each fragment wraps its root in {"plan": ...}; a node has no descriptor
// but one "identifier" string (often a bracketed list of "key = value"), its
// details are one newline-joined string, RemoteSource names its fragments
// in "remoteSources", the name carries the step and the grouping keys, and
// the estimates have "totalSize" where Trino has "outputSizeInBytes" and no
// cpuCost, memoryCost or networkCost (left NaN: unknown).
//
// The decoder reads both shapes into the same PlanNode, telling them apart
// by their keys: a node with "identifier" or "remoteSources" is PrestoDB's
// (Trino writes neither). It needs no engine to be told, so a plan read
// back from a feedback log or a training record decodes the same way it
// did when it was served. PrestoDB's names and identifiers are then mapped
// onto the descriptor keys Trino writes (prestoNode.apply), so that the same
// operator gets the same O-T-P value on both engines:
//
//	Aggregate(FINAL)[k][$h]          name Aggregate, type FINAL, keys [k], hash [$h]
//	RemoteSource, remoteSources [1]  sourceFragmentIds [1]
//	[table = TableHandle {connectorId='tpch', connectorHandle='orders:sf0.01', ...}, filterPredicate = p, ...]
//	                                 table tpch:orders:sf0.01 (catalog:table:scale, as Trino's
//	                                 tpcds connector writes it: tpch.tiny.orders to the featurizer),
//	                                 filterPredicate p, every other key as written
//	InnerJoin [crit][$h1, $h2], details "Distribution: PARTITIONED"
//	                                 criteria crit, hash [$h1, $h2], distribution PARTITIONED
//	                                 (Inner, Left, Right and Full joins only: Trino gives no
//	                                 distribution for SemiJoin and CrossJoin)
//	Output [a, b]                    columnNames [a, b]
//	TopN [10 by (...)], Limit [10]   count 10 (TopN: orderBy as written)
//
// Any other identifier is kept whole under "identifier". Names PrestoDB has
// and Trino has not (LimitPartial, ...) stay as they are.

// prestoNode is what a PrestoDB node says outside Trino's keys, gathered
// while the node is read.
type prestoNode struct {
	seen    bool // the node has "identifier" or "remoteSources": PrestoDB's shape
	ident   string
	details string
	sources []string
}

// prestoJoinDistribution lists the joins whose distribution Trino's
// descriptor gives (and so the O-T-P value carries).
var prestoJoinDistribution = map[string]bool{"InnerJoin": true, "LeftJoin": true, "RightJoin": true, "FullJoin": true}

// apply maps a PrestoDB node's name, identifier, details and remote
// sources onto n as Trino's decoder fills it. Under a lean parse only the
// descriptor keys the featurizer reads are kept and Details stays empty.
func (px *prestoNode) apply(n *PlanNode, lean bool) {
	set := func(k, v string) {
		if lean && !leanDescriptorKey(k) {
			return
		}
		if n.Descriptor == nil {
			n.Descriptor = make(map[string]string, 4)
		}
		n.Descriptor[k] = v
	}
	name, step, groups := splitPrestoName(n.Name)
	n.Name = name
	if len(px.sources) > 0 {
		set("sourceFragmentIds", "["+strings.Join(px.sources, ", ")+"]")
	}
	distribution := ""
	for line := range strings.SplitSeq(px.details, "\n") {
		if line == "" {
			continue
		}
		if v, ok := strings.CutPrefix(line, "Distribution: "); ok {
			distribution = strings.TrimSpace(v)
		}
		if !lean {
			n.Details = append(n.Details, line)
		}
	}
	ident := strings.TrimSpace(px.ident)
	switch name {
	case "Aggregate":
		set("type", step)
		set("keys", "["+group(groups, 0)+"]")
		set("hash", "["+group(groups, 1)+"]")
		return
	case "TableScan", "ScanFilter", "ScanProject", "ScanFilterProject", "Filter", "FilterProject", "Project":
		if items, ok := prestoItems(ident); ok {
			for _, it := range items {
				k, v, ok := strings.Cut(it, " = ")
				switch {
				case strings.HasPrefix(it, "TableHandle {"): // TableScan's unnamed handle
					set("table", prestoTable(it))
				case !ok:
					set("identifier", it)
				case k == "table":
					set("table", prestoTable(v))
				default:
					set(k, v)
				}
			}
			return
		}
	case "InnerJoin", "LeftJoin", "RightJoin", "FullJoin", "SemiJoin", "CrossJoin", "SpatialJoin":
		gs, rest := bracketGroups(ident)
		if rest == "" {
			if c := group(gs, 0); c != "" {
				set("criteria", c)
			}
			if len(gs) > 1 {
				set("hash", "["+gs[1]+"]")
			}
			if distribution != "" && prestoJoinDistribution[name] {
				set("distribution", distribution)
			}
			return
		}
	case "Output":
		if ident != "" {
			set("columnNames", ident)
		}
		return
	case "TopN", "TopNPartial":
		if gs, rest := bracketGroups(ident); len(gs) == 1 && rest == "" {
			if count, by, ok := strings.Cut(gs[0], " by "); ok {
				set("count", count)
				set("orderBy", by)
				return
			}
		}
	case "Limit", "LimitPartial":
		if gs, rest := bracketGroups(ident); len(gs) == 1 && rest == "" {
			set("count", gs[0])
			return
		}
	}
	if ident != "" {
		set("identifier", ident)
	}
}

// group is groups[i], or "" past the end.
func group(groups []string, i int) string {
	if i < len(groups) {
		return groups[i]
	}
	return ""
}

// splitPrestoName splits a PrestoDB node name into the operator, the step
// in parentheses and the bracketed groups after it:
// "Aggregate(FINAL)[orderpriority][$hashvalue]" → "Aggregate", "FINAL",
// ["orderpriority", "$hashvalue"]. A name with anything else after the
// operator is returned whole.
func splitPrestoName(s string) (name, step string, groups []string) {
	i := strings.IndexAny(s, "([")
	if i <= 0 {
		return s, "", nil
	}
	name, rest := s[:i], s[i:]
	if rest[0] == '(' {
		j := strings.IndexByte(rest, ')')
		if j < 0 {
			return s, "", nil
		}
		step, rest = rest[1:j], rest[j+1:]
	}
	groups, rest = bracketGroups(rest)
	if rest != "" {
		return s, "", nil
	}
	return name, step, groups
}

// bracketGroups reads consecutive top-level "[...]" groups from the start
// of s (brackets, parentheses and braces nest; '...' quotes anything) and
// returns their contents and what follows them, trimmed.
func bracketGroups(s string) (groups []string, rest string) {
	s = strings.TrimSpace(s)
	for len(s) > 0 && s[0] == '[' {
		end := closing(s)
		if end < 0 {
			break
		}
		groups = append(groups, s[1:end])
		s = strings.TrimSpace(s[end+1:])
	}
	return groups, s
}

// closing returns the index of the bracket that closes s[0], or -1.
func closing(s string) int {
	depth, quoted := 0, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			quoted = !quoted // '' inside a literal toggles twice
		case quoted:
		case c == '[' || c == '(' || c == '{':
			depth++
		case c == ']' || c == ')' || c == '}':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

// prestoItems splits an identifier "[a, b = c, ...]" into its top-level
// items; ok is false when it is not one bracketed list.
func prestoItems(ident string) (items []string, ok bool) {
	gs, rest := bracketGroups(ident)
	if len(gs) != 1 || rest != "" {
		return nil, false
	}
	s := gs[0]
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'':
			quoted = !quoted
		case quoted:
		case c == '[' || c == '(' || c == '{':
			depth++
		case c == ']' || c == ')' || c == '}':
			depth--
		case c == ',' && depth == 0 && i+1 < len(s) && s[i+1] == ' ':
			items = append(items, s[start:i])
			start = i + 2
		}
	}
	if s = s[start:]; s != "" {
		items = append(items, s)
	}
	return items, true
}

// prestoTable turns PrestoDB's rendered TableHandle into a handle of
// Trino's form: "TableHandle {connectorId='tpch',
// connectorHandle='orders:sf0.01', layout=...}" → "tpch:orders:sf0.01".
// Anything else is returned as it is.
func prestoTable(v string) string {
	id, ok1 := quotedField(v, "connectorId='")
	handle, ok2 := quotedField(v, "connectorHandle='")
	if !ok1 || !ok2 {
		return v
	}
	return id + ":" + handle
}

// quotedField returns the text after key up to the next single quote.
func quotedField(s, key string) (string, bool) {
	i := strings.Index(s, key)
	if i < 0 {
		return "", false
	}
	s = s[i+len(key):]
	j := strings.IndexByte(s, '\'')
	if j < 0 {
		return "", false
	}
	return s[:j], true
}

// leanDetails is the "Distribution: X" line of PrestoDB's details as their
// raw JSON text holds it (its escapes are the "\n" around it; the value
// is one plain word), or "".
func leanDetails(raw string) string {
	i := strings.Index(raw, "Distribution: ")
	if i < 0 {
		return ""
	}
	j := i + len("Distribution: ")
	for j < len(raw) && raw[j] != '\\' && raw[j] != '"' {
		j++
	}
	return raw[i:j]
}
