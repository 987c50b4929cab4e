package collector

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/internal/workloads"
)

var testCols = map[string]map[string]string{
	"date_dim":    {"d_date_sk": "bigint", "d_year": "integer", "d_moy": "integer", "d_date": "date"},
	"item":        {"i_item_sk": "bigint", "i_category": "char(50)", "i_current_price": "decimal(7,2)", "i_manufact_id": "integer"},
	"store_sales": {"ss_sold_date_sk": "bigint", "ss_item_sk": "bigint", "ss_quantity": "integer"},
}

func testDomain(col string) *Domain {
	switch col {
	case "date_dim.d_year":
		return &Domain{Kind: "num", Values: []string{"1998", "1999", "2000", "2001", "2002"}}
	case "date_dim.d_moy":
		return &Domain{Kind: "num", Values: []string{"1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11", "12"}}
	case "date_dim.d_date":
		return &Domain{Kind: "date", Min: "1998-01-02", Max: "2003-01-02"}
	case "item.i_category":
		return &Domain{Kind: "str", Values: []string{"Books", "Children", "Electronics", "Home", "Jewelry", "Men", "Music", "Shoes", "Sports", "Women"}}
	case "item.i_current_price":
		return &Domain{Kind: "num", Values: []string{"0.09", "1.50", "12.34", "50.00", "99.99"}}
	case "item.i_manufact_id":
		return &Domain{Kind: "num", Values: []string{"1", "128", "500", "999"}}
	case "store_sales.ss_quantity":
		return &Domain{Kind: "num", Values: []string{"1", "20", "40", "60", "80", "100"}}
	}
	return nil
}

const testSQL = `SELECT "dt"."d_year" "dyear", count(*) -- a ; comment with 2001
FROM tpcds.tiny.date_dim dt, tpcds.tiny.store_sales, tpcds.tiny.item
WHERE "dt"."d_date_sk" = "ss_sold_date_sk" AND ss_item_sk = i_item_sk
  AND "dt"."d_year" = 2001
  AND "item"."i_category" IN ('Books', 'Music', 'Books')
  AND "item"."i_current_price" BETWEEN 68 AND (68 + 30)
  AND ss_quantity BETWEEN 1 AND 20
  AND "dt"."d_date" BETWEEN CAST('2000-02-01' AS DATE) AND (CAST('2000-02-01' AS DATE) + INTERVAL '60' DAY)
  AND i_manufact_id = 128
  AND "dt"."d_moy" NOT IN (11, 12)
  AND "dt"."d_year" < (2001 + 1)
GROUP BY 1
HAVING "dyear" = 2001
LIMIT 100`

func TestAnalyzeFindsComparedColumnsThroughAliases(t *testing.T) {
	groups := analyzeSQL(tokenize(testSQL), testCols)
	var got []string
	for _, g := range groups {
		got = append(got, g.String())
	}
	want := []string{
		"date_dim.d_year = [num:2001]",
		"item.i_category in [str:Books str:Music str:Books]",
		"item.i_current_price between [num:68 num:68]",
		"store_sales.ss_quantity between [num:1 num:20]",
		"date_dim.d_date between [date:2000-02-01 date:2000-02-01]",
		"item.i_manufact_id = [num:128]",
		"date_dim.d_moy in [num:11 num:12]",
		"date_dim.d_year < [num:2001]",
		"date_dim.d_year = [num:2001]", // "dyear" is an alias of d_year
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("groups:\n got %q\nwant %q", got, want)
	}
}

func TestSubstituteIsConsistentAndKeepsStructure(t *testing.T) {
	for seed := uint64(0); seed < 50; seed++ {
		out, params := substitute(testSQL, testCols, testDomain, rand.New(rand.NewPCG(seed, 7)))
		year := params["date_dim.d_year[2001]"]
		if year == "" {
			t.Fatalf("seed %d: no d_year parameter in %v", seed, params)
		}
		// Every occurrence of the original year moved together, the comment
		// did not.
		if strings.Count(out, "= "+year+"\n") != 2 || !strings.Contains(out, "("+year+" + 1)") || !strings.Contains(out, `"dyear" = `+year) {
			t.Fatalf("seed %d: year %s not substituted consistently:\n%s", seed, year, out)
		}
		if !strings.Contains(out, "comment with 2001") {
			t.Fatalf("seed %d: comment changed:\n%s", seed, out)
		}
		// Key columns are never touched; the number of tokens is unchanged.
		if !strings.Contains(out, `"dt"."d_date_sk" = "ss_sold_date_sk"`) {
			t.Fatalf("seed %d: join predicate changed:\n%s", seed, out)
		}
		if len(sigIndex(tokenize(out))) != len(sigIndex(tokenize(testSQL))) {
			t.Fatalf("seed %d: token count changed:\n%s", seed, out)
		}
		// BETWEEN keeps its width; the IN list gets distinct values for
		// distinct originals.
		lo, hi := params["store_sales.ss_quantity[1]"], params["store_sales.ss_quantity[20]"]
		if parseNum(hi)-parseNum(lo) != 19 {
			t.Fatalf("seed %d: quantity BETWEEN %s AND %s lost its width", seed, lo, hi)
		}
		if params["item.i_category[Books]"] == params["item.i_category[Music]"] {
			t.Fatalf("seed %d: two categories got the same value %v", seed, params)
		}
		if params["date_dim.d_moy[11]"] == params["date_dim.d_moy[12]"] {
			t.Fatalf("seed %d: two months got the same value", seed)
		}
		d := params["date_dim.d_date[2000-02-01]"]
		if d < "1998-01-02" || d > "2003-01-02" || !strings.Contains(out, "CAST('"+d+"' AS DATE) AND (CAST('"+d+"' AS DATE) + INTERVAL '60' DAY)") {
			t.Fatalf("seed %d: date %q out of domain or inconsistent:\n%s", seed, d, out)
		}
	}
}

func TestSubstituteIsDeterministic(t *testing.T) {
	a, pa := substitute(testSQL, testCols, testDomain, rand.New(rand.NewPCG(42, 1)))
	b, pb := substitute(testSQL, testCols, testDomain, rand.New(rand.NewPCG(42, 1)))
	if a != b || !reflect.DeepEqual(pa, pb) {
		t.Fatal("same seed, different variant")
	}
}

func TestTokenizeRoundTrips(t *testing.T) {
	for _, s := range []string{testSQL, "SELECT 'it''s', \"a\"\"b\", 1.5e3, .06 /* x */ FROM t;", "'unterminated", "-- only a comment"} {
		var b strings.Builder
		for _, tk := range tokenize(s) {
			b.WriteString(tk.text)
		}
		if b.String() != s {
			t.Fatalf("tokenize does not round trip %q: %q", s, b.String())
		}
	}
}

func workloadsDir(t *testing.T) string {
	t.Helper()
	d, err := workloads.FromEnv("../../shared/workloads", "/work/shared/workloads")
	if err != nil {
		t.Skip(err)
	}
	return d
}

// templatesAndDomains are the TPC templates and the committed domain
// cache the generator fills them from (the test is skipped without them).
func templatesAndDomains(t *testing.T) ([]Template, *Domains) {
	t.Helper()
	ts, err := LoadTemplates(workloadsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	dom, err := LoadDomains("../data/domains.json")
	if err != nil || len(dom.Values) == 0 {
		t.Skip("no committed domain cache")
	}
	return ts, dom
}

func TestTemplatesFillEveryPlaceholder(t *testing.T) {
	ts, err := LoadTemplates(workloadsDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) < 100 {
		t.Fatalf("only %d templates", len(ts))
	}
	for _, tm := range ts {
		for _, sc := range []string{"tiny", "sf1"} {
			s := tm.Fill(sc)
			if strings.Contains(s, "${") || strings.HasSuffix(strings.TrimSpace(s), ";") {
				t.Fatalf("%s at %s: placeholder or trailing semicolon left", tm.Name, sc)
			}
		}
	}
}

func TestGenerateIsDeterministicAndUnique(t *testing.T) {
	dir := workloadsDir(t)
	ts, err := LoadTemplates(dir)
	if err != nil {
		t.Fatal(err)
	}
	dom, err := LoadDomains("../data/domains.json")
	if err != nil || len(dom.Values) == 0 {
		t.Skip("no committed domain cache")
	}
	cfg := GenConfig{Seed: 1, Scales: []string{"tiny", "sf1"}, Variants: 3, SessionShare: 0.5, GenScales: []string{"tiny"}, GenVariants: 2}
	a := Generate(cfg, ts, dom)
	b := Generate(cfg, ts, dom)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("Generate is not deterministic")
	}
	keys := map[string]bool{}
	varied := 0
	for _, it := range a {
		if keys[it.Key] {
			t.Fatalf("duplicate key %s", it.Key)
		}
		keys[it.Key] = true
		if it.Workload.Variant > 0 && len(it.Workload.Params) > 0 {
			varied++
		}
	}
	if varied < len(a)/2 {
		t.Fatalf("only %d of %d items have substituted parameters", varied, len(a))
	}
	// A variant does not depend on which other templates are planned.
	one := Generate(GenConfig{Seed: 1, Scales: []string{"tiny"}, Variants: 3, SessionShare: 0.5, Templates: []string{"tpcds/q03"}}, ts, dom)
	for _, it := range one {
		if !keys[it.Key] {
			t.Fatalf("tpcds/q03 variant %d differs when planned alone", it.Workload.Variant)
		}
	}
}

func TestGenerateSetsAFixedSessionOverTheDrawnOne(t *testing.T) {
	ts, dom := templatesAndDomains(t)
	cfg := GenConfig{Seed: 1, Scales: []string{"sf1"}, Variants: 6, SessionShare: 0.5, Storage: "iceberg",
		Templates: []string{"tpcds/q48", "tpch/q12"}}
	plain := Generate(cfg, ts, dom)
	cfg.Session = map[string]string{"enable_dynamic_filtering": "false"}
	off := Generate(cfg, ts, dom)
	if len(off) != len(plain) || len(off) != 12 {
		t.Fatalf("%d and %d items, want 12 each", len(plain), len(off))
	}
	drawn := 0
	for i, it := range off {
		p := plain[i]
		// the same statement; another key unless its drawn session already had it
		already := p.Session["enable_dynamic_filtering"] == "false"
		if it.SQL != p.SQL || it.Workload.Variant != p.Workload.Variant || (it.Key == p.Key) != already {
			t.Fatalf("item %d: variant %d, keys %s %s (drawn %v): want the same statement, another key unless drawn so",
				i, it.Workload.Variant, it.Key, p.Key, p.Session)
		}
		if it.Session["enable_dynamic_filtering"] != "false" {
			t.Fatalf("item %d (variant %d): session %v, want dynamic filtering off", i, it.Workload.Variant, it.Session)
		}
		// the drawn properties stay beside it (variant 0 draws none)
		for k, v := range p.Session {
			if k != "enable_dynamic_filtering" && it.Session[k] != v {
				t.Fatalf("item %d: session %v lost the drawn %s=%s", i, it.Session, k, v)
			}
			drawn++
		}
	}
	if drawn == 0 {
		t.Fatal("no variant drew a session: the merge is untested")
	}
	// variant 0 (the file's own values, Trino's default session) gets the
	// fixed properties alone
	for _, it := range off {
		if it.Workload.Variant == 0 && !reflect.DeepEqual(it.Session, cfg.Session) {
			t.Fatalf("%s variant 0: session %v, want exactly %v", it.Workload.Template, it.Session, cfg.Session)
		}
	}
}

func TestSplitIsFixedAndByTemplate(t *testing.T) {
	var names []string
	for i := 0; i < 111; i++ {
		names = append(names, "t/"+string(rune('a'+i%26))+strings.Repeat("x", i/26))
	}
	a := MakeSplit(names, 1)
	if len(a.Test) != 11 || len(a.Validation) != 11 || len(a.Train) != 89 || len(a.ByTemplate) != 111 {
		t.Fatalf("split sizes %d/%d/%d", len(a.Train), len(a.Validation), len(a.Test))
	}
	rev := append([]string(nil), names...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if !reflect.DeepEqual(MakeSplit(rev, 1), a) {
		t.Fatal("split depends on input order")
	}
	if reflect.DeepEqual(MakeSplit(names, 2).Test, a.Test) {
		t.Fatal("seed does not change the split")
	}
}
