package collector

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestShapeIgnoresLiteralsButNotSessionOrSchema(t *testing.T) {
	a := Shape("tpch", "tiny", nil, "SELECT * FROM lineitem WHERE quantity < 24")
	if b := Shape("tpch", "tiny", nil, "select *  from lineitem where quantity < 7"); a != b {
		t.Fatalf("literals and spacing change the shape: %s vs %s", a, b)
	}
	for name, s := range map[string]string{
		"schema":  Shape("tpch", "sf1", nil, "SELECT * FROM lineitem WHERE quantity < 24"),
		"session": Shape("tpch", "tiny", map[string]string{"join_distribution_type": "BROADCAST"}, "SELECT * FROM lineitem WHERE quantity < 24"),
		"sql":     Shape("tpch", "tiny", nil, "SELECT * FROM lineitem WHERE discount < 24"),
	} {
		if s == a {
			t.Errorf("another %s gives the same shape", name)
		}
	}
}

func TestShapeTrackerIsPerJVMAndResumesFromTheFile(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	jvm := JVM{Node: "n1", StartedAt: t0, Slack: 2 * time.Second}
	// The file says shape "a" ran on this JVM (start estimated 1 s off) and
	// shape "b" on an earlier one.
	past := []*Warmth{
		{Shape: "a", Node: "n1", StartedAt: t0.Add(time.Second)},
		{Shape: "b", Node: "n1", StartedAt: t0.Add(-time.Hour)},
	}
	tr := newShapeTracker(past)
	steps := []struct {
		jvm   JVM
		shape string
		warm  bool
	}{
		{jvm, "a", true},  // from the file
		{jvm, "b", false}, // ran on another JVM only
		{jvm, "b", true},  // now it ran here
		{JVM{Node: "n1", StartedAt: t0.Add(-time.Second), Slack: 2 * time.Second}, "b", true}, // same JVM, estimate jitter
		{JVM{Node: "n1", StartedAt: t0.Add(time.Hour), Slack: 2 * time.Second}, "b", false},   // restarted
		{JVM{Node: "n1", StartedAt: t0.Add(time.Hour), Slack: 2 * time.Second}, "a", false},
		{JVM{Node: "n2", StartedAt: t0.Add(time.Hour), Slack: 2 * time.Second}, "a", false}, // another node
	}
	for i, s := range steps {
		warm, got := tr.mark(s.jvm, s.shape)
		if warm != s.warm {
			t.Fatalf("step %d (%s on %s@%s): warm=%v, want %v", i, s.shape, s.jvm.Node, s.jvm.StartedAt, warm, s.warm)
		}
		if !s.jvm.Same(got.Node, got.StartedAt) {
			t.Fatalf("step %d: reported JVM %+v is not %+v", i, got, s.jvm)
		}
		if i < 4 && !got.StartedAt.Equal(t0.Add(time.Second)) {
			t.Fatalf("step %d: start time %s, want the file's %s", i, got.StartedAt, t0.Add(time.Second))
		}
	}
}

func TestLoadAvgReadsProc(t *testing.T) {
	l, ok := loadAvg()
	if !ok {
		t.Skip("no /proc/loadavg")
	}
	for _, v := range l {
		if v < 0 {
			t.Fatalf("load %v", l)
		}
	}
}

func TestStorageChangesOnlyTheTables(t *testing.T) {
	ts, dom := templatesAndDomains(t)
	cfg := GenConfig{Seed: 1, Scales: []string{"tiny", "sf1"}, Variants: 2, SessionShare: 0.5, GenScales: []string{"tiny"}, GenVariants: 1}
	conn := Generate(cfg, ts, dom)
	cfg.Storage = "iceberg"
	lake := Generate(cfg, ts, dom)
	if len(conn) != len(lake) {
		t.Fatalf("%d items on the connectors, %d on iceberg", len(conn), len(lake))
	}
	for i := range conn {
		c, l := conn[i], lake[i]
		wantCat, wantSchema := "iceberg", SchemaName(c.Catalog, c.Schema)
		if l.Catalog != wantCat || l.Schema != wantSchema || l.Workload.Storage != "iceberg" {
			t.Fatalf("%s: placed at %s.%s (storage %q), want %s.%s", l.Workload.Template, l.Catalog, l.Schema, l.Workload.Storage, wantCat, wantSchema)
		}
		back := strings.NewReplacer("iceberg."+wantSchema+".", c.Catalog+"."+c.Schema+".",
			`"iceberg"."`+wantSchema+`".`, `"`+c.Catalog+`"."`+c.Schema+`".`).Replace(l.SQL)
		if back != c.SQL {
			t.Fatalf("%s v%d: the SQL differs beyond its tables:\n%s\n---\n%s", c.Workload.Template, c.Workload.Variant, c.SQL, l.SQL)
		}
		if !reflect.DeepEqual(c.Session, l.Session) || !reflect.DeepEqual(c.Workload.Params, l.Workload.Params) {
			t.Fatalf("%s v%d: other session or literals on iceberg", c.Workload.Template, c.Workload.Variant)
		}
		if c.Key == l.Key {
			t.Fatalf("%s: same key on both storages", c.Workload.Template)
		}
	}
}

func TestSchemaNameHasNoDots(t *testing.T) {
	for in, want := range map[[2]string]string{{"tpcds", "sf0.1"}: "tpcds_sf0_1", {"tpch", "tiny"}: "tpch_tiny", {"tpcds", "sf10"}: "tpcds_sf10"} {
		if got := SchemaName(in[0], in[1]); got != want {
			t.Errorf("SchemaName(%q, %q) = %q, want %q", in[0], in[1], got, want)
		}
	}
}
