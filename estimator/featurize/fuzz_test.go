package featurize

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/prestroid/prestroid/estimator/internal/prestotest"
	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

// Fuzz targets for the parsers of outside input. Run each for a short
// while, e.g.:
//
//	go test ./estimator/featurize -run '^$' -fuzz FuzzParsePredicate -fuzztime 30s
//	go test ./estimator/featurize -run '^$' -fuzz FuzzParsePlan -fuzztime 30s
//	go test ./estimator/plan -run '^$' -fuzz FuzzDecodeQueryResults -fuzztime 30s

func FuzzParsePredicate(f *testing.F) {
	for _, c := range predicateCases {
		f.Add(c.in)
	}
	for _, s := range []string{"", "(", ")", "'", `"`, "a IS", "CASE", "CAST(", "x -> y", "a[1", "$not()", "ARRAY[", "INTERVAL", "NOT NOT NOT a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1<<14 {
			return
		}
		p, err := ParsePredicate(s)
		if err != nil || p == nil {
			return
		}
		// A parsed predicate renders deterministically and its tokens are
		// the clauses' tokens.
		if p.String() != p.String() {
			t.Fatal("String is not deterministic")
		}
		n := 0
		var walk func(q *Pred)
		walk = func(q *Pred) {
			switch q.Kind {
			case PredClause:
				n += len(q.ClauseTokens())
			case PredNot:
				if len(q.Children) != 1 {
					t.Fatalf("NOT with %d children", len(q.Children))
				}
			default:
				if len(q.Children) < 2 {
					t.Fatalf("AND/OR with %d children", len(q.Children))
				}
			}
			for _, c := range q.Children {
				walk(c)
			}
		}
		walk(p)
		if n != len(p.Tokens()) {
			t.Fatalf("tokens %d, clauses hold %d", len(p.Tokens()), n)
		}
	})
}

func FuzzParsePlan(f *testing.F) {
	for _, name := range []string{"tpch-q06-tiny.json", "tpch-q03-tiny.json", "tpcds-q96-sf1.json"} {
		if b, err := os.ReadFile(filepath.Join(trinotest.ExplainDir, name)); err == nil {
			f.Add(b)
		}
	}
	// PrestoDB's shape (plan/presto.go): captured plans and a small one.
	for _, name := range []string{"tpch-q03-tiny.json", "extra-semijoin-tiny.json"} {
		if b, err := os.ReadFile(filepath.Join(prestotest.ExplainDir, name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"0": {"plan": {"id": "1", "name": "Aggregate(FINAL)[a][$h]", "identifier": "", "details": "Distribution: X\n", "children": [{"id": "2", "name": "RemoteSource", "identifier": "[1] ", "children": [], "remoteSources": ["1"]}]}}, "1": {"plan": {"id": "3", "name": "ScanFilter", "identifier": "[table = TableHandle {connectorId='c', connectorHandle='t:sf1.0'}, filterPredicate = (a) > (INTEGER'1')]", "estimates": [{"outputRowCount": "NaN", "totalSize": 1.0}]}}}`))
	f.Add([]byte(`{"0": {"id": "1", "name": "Output", "children": [{"id": "2", "name": "RemoteSource", "descriptor": {"sourceFragmentIds": "[1, 2]"}}]}, "1": {"id": "3", "name": "Values"}, "2": {"id": "4", "name": "ScanFilter", "descriptor": {"table": "tpcds:item:sf1.0", "filterPredicate": "(a = 1)"}}}`))
	f.Add([]byte(`{"0": {"id": "1", "name": "Output", "children": [{"id": "2", "name": "RemoteSource", "descriptor": {"sourceFragmentIds": "[0]"}}]}}`))
	f.Add([]byte(`{"id": "1", "name": "InnerJoin", "descriptor": {"criteria": "(a = b)"}, "children": [{"id": "2", "name": "Values"}, {"id": "3", "name": "Values"}, {"id": "4", "name": "Values"}]}`))
	f.Add([]byte(`{"0": {"id": 1, "name": "X", "estimates": [{"cpuCost": "NaN"}], "outputs": [{"symbol": "a"}, "b"]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 1<<20 {
			return
		}
		p, err := plan.ParseLimits(b, plan.Limits{MaxNodes: 10000})
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		root, err := BuildOTP(p)
		if err != nil {
			t.Fatalf("BuildOTP on a parsed plan: %v", err)
		}
		if err := checkOTPShape(root); err != nil {
			t.Fatal(err)
		}
		// the dynamic filter clauses read the scans' descriptors too
		dfRoot, err := BuildOTPWith(p, TreeOptions{DynamicFilters: true})
		if err != nil {
			t.Fatalf("BuildOTPWith on a parsed plan: %v", err)
		}
		if err := checkOTPShape(dfRoot); err != nil {
			t.Fatal(err)
		}
		s := Stats(root)
		sts, err := SampleSubTrees(root, SamplerConfig{N: 15, C: 3})
		if err != nil {
			t.Fatal(err)
		}
		nodes := 0
		for _, st := range sts {
			for _, v := range st.Vote {
				nodes += int(v)
			}
		}
		if nodes != s.Nodes {
			t.Fatalf("%d votes for %d nodes", nodes, s.Nodes)
		}
	})
}
