package trinotest

import (
	"fmt"
	"iter"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/internal/workloads"
)

// Testdata is estimator/testdata as seen from a stage package's directory:
// the plans captured from a real Trino (explain/, bench/), the bundle
// fixture and the reference tensors, shared by every stage.
const Testdata = "../testdata"

// ExplainDir holds the captured EXPLAIN plans and their golden files.
var ExplainDir = filepath.Join(Testdata, "explain")

// URL is the live Trino at PRESTROID_TRINO_URL; without it the test skips.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PRESTROID_TRINO_URL")
	if u == "" {
		t.Skip("PRESTROID_TRINO_URL not set: no real Trino to EXPLAIN against")
	}
	return u
}

// UserHeader is a caller's request header naming only the user.
func UserHeader(user string) http.Header {
	h := http.Header{}
	h.Set("X-Trino-User", user)
	return h
}

// Query is one workload query with its placeholders filled.
type Query struct {
	Name     string // e.g. tpcds-q14a
	Workload string // tpch or tpcds
	SQL      string
}

var tpchTrailingSemicolon = regexp.MustCompile(`\s+;\s+$`)

// Workloads reads $PRESTROID_WORKLOADS (default: ../shared/workloads beside
// the checkout) and fills the placeholders for scale (tiny or sf1) as
// docs/workloads.md says; without the files the test skips, saying how to
// point at them.
func Workloads(t testing.TB, scale string) []Query {
	t.Helper()
	dir := os.Getenv(workloads.Env)
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "workloads")
	}
	if _, err := workloads.Find(dir); err != nil {
		t.Skip(err)
	}
	scaleValue := map[string]string{"tiny": "0.01", "sf1": "1"}[scale]
	var out []Query
	for _, wl := range []string{"tpch", "tpcds"} {
		files, _ := filepath.Glob(filepath.Join(dir, wl, "*.sql"))
		sort.Strings(files)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			s := strings.NewReplacer("${database}", wl, "${schema}", scale, "${prefix}", "", "${scale}", scaleValue).Replace(string(b))
			s = tpchTrailingSemicolon.ReplaceAllString(s, "")
			out = append(out, Query{Name: wl + "-" + strings.TrimSuffix(filepath.Base(f), ".sql"), Workload: wl, SQL: s})
		}
	}
	if len(out) == 0 {
		t.Skip(workloads.Missing(dir))
	}
	return out
}

// Plans yields every captured Trino plan (workloads and benchmark plans)
// with its file name.
func Plans(t testing.TB) iter.Seq2[string, []byte] {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(ExplainDir, "*.json"))
	bench, _ := filepath.Glob(filepath.Join(Testdata, "bench", "*.json"))
	files = append(files, bench...)
	if len(files) < 200 {
		t.Fatalf("want the captured plans under %s, found %d files", Testdata, len(files))
	}
	return func(yield func(string, []byte) bool) {
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if !yield(f, b) {
				return
			}
		}
	}
}

// Node renders one plan node as EXPLAIN (FORMAT JSON) writes it, with the
// given descriptor and already rendered children.
func Node(id, name string, desc map[string]string, children ...string) string {
	var d []string
	for k, v := range desc {
		d = append(d, fmt.Sprintf("%q: %q", k, v))
	}
	return fmt.Sprintf(`{"id": %q, "name": %q, "descriptor": {%s}, "outputs": [], "details": [], "estimates": [], "children": [%s]}`,
		id, name, strings.Join(d, ", "), strings.Join(children, ", "))
}
