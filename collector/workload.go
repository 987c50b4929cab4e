package collector

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/prestroid/prestroid/internal/workloads"
)

// Template is one benchmark query file.
type Template struct {
	Name    string // "tpcds/q03"
	Family  string // "tpcds" or "tpch"
	Catalog string // connector catalog: "tpcds" or "tpch"
	Text    string // file contents with ${...} placeholders
}

// LoadTemplates reads dir/tpcds/*.sql and dir/tpch/*.sql: trinodb/trino's
// benchmark queries, which are not in the repository (docs/workloads.md
// says where they come from). With none there, the error says how to point
// at them.
func LoadTemplates(dir string) ([]Template, error) {
	var out []Template
	for _, fam := range []string{"tpcds", "tpch"} {
		files, err := filepath.Glob(filepath.Join(dir, fam, "*.sql"))
		if err != nil {
			return nil, err
		}
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("collector: %w", err)
			}
			name := strings.TrimSuffix(filepath.Base(f), ".sql")
			out = append(out, Template{Name: fam + "/" + name, Family: fam, Catalog: fam, Text: string(b)})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("collector: %w", workloads.Missing(dir))
	}
	return out, nil
}

var trailingSemicolon = regexp.MustCompile(`\s*;\s*$`)

// scaleFactor is the numeric scale factor of a schema name, for TPC-H q11.
func scaleFactor(schema string) string {
	if schema == "tiny" {
		return "0.01"
	}
	return strings.TrimPrefix(schema, "sf")
}

// Fill replaces the placeholders for the template's connector catalog at
// the scale (its schema) and removes a trailing semicolon (SOURCE.md,
// "Placeholders").
func (t Template) Fill(scale string) string { return t.FillAt(t.Catalog, scale, scale) }

// FillAt is Fill with the tables in catalog.schema (a materialized copy of
// the scale: Place).
func (t Template) FillAt(catalog, schema, scale string) string {
	s := strings.NewReplacer(
		"${database}", catalog,
		"${schema}", schema,
		"${prefix}", "",
		"${scale}", scaleFactor(scale),
	).Replace(t.Text)
	return strings.TrimRight(trailingSemicolon.ReplaceAllString(s, ""), " \t\r\n")
}

// Columns lists the columns ("table.column") whose literals the template
// compares; their domains are needed to make variants.
func (t Template) Columns(cols map[string]map[string]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range analyzeSQL(tokenize(t.Fill("tiny")), cols) {
		if !seen[g.column] {
			seen[g.column] = true
			out = append(out, g.column)
		}
	}
	sort.Strings(out)
	return out
}

// Item is one planned query of a collection: what to run, with which
// session, and a stable key.
type Item struct {
	Key      string
	Catalog  string
	Schema   string
	Session  map[string]string
	SQL      string
	Workload Workload
}

// itemKey hashes everything that defines an execution, so that the same
// query with the same session and repetition gets the same key in every run.
func itemKey(catalog, schema string, session map[string]string, sql string, rep int) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00", catalog, schema, rep)
	ks := make([]string, 0, len(session))
	for k := range session {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(h, "%s=%s\x00", k, session[k])
	}
	h.Write([]byte(sql))
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// sessionChoices are the session properties varied across variants, as in
// Trino's benchmark harness (session_set_cbo_flags.sql) plus a few that
// change plan shape or parallelism. join_reordering_strategy=NONE is left
// out: with the TPC-DS comma joins it plans cross joins that never finish.
var sessionChoices = []struct {
	name   string
	values []string
}{
	{"join_distribution_type", []string{"PARTITIONED", "BROADCAST"}},
	{"join_reordering_strategy", []string{"ELIMINATE_CROSS_JOINS"}},
	{"task_concurrency", []string{"1", "4", "8"}},
	{"enable_dynamic_filtering", []string{"false"}},
}

// randomSession draws a session: empty (Trino's defaults) with probability
// 1 - share, otherwise one or two varied properties.
func randomSession(rng *rand.Rand, share float64) map[string]string {
	if rng.Float64() >= share {
		return nil
	}
	s := map[string]string{}
	n := 1 + rng.IntN(2)
	for _, i := range rng.Perm(len(sessionChoices))[:n] {
		c := sessionChoices[i]
		s[c.name] = c.values[rng.IntN(len(c.values))]
	}
	return s
}

// GenConfig says what Generate plans.
type GenConfig struct {
	Seed int64
	// Scales are the schemas to run the TPC templates at, in order
	// ("tiny", "sf1"). All of the first scale's items come before the next.
	Scales []string
	// Variants per template and scale; variant 0 is the file's own values
	// with Trino's default session.
	Variants int
	// SessionShare is the share of variants (other than 0) that run with a
	// varied session.
	SessionShare float64
	// Templates restricts the TPC templates to these names (all if empty).
	Templates []string
	// GenScales are the schemas of the generated large queries (none if
	// empty); GenVariants is the count per generator kind and scale.
	GenScales   []string
	GenVariants int
	// Reps runs every item this many times (1 if zero), with distinct keys:
	// the repeated runs measure label noise.
	Reps int
	// Storage is the catalog of materialized copies of the TPC schemas
	// (`prestroid materialize`: schemas tpcds_sf1, ...) to run on; empty
	// runs on the tpch/tpcds connectors. Queries are drawn the same either
	// way (same literals and sessions); only their tables differ.
	Storage string
	// Session is set on every item over the session drawn for it (a drawn
	// property of the same name is replaced), variant 0's too: the same
	// statements, literals included, under e.g. enable_dynamic_filtering
	// =false. It is part of the items' keys (itemKey).
	Session map[string]string
}

// seedFor derives an independent, reproducible random stream for one
// (template, scale, variant): adding templates or variants never changes
// the others.
func seedFor(seed int64, parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(uint64(seed), h.Sum64()))
}

// Generate plans the items of a collection: for each scale, variant by
// variant, every template once (in a seeded order), interleaved with the
// generated large queries; items are deduplicated by key.
func Generate(cfg GenConfig, templates []Template, dom *Domains) []Item {
	if cfg.Reps < 1 {
		cfg.Reps = 1
	}
	keep := map[string]bool{}
	for _, n := range cfg.Templates {
		keep[n] = true
	}
	var ts []Template
	for _, t := range templates {
		if len(keep) == 0 || keep[t.Name] {
			ts = append(ts, t)
		}
	}
	seen := map[string]bool{}
	var out []Item
	add := func(it Item) {
		if len(cfg.Session) > 0 {
			merged := maps.Clone(it.Session)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, cfg.Session)
			it.Session = merged
		}
		for rep := 0; rep < cfg.Reps; rep++ {
			it := it
			it.Workload.Rep = rep
			it.Key = itemKey(it.Catalog, it.Schema, it.Session, it.SQL, rep)
			if seen[it.Key] {
				continue
			}
			seen[it.Key] = true
			out = append(out, it)
		}
	}
	type slot struct {
		scale string
		gen   bool
	}
	var slots []slot
	for _, s := range cfg.Scales {
		slots = append(slots, slot{s, false})
	}
	for _, s := range cfg.GenScales {
		if !contains(cfg.Scales, s) {
			slots = append(slots, slot{s, true})
		}
	}
	for _, sl := range slots {
		genHere := contains(cfg.GenScales, sl.scale)
		order := seedFor(cfg.Seed, "order", sl.scale).Perm(len(ts))
		variants := cfg.Variants
		if sl.gen {
			variants = 0
		}
		nv := max(variants, cfg.GenVariants)
		for v := 0; v < nv; v++ {
			if v < variants {
				for _, i := range order {
					add(templateVariant(cfg.Storage, ts[i], sl.scale, v, cfg.Seed, cfg.SessionShare, dom))
				}
			}
			if genHere && v < cfg.GenVariants {
				for _, kind := range GenKinds {
					add(generatedQuery(cfg.Storage, kind, sl.scale, v, cfg.Seed, cfg.SessionShare, dom))
				}
			}
		}
	}
	return out
}

// TemplateVariant makes variant v of template t at a scale, on the
// template's connector.
func TemplateVariant(t Template, scale string, v int, seed int64, sessionShare float64, dom *Domains) Item {
	return templateVariant("", t, scale, v, seed, sessionShare, dom)
}

// TemplateVariantOn is TemplateVariant on storage: the catalog of the
// materialized copies of the TPC schemas (Place; "" is the TPC
// connectors'), with the same literals and session.
func TemplateVariantOn(storage string, t Template, scale string, v int, seed int64, sessionShare float64, dom *Domains) Item {
	return templateVariant(storage, t, scale, v, seed, sessionShare, dom)
}

// templateVariant makes variant v of template t at a scale on storage
// (Place); the literals and session drawn do not depend on storage.
func templateVariant(storage string, t Template, scale string, v int, seed int64, sessionShare float64, dom *Domains) Item {
	cat, schema := Place(storage, t.Family, scale)
	sql := t.FillAt(cat, schema, scale)
	it := Item{Catalog: cat, Schema: schema, Workload: Workload{
		Family: t.Family, Template: t.Name, Variant: v, Scale: scale, Storage: storage, Seed: seed,
	}}
	if v > 0 {
		rng := seedFor(seed, t.Name, scale, fmt.Sprint(v))
		var params map[string]string
		sql, params = substitute(sql, dom.Columns[t.Catalog], func(col string) *Domain {
			return dom.Lookup(t.Catalog, scale, col)
		}, rng)
		it.Workload.Params = params
		it.Session = randomSession(rng, sessionShare)
	}
	it.SQL = sql
	return it
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
