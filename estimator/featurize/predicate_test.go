package featurize

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/estimator/plan"
)

// Real predicate strings from the captured TPC-H / TPC-DS plans (Trino 476),
// plus SQL-style spellings the IR formatter may produce in other releases.
var predicateCases = []struct {
	in   string
	want string // Pred.String()
}{
	// from testdata/explain
	{"(d_moy = integer '11')", "[d_moy =]"},
	{"(shipdate > date '1995-03-15')", "[shipdate >]"},
	{"(receiptdate_41 > commitdate_40)", "[receiptdate commitdate >]"},
	{"(mktsegment = varchar(10) 'BUILDING')", "[mktsegment =]"},
	{"(s_gmt_offset_50 = decimal(5,2) '-5.00')", "[s_gmt_offset =]"},
	{"(t_hour BETWEEN integer '8' AND integer '9')", "[t_hour BETWEEN]"},
	{"((d_year = integer '2000') AND (d_moy = integer '2'))", "AND([d_year =], [d_moy =])"},
	{"(name_20 IN (varchar(25) 'GERMANY', varchar(25) 'FRANCE'))", "[name IN]"},
	{"(i_category = char(50) 'Books                                             ')", "[i_category =]"},
	{"((d_year_6 = integer '1999') AND (d_moy_8 BETWEEN integer '9' AND integer '12'))", "AND([d_year =], [d_moy BETWEEN])"},
	{"((COALESCE(sum_31, bigint '0') > bigint '0') OR (COALESCE(sum_63, bigint '0') > bigint '0'))", "OR([sum >], [sum >])"},
	{"(CAST(cs_ext_discount_amt AS decimal(9,3)) > $operator$multiply(COALESCE(avg, avg_64), decimal(2,1) '1.3'))", "[cs_ext_discount_amt avg avg >]"},
	{"((d_year = integer '1999') OR ((d_year = integer '1998') AND (d_moy = integer '12')) OR ((d_year = integer '2000') AND (d_moy = integer '1')))",
		"OR([d_year =], AND([d_year =], [d_moy =]), AND([d_year =], [d_moy =]))"},
	{"(CASE WHEN (avg > decimal(38,2) '0.00') THEN ($operator$divide(abs($operator$subtract(CAST(sum AS decimal(38,4)), avg)), avg) > decimal(38,4) '0.1000') ELSE null::boolean END)",
		"[avg sum avg avg CASE]"},
	{"$like(hd_buy_potential, LikePattern '[Unknown%]')", "[hd_buy_potential LIKE]"},
	{"$not($like(comment_2, LikePattern '[%special%requests%]'))", "NOT([comment LIKE])"},
	{"$not((ss_item_sk IS NULL))", "NOT([ss_item_sk IS_NULL])"},
	{"$not(COALESCE(subquerytrue_58, boolean 'false'))", "NOT([subquerytrue coalesce])"},
	{"((ss_store_sk_55 = bigint '4') AND (ss_addr_sk_54 IS NULL))", "AND([ss_store_sk =], [ss_addr_sk IS_NULL])"},
	{"(exists_0 OR COALESCE(subquerytrue, boolean 'false'))", "OR([exists], [subquerytrue coalesce])"},
	{"(c_birth_country <> upper(ca_country))", "[c_birth_country ca_country <>]"},
	{"(CASE avg WHEN double '0.0' THEN boolean 'false' ELSE ($operator$divide(stddev_samp, avg) > double '1.0') END)", "[avg stddev_samp avg CASE]"},
	{"((acctbal_6 > double '0.0') AND (substring(phone_5, bigint '1', bigint '2') IN (varchar(15) '13', varchar(15) '31')))", "AND([acctbal >], [phone IN])"},
	// join criteria and filters
	{"(custkey = custkey_7)", "[custkey custkey =]"},
	{"i_item_id = i_item_id_1", "[i_item_id i_item_id =]"},
	{"(cs_order_number = cr_order_number) AND (cs_item_sk = cr_item_sk)", "AND([cs_order_number cr_order_number =], [cs_item_sk cr_item_sk =])"},
	{"(suppkey_13 <> suppkey_1)", "[suppkey suppkey <>]"},
	// SQL spellings
	{`("d_year" = INTEGER '2000') AND ("d_moy" BETWEEN 1 AND 3)`, "AND([d_year =], [d_moy BETWEEN])"},
	{`NOT (a LIKE 'x%' ESCAPE '\') OR b NOT IN (1, 2) OR c IS NOT NULL`, "OR(NOT([a LIKE]), NOT([b IN]), NOT([c IS_NULL]))"},
	{`x NOT BETWEEN -1 AND +2.5E3 AND y != 3`, "AND(NOT([x BETWEEN]), [y <>])"},
	{`("Weird ""Col""" >= TIMESTAMP '2020-01-01 00:00:00.000 UTC')`, `[weird "col" >=]`},
	{`(t.a + b * 2 - c / d % 3) < e || 'x'`, "[a b c d e <]"},
	{`ts > timestamp(3) with time zone '2020-01-01 00:00:00.000 UTC'`, "[ts >]"},
	{`d < DATE '2000-01-01' + INTERVAL '30' DAY`, "[d <]"},
	{`contains(ARRAY[a, b], c) AND any_match(arr, x -> x > 1)`, "AND([a b c contains], [arr x any_match])"},
	{`a IS DISTINCT FROM b_12`, "[a b IS_DISTINCT_FROM]"},
	{`TRY_CAST(s AS bigint) = 1 AND m['k'] = 'v' AND r.f = 2`, "AND([s =], [m =], [f =])"},
	{`(((a = 1)))`, "[a =]"},
	{`flag`, "[flag]"},
	{`true`, "[]"},
	{`x = ? AND y = double precision '1'`, "AND([x =], [y =])"},
	{`x IN (1, -2, 'a', NULL, TRUE, date '2000-01-01', varchar(3) 'x', double precision '1', timestamp(3) with time zone 'z')`, "[x IN]"},
	{`x IN (1, y_2, f(z), -w)`, "[x y z w IN]"},
	{`x IN (varchar(3) 'a', y)`, "[x y IN]"},
}

func TestParsePredicate(t *testing.T) {
	for _, c := range predicateCases {
		t.Run(c.in, func(t *testing.T) {
			p, err := ParsePredicate(c.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.String(); got != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestPredicateTokensAndText(t *testing.T) {
	p, err := ParsePredicate("((d_year_6 = integer '1999') AND (d_moy_8 BETWEEN integer '9' AND integer '12')) OR (x_1 IS NULL)")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Tokens(), []string{"d_year", "=", "d_moy", "BETWEEN", "x", "IS_NULL"}; !reflect.DeepEqual(got, want) {
		t.Errorf("tokens %v, want %v", got, want)
	}
	q, _ := ParsePredicate("((d_year = integer '2001') AND (d_moy BETWEEN 1 AND 2)) OR (x IS NULL)")
	if p.String() != q.String() {
		t.Errorf("values leak into the normalized text: %s vs %s", p, q)
	}
	if p.Clauses() != 3 {
		t.Errorf("clauses %d", p.Clauses())
	}
	if e, err := ParsePredicate("   "); e != nil || err != nil {
		t.Errorf("blank predicate: %v %v", e, err)
	}
}

func TestParsePredicateErrors(t *testing.T) {
	for _, in := range []string{
		"(a = ", "a = 'unterminated", "a BETWEEN 1", "CASE WHEN a THEN b", "CAST(a bigint)", "a IN 1",
		"f(a", ")", "a = = b", "a IS 3", "EXISTS (SELECT 1)", strings.Repeat("(", 1000) + "a" + strings.Repeat(")", 1000),
		strings.Repeat("NOT ", 1000) + "a", strings.Repeat("-", 1000) + "1",
	} {
		_, err := ParsePredicate(in)
		if !errors.Is(err, ErrPredicate) || !strings.HasPrefix(err.Error(), "estimator: ") {
			t.Errorf("ParsePredicate(%.40q) = %v, want ErrPredicate", in, err)
		}
	}
	if _, err := ParsePredicate(strings.Repeat("a", MaxPredicateBytes+1)); !errors.Is(err, ErrPredicate) {
		t.Errorf("oversized predicate: %v", err)
	}
}

// TestEveryCapturedPredicateParses parses every predicate, join criteria and
// join filter in the captured plans.
func TestEveryCapturedPredicateParses(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range planFiles(t) {
		p, _ := loadOTP(t, f)
		p.Root.Walk(func(n *plan.PlanNode) {
			for _, k := range []string{"filterPredicate", "criteria", "filter"} {
				s := n.Descriptor[k]
				if s == "" || seen[s] {
					continue
				}
				seen[s] = true
				if _, err := ParsePredicate(s); err != nil {
					t.Errorf("%s: %q: %v", f, s, err)
				}
			}
		})
	}
	t.Logf("%d distinct predicate strings", len(seen))
}
