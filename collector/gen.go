package collector

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
)

// Generated queries: larger and more diverse than the TPC templates, over
// the tpcds schema, so that a share of plans reaches the large-plan regime
// (over 1,000 O-T-P nodes). Every kind is a "template" of its own
// ("gen/union", ...) for the train/validation/test split. Literals come from
// the same column domains as the template variants.

// GenKinds are the generator kinds, in the order Generate interleaves them.
var GenKinds = []string{"union", "joinchain", "nested", "window", "inlist", "unionjoin"}

type dimRef struct {
	fk, table, pk string
}

type factTable struct {
	table, alias string
	item, cust   string // item and customer foreign keys
	dims         []dimRef
	measures     []string
}

var genFacts = []factTable{
	{"store_sales", "ss", "ss_item_sk", "ss_customer_sk", []dimRef{
		{"ss_sold_date_sk", "date_dim", "d_date_sk"}, {"ss_item_sk", "item", "i_item_sk"},
		{"ss_customer_sk", "customer", "c_customer_sk"}, {"ss_store_sk", "store", "s_store_sk"},
		{"ss_hdemo_sk", "household_demographics", "hd_demo_sk"}, {"ss_cdemo_sk", "customer_demographics", "cd_demo_sk"},
		{"ss_promo_sk", "promotion", "p_promo_sk"}, {"ss_sold_time_sk", "time_dim", "t_time_sk"},
		{"ss_addr_sk", "customer_address", "ca_address_sk"},
	}, []string{"ss_quantity", "ss_sales_price", "ss_net_profit", "ss_ext_sales_price", "ss_list_price", "ss_coupon_amt"}},
	{"catalog_sales", "cs", "cs_item_sk", "cs_bill_customer_sk", []dimRef{
		{"cs_sold_date_sk", "date_dim", "d_date_sk"}, {"cs_item_sk", "item", "i_item_sk"},
		{"cs_bill_customer_sk", "customer", "c_customer_sk"}, {"cs_warehouse_sk", "warehouse", "w_warehouse_sk"},
		{"cs_bill_hdemo_sk", "household_demographics", "hd_demo_sk"}, {"cs_bill_cdemo_sk", "customer_demographics", "cd_demo_sk"},
		{"cs_promo_sk", "promotion", "p_promo_sk"}, {"cs_sold_time_sk", "time_dim", "t_time_sk"},
		{"cs_ship_mode_sk", "ship_mode", "sm_ship_mode_sk"}, {"cs_bill_addr_sk", "customer_address", "ca_address_sk"},
	}, []string{"cs_quantity", "cs_sales_price", "cs_net_profit", "cs_ext_sales_price", "cs_list_price"}},
	{"web_sales", "ws", "ws_item_sk", "ws_bill_customer_sk", []dimRef{
		{"ws_sold_date_sk", "date_dim", "d_date_sk"}, {"ws_item_sk", "item", "i_item_sk"},
		{"ws_bill_customer_sk", "customer", "c_customer_sk"}, {"ws_warehouse_sk", "warehouse", "w_warehouse_sk"},
		{"ws_bill_hdemo_sk", "household_demographics", "hd_demo_sk"}, {"ws_bill_cdemo_sk", "customer_demographics", "cd_demo_sk"},
		{"ws_promo_sk", "promotion", "p_promo_sk"}, {"ws_sold_time_sk", "time_dim", "t_time_sk"},
		{"ws_ship_mode_sk", "ship_mode", "sm_ship_mode_sk"}, {"ws_bill_addr_sk", "customer_address", "ca_address_sk"},
	}, []string{"ws_quantity", "ws_sales_price", "ws_net_profit", "ws_ext_sales_price", "ws_list_price"}},
}

// genFilters are the dimension attributes generated predicates filter on.
var genFilters = map[string][]string{
	"date_dim":               {"d_year", "d_moy", "d_qoy", "d_dow", "d_dom"},
	"item":                   {"i_category", "i_class", "i_brand", "i_color", "i_size", "i_manufact_id", "i_current_price", "i_units"},
	"customer":               {"c_birth_year", "c_birth_month", "c_preferred_cust_flag", "c_birth_country"},
	"store":                  {"s_state", "s_city", "s_number_employees"},
	"household_demographics": {"hd_dep_count", "hd_buy_potential", "hd_vehicle_count"},
	"customer_demographics":  {"cd_gender", "cd_marital_status", "cd_education_status", "cd_credit_rating", "cd_dep_count"},
	"promotion":              {"p_channel_email", "p_channel_tv", "p_channel_event"},
	"time_dim":               {"t_hour", "t_minute", "t_shift", "t_meal_time"},
	"customer_address":       {"ca_state", "ca_gmt_offset", "ca_location_type", "ca_city"},
	"warehouse":              {"w_state", "w_warehouse_sq_ft"},
	"ship_mode":              {"sm_type", "sm_carrier"},
}

// genGroupBy are low-cardinality attributes to group by.
var genGroupBy = map[string][]string{
	"date_dim": {"d_year", "d_moy", "d_qoy"}, "item": {"i_category", "i_class", "i_brand"},
	"customer": {"c_birth_country", "c_preferred_cust_flag"}, "store": {"s_state", "s_store_name"},
	"household_demographics": {"hd_buy_potential", "hd_dep_count"}, "customer_demographics": {"cd_gender", "cd_marital_status"},
	"promotion": {"p_channel_email"}, "time_dim": {"t_shift", "t_hour"}, "customer_address": {"ca_state", "ca_location_type"},
	"warehouse": {"w_state"}, "ship_mode": {"sm_type"},
}

// GenColumns lists the columns whose domains the generators draw from.
func GenColumns() []string {
	var out []string
	for t, cs := range genFilters {
		for _, c := range cs {
			out = append(out, t+"."+c)
		}
	}
	out = append(out, "item.i_item_id", "customer.c_last_name", "customer_address.ca_zip")
	for _, f := range genFacts {
		for _, m := range f.measures {
			out = append(out, f.table+"."+m)
		}
	}
	sort.Strings(out)
	return out
}

// gen holds one generated query's state.
type gen struct {
	rng   *rand.Rand
	dom   *Domains
	scale string
	// catalog and schema hold the tables (Place: the connector, or a
	// materialized copy).
	catalog, schema string
	params          map[string]string
	n               int // alias counter
}

func (g *gen) tbl(t string) string { return g.catalog + "." + g.schema + "." + t }

func (g *gen) alias(prefix string) string {
	g.n++
	return fmt.Sprintf("%s%d", prefix, g.n)
}

func (g *gen) pick(xs []string) string { return xs[g.rng.IntN(len(xs))] }

func (g *gen) lit(d *Domain, v string) string {
	switch d.Kind {
	case "str":
		return quoteString(v)
	case "date":
		return "DATE " + quoteString(v)
	}
	if strings.HasPrefix(v, "-") {
		return "(" + v + ")"
	}
	return v
}

// pred renders a random predicate on alias.column (table.column's domain);
// "" when the domain is unknown.
func (g *gen) pred(alias, table, column string) string {
	d := g.dom.Lookup("tpcds", g.scale, table+"."+column)
	if d == nil || d.empty() {
		return ""
	}
	ref := alias + "." + column
	if d.Kind == "date" {
		a := d.randomDate(g.rng)
		return fmt.Sprintf("%s BETWEEN DATE '%s' AND DATE '%s' + INTERVAL '%d' DAY", ref, a, a, 7+g.rng.IntN(90))
	}
	switch r := g.rng.IntN(10); {
	case r < 4 || len(d.Values) < 3:
		return fmt.Sprintf("%s = %s", ref, g.lit(d, g.pick(d.Values)))
	case r < 7:
		k := 2 + g.rng.IntN(min(6, len(d.Values)-1))
		return fmt.Sprintf("%s IN (%s)", ref, g.list(d, k))
	default:
		i, j := g.rng.IntN(len(d.Values)), g.rng.IntN(len(d.Values))
		if d.Kind == "num" {
			a, b := d.Values[i], d.Values[j]
			if parseNum(a) > parseNum(b) {
				a, b = b, a
			}
			return fmt.Sprintf("%s BETWEEN %s AND %s", ref, g.lit(d, a), g.lit(d, b))
		}
		return fmt.Sprintf("%s <> %s", ref, g.lit(d, d.Values[i]))
	}
}

// list renders k distinct values of d (fewer if the domain is smaller).
func (g *gen) list(d *Domain, k int) string {
	idx := g.rng.Perm(len(d.Values))
	if k > len(idx) {
		k = len(idx)
	}
	vs := make([]string, k)
	for i := range vs {
		vs[i] = g.lit(d, d.Values[idx[i]])
	}
	return strings.Join(vs, ", ")
}

func parseNum(s string) float64 {
	var f float64
	fmt.Sscan(s, &f)
	return f
}

// filters renders n random predicates on the dimension (joined by AND).
func (g *gen) filters(alias, table string, n int) []string {
	var out []string
	cs := genFilters[table]
	for _, i := range g.rng.Perm(len(cs)) {
		if len(out) >= n {
			break
		}
		if p := g.pred(alias, table, cs[i]); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// starJoin renders FROM fact JOIN k dims, with one or two predicates per
// dimension; it returns the FROM text, the WHERE conjuncts, the fact alias
// and the joined dims (alias -> table).
func (g *gen) starJoin(f factTable, k int) (string, []string, string, map[string]string) {
	fa := g.alias(f.alias)
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", g.tbl(f.table), fa)
	var where []string
	dims := map[string]string{}
	for _, i := range g.rng.Perm(len(f.dims))[:min(k, len(f.dims))] {
		d := f.dims[i]
		da := g.alias(d.table[:1])
		dims[da] = d.table
		fmt.Fprintf(&b, "\n  JOIN %s %s ON %s.%s = %s.%s", g.tbl(d.table), da, fa, d.fk, da, d.pk)
		where = append(where, g.filters(da, d.table, 1+g.rng.IntN(2))...)
		// Snowflake: customer -> address, household demographics -> income band.
		if d.table == "customer" && g.rng.IntN(2) == 0 {
			ca := g.alias("ca")
			dims[ca] = "customer_address"
			fmt.Fprintf(&b, "\n  JOIN %s %s ON %s.c_current_addr_sk = %s.ca_address_sk", g.tbl("customer_address"), ca, da, ca)
			where = append(where, g.filters(ca, "customer_address", 1)...)
		}
		if d.table == "household_demographics" && g.rng.IntN(2) == 0 {
			ib := g.alias("ib")
			fmt.Fprintf(&b, "\n  JOIN %s %s ON %s.hd_income_band_sk = %s.ib_income_band_sk", g.tbl("income_band"), ib, da, ib)
			where = append(where, fmt.Sprintf("%s.ib_upper_bound >= %d", ib, 10000*(1+g.rng.IntN(20))))
		}
	}
	return b.String(), where, fa, dims
}

func (g *gen) groupCols(dims map[string]string, n int) []string {
	var as []string
	for a := range dims {
		as = append(as, a)
	}
	sort.Strings(as)
	var out []string
	for _, i := range g.rng.Perm(len(as)) {
		if len(out) >= n {
			break
		}
		if cs := genGroupBy[dims[as[i]]]; len(cs) > 0 {
			out = append(out, as[i]+"."+g.pick(cs))
		}
	}
	return out
}

func whereClause(ps []string) string {
	if len(ps) == 0 {
		return ""
	}
	return "\nWHERE " + strings.Join(ps, "\n  AND ")
}

// GeneratedQuery makes variant v of a generator kind at a scale, over the
// tpcds connector.
func GeneratedQuery(kind, scale string, v int, seed int64, sessionShare float64, dom *Domains) Item {
	return generatedQuery("", kind, scale, v, seed, sessionShare, dom)
}

// generatedQuery makes variant v of a generator kind at a scale over the
// tables of storage (Place). The random draws do not depend on storage: the
// same variant on another storage is the same query on other tables.
func generatedQuery(storage, kind, scale string, v int, seed int64, sessionShare float64, dom *Domains) Item {
	cat, schema := Place(storage, "tpcds", scale)
	g := &gen{rng: seedFor(seed, "gen/"+kind, scale, fmt.Sprint(v)), dom: dom, scale: scale, catalog: cat, schema: schema, params: map[string]string{}}
	var sql string
	switch kind {
	case "union":
		sql = g.union(8+g.rng.IntN(33), 1, 3)
	case "unionjoin":
		sql = g.union(10+g.rng.IntN(16), 3, 5)
	case "joinchain":
		sql = g.joinChain()
	case "nested":
		sql = g.nested()
	case "window":
		sql = g.window()
	case "inlist":
		sql = g.inList()
	default:
		panic("collector: unknown generator " + kind)
	}
	it := Item{Catalog: cat, Schema: schema, SQL: sql, Workload: Workload{
		Family: "gen", Template: "gen/" + kind, Variant: v, Scale: scale, Storage: storage, Seed: seed, Params: g.params,
	}}
	it.Session = randomSession(g.rng, sessionShare)
	return it
}

// union: UNION ALL of n star-join branches (each with lo..hi dimensions),
// aggregated on top. Trino refuses plans of more than 150 stages
// (query.max-stage-count): about 40 one-join or 25 five-join branches.
func (g *gen) union(n, lo, hi int) string {
	g.params["branches"] = fmt.Sprint(n)
	var parts []string
	for i := 0; i < n; i++ {
		f := genFacts[g.rng.IntN(len(genFacts))]
		from, where, fa, _ := g.starJoin(f, lo+g.rng.IntN(hi-lo+1))
		m := g.pick(f.measures)
		parts = append(parts, fmt.Sprintf("SELECT %d AS branch, %s.%s AS m\nFROM %s%s", i%7, fa, m, from, whereClause(where)))
	}
	return "SELECT branch, count(*) AS cnt, sum(m) AS total, avg(m) AS mean\nFROM (\n" +
		strings.Join(parts, "\nUNION ALL\n") + "\n) u\nGROUP BY branch\nORDER BY branch"
}

// joinChain: one fact with many dimensions (snowflaked), joined with
// aggregated other channels on item and customer.
func (g *gen) joinChain() string {
	f := genFacts[g.rng.IntN(len(genFacts))]
	k := 4 + g.rng.IntN(len(f.dims)-3)
	g.params["dims"] = fmt.Sprint(k)
	from, where, fa, dims := g.starJoin(f, k)
	extra := g.rng.IntN(3)
	g.params["channels"] = fmt.Sprint(extra)
	for i := 0; i < extra; i++ {
		o := genFacts[g.rng.IntN(len(genFacts))]
		xa := g.alias("x")
		m := g.pick(o.measures)
		from += fmt.Sprintf("\n  JOIN (SELECT %s AS item_sk, sum(%s) AS s, count(*) AS c FROM %s GROUP BY %s) %s ON %s.item_sk = %s.%s",
			o.item, m, g.tbl(o.table), o.item, xa, xa, fa, f.item)
	}
	gc := g.groupCols(dims, 1+g.rng.IntN(3))
	if len(gc) == 0 {
		gc = []string{"1"}
	}
	m := g.pick(f.measures)
	return fmt.Sprintf("SELECT %s, count(*) AS cnt, sum(%s.%s) AS total\nFROM %s%s\nGROUP BY %s\nORDER BY total DESC, %s\nLIMIT 100",
		strings.Join(gc, ", "), fa, m, from, whereClause(where), strings.Join(gc, ", "), strings.Join(gc, ", "))
}

// nestedLink is a way to restrict a table by a subquery on another.
type nestedLink struct {
	col, table, subCol string
}

var nestedLinks = map[string][]nestedLink{
	"item": {{"i_item_sk", "store_sales", "ss_item_sk"}, {"i_item_sk", "catalog_sales", "cs_item_sk"}, {"i_item_sk", "web_sales", "ws_item_sk"}},
	"customer": {{"c_customer_sk", "store_sales", "ss_customer_sk"}, {"c_customer_sk", "web_sales", "ws_bill_customer_sk"},
		{"c_current_addr_sk", "customer_address", "ca_address_sk"}, {"c_current_hdemo_sk", "household_demographics", "hd_demo_sk"}},
	"store_sales":            {{"ss_item_sk", "item", "i_item_sk"}, {"ss_customer_sk", "customer", "c_customer_sk"}, {"ss_sold_date_sk", "date_dim", "d_date_sk"}, {"ss_store_sk", "store", "s_store_sk"}},
	"catalog_sales":          {{"cs_item_sk", "item", "i_item_sk"}, {"cs_bill_customer_sk", "customer", "c_customer_sk"}, {"cs_sold_date_sk", "date_dim", "d_date_sk"}},
	"web_sales":              {{"ws_item_sk", "item", "i_item_sk"}, {"ws_bill_customer_sk", "customer", "c_customer_sk"}, {"ws_sold_date_sk", "date_dim", "d_date_sk"}},
	"customer_address":       {{"ca_address_sk", "customer", "c_current_addr_sk"}},
	"household_demographics": {{"hd_demo_sk", "customer", "c_current_hdemo_sk"}},
	"date_dim":               {{"d_date_sk", "store_sales", "ss_sold_date_sk"}},
	"store":                  {{"s_store_sk", "store_sales", "ss_store_sk"}},
}

// cond renders the WHERE conditions of table (alias a) with nested IN /
// EXISTS subqueries down to depth.
func (g *gen) cond(a, table string, depth int) []string {
	ps := g.filters(a, table, 1+g.rng.IntN(2))
	links := nestedLinks[table]
	if depth <= 0 || len(links) == 0 {
		return ps
	}
	for i, n := 0, 1+g.rng.IntN(2); i < n; i++ {
		l := links[g.rng.IntN(len(links))]
		sa := g.alias("n")
		inner := g.cond(sa, l.table, depth-1)
		if g.rng.IntN(3) == 0 {
			ps = append(ps, fmt.Sprintf("EXISTS (SELECT 1 FROM %s %s WHERE %s.%s = %s.%s%s)",
				g.tbl(l.table), sa, sa, l.subCol, a, l.col, prefixAnd(inner)))
		} else {
			ps = append(ps, fmt.Sprintf("%s.%s IN (SELECT %s.%s FROM %s %s%s)",
				a, l.col, sa, l.subCol, g.tbl(l.table), sa, whereClause(inner)))
		}
	}
	return ps
}

func prefixAnd(ps []string) string {
	if len(ps) == 0 {
		return ""
	}
	return " AND " + strings.Join(ps, " AND ")
}

// nested: a dimension filtered through nested IN/EXISTS subqueries, plus a
// correlated scalar subquery.
func (g *gen) nested() string {
	roots := []string{"item", "customer"}
	root := g.pick(roots)
	depth := 2 + g.rng.IntN(3)
	g.params["depth"] = fmt.Sprint(depth)
	ra := g.alias(root[:1])
	ps := g.cond(ra, root, depth)
	sel := ra + ".i_category, count(*) AS cnt, avg(" + ra + ".i_current_price) AS price"
	grp := ra + ".i_category"
	if root == "item" {
		if g.rng.IntN(2) == 0 {
			sa := g.alias("s")
			ps = append(ps, fmt.Sprintf("%s.i_current_price > (SELECT 1.1 * avg(%s.i_current_price) FROM %s %s WHERE %s.i_category = %s.i_category)",
				ra, sa, g.tbl("item"), sa, sa, ra))
		}
	} else {
		sel = ra + ".c_birth_country, count(*) AS cnt, avg(" + ra + ".c_birth_year) AS year"
		grp = ra + ".c_birth_country"
	}
	return fmt.Sprintf("SELECT %s\nFROM %s %s%s\nGROUP BY %s\nORDER BY cnt DESC, %s\nLIMIT 100",
		sel, g.tbl(root), ra, whereClause(ps), grp, grp)
}

// window: a star-join aggregate under several window functions with
// different partitions and frames.
func (g *gen) window() string {
	f := genFacts[g.rng.IntN(len(genFacts))]
	from, where, fa, dims := g.starJoin(f, 2+g.rng.IntN(3))
	da := ""
	for a, t := range dims {
		if t == "date_dim" {
			da = a
		}
	}
	if da == "" {
		da = g.alias("d")
		from += fmt.Sprintf("\n  JOIN %s %s ON %s.%s = %s.d_date_sk", g.tbl("date_dim"), da, fa, f.dims[0].fk, da)
	}
	gc := g.groupCols(dims, 1+g.rng.IntN(2))
	keys := []string{da + ".d_year", da + ".d_moy"}
	for _, c := range gc {
		if c != keys[0] && c != keys[1] {
			keys = append(keys, c)
		}
	}
	var sel []string
	for i, k := range keys {
		sel = append(sel, fmt.Sprintf("%s AS k%d", k, i))
	}
	m := g.pick(f.measures)
	base := fmt.Sprintf("SELECT %s, sum(%s.%s) AS s, count(*) AS c\nFROM %s%s\nGROUP BY %s",
		strings.Join(sel, ", "), fa, m, from, whereClause(where), strings.Join(keys, ", "))
	nw := 2 + g.rng.IntN(7)
	g.params["windows"] = fmt.Sprint(nw)
	var ws []string
	for i := 0; i < nw; i++ {
		part := fmt.Sprintf("k%d", g.rng.IntN(len(keys)))
		switch g.rng.IntN(6) {
		case 0:
			ws = append(ws, fmt.Sprintf("rank() OVER (PARTITION BY %s ORDER BY s DESC) AS w%d", part, i))
		case 1:
			ws = append(ws, fmt.Sprintf("avg(s) OVER (PARTITION BY %s) AS w%d", part, i))
		case 2:
			ws = append(ws, fmt.Sprintf("lag(s, %d) OVER (PARTITION BY %s ORDER BY k0, k1) AS w%d", 1+g.rng.IntN(3), part, i))
		case 3:
			ws = append(ws, fmt.Sprintf("sum(s) OVER (PARTITION BY %s ORDER BY k0, k1 ROWS BETWEEN %d PRECEDING AND CURRENT ROW) AS w%d", part, 1+g.rng.IntN(5), i))
		case 4:
			ws = append(ws, fmt.Sprintf("row_number() OVER (ORDER BY c DESC, s) AS w%d", i))
		default:
			ws = append(ws, fmt.Sprintf("max(c) OVER (PARTITION BY %s, k1) AS w%d", part, i))
		}
	}
	return fmt.Sprintf("WITH base AS (\n%s\n)\nSELECT *\nFROM (SELECT base.*, %s FROM base) t\nWHERE s > 0\nORDER BY s DESC, k0, k1\nLIMIT 100",
		base, strings.Join(ws, ",\n  "))
}

// inList: star join with large IN lists drawn from real domains.
func (g *gen) inList() string {
	f := genFacts[g.rng.IntN(len(genFacts))]
	fa := g.alias(f.alias)
	ia, ca := g.alias("i"), g.alias("c")
	var itemDim, custDim dimRef
	for _, d := range f.dims {
		switch d.table {
		case "item":
			itemDim = d
		case "customer":
			custDim = d
		}
	}
	from := fmt.Sprintf("%s %s\n  JOIN %s %s ON %s.%s = %s.i_item_sk\n  JOIN %s %s ON %s.%s = %s.c_customer_sk",
		g.tbl(f.table), fa, g.tbl("item"), ia, fa, itemDim.fk, ia, g.tbl("customer"), ca, fa, custDim.fk, ca)
	var ps []string
	n := 50 + g.rng.IntN(1950)
	g.params["in_items"] = fmt.Sprint(n)
	if d := g.dom.Lookup("tpcds", g.scale, "item.i_item_id"); d != nil && !d.empty() {
		ps = append(ps, fmt.Sprintf("%s.i_item_id IN (%s)", ia, g.list(d, n)))
	}
	if d := g.dom.Lookup("tpcds", g.scale, "customer.c_last_name"); d != nil && !d.empty() && g.rng.IntN(2) == 0 {
		k := 20 + g.rng.IntN(500)
		g.params["in_names"] = fmt.Sprint(k)
		ps = append(ps, fmt.Sprintf("%s.c_last_name IN (%s)", ca, g.list(d, k)))
	}
	ps = append(ps, g.filters(ia, "item", 1)...)
	return fmt.Sprintf("SELECT %s.i_category, %s.c_preferred_cust_flag, count(*) AS cnt, sum(%s.%s) AS total\nFROM %s%s\nGROUP BY 1, 2\nORDER BY 1, 2",
		ia, ca, fa, g.pick(f.measures), from, whereClause(ps))
}
