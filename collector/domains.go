package collector

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Domains caches, per catalog, the columns of its tables and, per column and
// scale, the values the column takes (read with SELECT DISTINCT from the
// connector). Saved as JSON so that generation from a seed is reproducible
// without a server.
type Domains struct {
	// Columns: catalog -> table -> column -> Trino type.
	Columns map[string]map[string]map[string]string `json:"columns"`
	// Values: "catalog.schema.table.column" -> domain.
	Values map[string]*Domain `json:"values"`
	// DateSK: catalog.schema -> [first, last] ss_sold_date_sk, the date_dim
	// rows that carry sales; date_dim domains are restricted to them.
	DateSK map[string][2]int64 `json:"date_sk,omitempty"`
}

// factTables hold sales; their value domains do not change with the scale
// factor, so they are read from the tiny schema (a DISTINCT over sf1 facts
// costs a full scan of generated data).
var factTables = map[string]bool{
	"store_sales": true, "store_returns": true, "catalog_sales": true, "catalog_returns": true,
	"web_sales": true, "web_returns": true, "inventory": true,
	"lineitem": true, "orders": true, "partsupp": true,
}

// LoadDomains reads a cache file; a missing file gives an empty cache.
func LoadDomains(path string) (*Domains, error) {
	d := &Domains{Columns: map[string]map[string]map[string]string{}, Values: map[string]*Domain{}, DateSK: map[string][2]int64{}}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return d, nil
	}
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	if err := json.Unmarshal(b, d); err != nil {
		return nil, fmt.Errorf("collector: domains %s: %w", path, err)
	}
	if d.DateSK == nil {
		d.DateSK = map[string][2]int64{}
	}
	for _, v := range d.Values {
		for i, x := range v.Values {
			v.Values[i] = normalizeValue(v.Kind, x)
		}
	}
	return d, nil
}

// normalizeValue trims char padding and writes doubles in plain decimal
// notation (Trino casts 33.0 to '3.3E1').
func normalizeValue(kind, v string) string {
	v = strings.TrimRight(v, " ")
	if kind == "num" && strings.ContainsAny(v, "eE") {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return strconv.FormatFloat(f, 'f', -1, 64)
		}
	}
	return v
}

// Save writes the cache (sorted keys, so diffs stay small).
func (d *Domains) Save(path string) error {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("collector: %w", err)
	}
	return os.Rename(tmp, path)
}

// domainSchema is the schema a column's values are read from.
func domainSchema(table, schema string) string {
	if factTables[table] {
		return "tiny"
	}
	return schema
}

// Lookup returns the domain of column ("table.column") of catalog at the
// given scale, or nil.
func (d *Domains) Lookup(catalog, schema, column string) *Domain {
	table := column[:strings.IndexByte(column, '.')]
	return d.Values[catalog+"."+domainSchema(table, schema)+"."+column]
}

// errNotCached is the error of a fetch that needs a server when db is nil:
// a PrestoDB collection plans from the cache that Trino's runs filled, so
// that its items are Trino's items.
func errNotCached(what string) error {
	return fmt.Errorf("collector: %s not in the domain cache, and no Trino to read it from (PrestoDB collections plan from the cache filled by a Trino run)", what)
}

// FetchColumns reads the column lists of catalogs (from their tiny schema)
// unless cached. A nil db fails on the first catalog not cached.
func (d *Domains) FetchColumns(ctx context.Context, db *sql.DB, catalogs ...string) error {
	for _, cat := range catalogs {
		if len(d.Columns[cat]) > 0 {
			continue
		}
		if db == nil {
			return errNotCached("the columns of " + cat)
		}
		rows, err := db.QueryContext(ctx, fmt.Sprintf(
			"SELECT table_name, column_name, data_type FROM %s.information_schema.columns WHERE table_schema = 'tiny'", cat))
		if err != nil {
			return fmt.Errorf("collector: columns of %s: %w", cat, err)
		}
		m := map[string]map[string]string{}
		for rows.Next() {
			var t, c, typ string
			if err := rows.Scan(&t, &c, &typ); err != nil {
				rows.Close()
				return fmt.Errorf("collector: columns of %s: %w", cat, err)
			}
			if m[t] == nil {
				m[t] = map[string]string{}
			}
			m[t][c] = typ
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("collector: columns of %s: %w", cat, err)
		}
		d.Columns[cat] = m
	}
	return nil
}

// typeKind maps a Trino type to a domain kind ("" if not substitutable).
func typeKind(typ string) string {
	switch {
	case typ == "date":
		return "date"
	case strings.HasPrefix(typ, "varchar"), strings.HasPrefix(typ, "char"):
		return "str"
	case typ == "integer", typ == "bigint", typ == "smallint", typ == "tinyint", typ == "double", typ == "real",
		strings.HasPrefix(typ, "decimal"):
		return "num"
	}
	return ""
}

// maxDomainValues bounds a domain; larger domains keep an arbitrary sample.
const maxDomainValues = 3000

// Fetch reads the domains of columns ("table.column") of catalog at schema
// that are not cached yet. A nil db fails on the first one not cached.
func (d *Domains) Fetch(ctx context.Context, db *sql.DB, catalog, schema string, columns []string) error {
	sort.Strings(columns)
	for _, col := range columns {
		i := strings.IndexByte(col, '.')
		table, name := col[:i], col[i+1:]
		sch := domainSchema(table, schema)
		key := catalog + "." + sch + "." + col
		if _, ok := d.Values[key]; ok {
			continue
		}
		kind := typeKind(d.Columns[catalog][table][name])
		if kind == "" {
			d.Values[key] = &Domain{Kind: "none"}
			continue
		}
		if db == nil {
			return errNotCached("the domain of " + key)
		}
		// Quoted: a scale's schema may not be an identifier (sf0.1).
		from := quoteIdent(catalog) + "." + quoteIdent(sch) + "." + quoteIdent(table)
		where := fmt.Sprintf("%q IS NOT NULL", name)
		if catalog == "tpcds" && table == "date_dim" {
			r, err := d.dateSK(ctx, db, catalog, sch)
			if err != nil {
				return err
			}
			where += fmt.Sprintf(" AND d_date_sk BETWEEN %d AND %d", r[0], r[1])
		}
		dom := &Domain{Kind: kind}
		if kind == "date" {
			q := fmt.Sprintf("SELECT CAST(min(%q) AS varchar), CAST(max(%q) AS varchar) FROM %s WHERE %s", name, name, from, where)
			if err := db.QueryRowContext(ctx, q).Scan(&dom.Min, &dom.Max); err != nil {
				return fmt.Errorf("collector: domain %s: %w", key, err)
			}
		} else {
			q := fmt.Sprintf("SELECT DISTINCT CAST(%q AS varchar) FROM %s WHERE %s LIMIT %d", name, from, where, maxDomainValues)
			rows, err := db.QueryContext(ctx, q)
			if err != nil {
				return fmt.Errorf("collector: domain %s: %w", key, err)
			}
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					rows.Close()
					return fmt.Errorf("collector: domain %s: %w", key, err)
				}
				dom.Values = append(dom.Values, normalizeValue(kind, v))
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("collector: domain %s: %w", key, err)
			}
			sort.Strings(dom.Values)
		}
		d.Values[key] = dom
	}
	return nil
}

func (d *Domains) dateSK(ctx context.Context, db *sql.DB, catalog, schema string) ([2]int64, error) {
	k := catalog + "." + schema
	if r, ok := d.DateSK[k]; ok {
		return r, nil
	}
	var r [2]int64
	q := fmt.Sprintf("SELECT min(ss_sold_date_sk), max(ss_sold_date_sk) FROM %s.tiny.store_sales", catalog)
	if err := db.QueryRowContext(ctx, q).Scan(&r[0], &r[1]); err != nil {
		return r, fmt.Errorf("collector: sales date range: %w", err)
	}
	d.DateSK[k] = r
	return r, nil
}
