package bench

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/onnx"
	"github.com/prestroid/prestroid/internal/workloads"
)

// BenchmarkRepeatedWorkloadOnTrino replays a dashboard-like workload
// against the real Trino: TPC-H and TPC-DS queries (tiny scale) drawn with a
// Zipf distribution, for three users, with the literals of each query
// varied, through the estimator service with both caches on. It reports the
// estimate-cache and predicate-vector-cache hit ratios and the EXPLAINs
// saved. Needs PRESTROID_ORT_LIB, PRESTROID_TRINO_URL and the workloads
// (PRESTROID_WORKLOADS, default ../../shared/workloads; docs/workloads.md).
func BenchmarkRepeatedWorkloadOnTrino(b *testing.B) {
	lib, trino := os.Getenv("PRESTROID_ORT_LIB"), os.Getenv("PRESTROID_TRINO_URL")
	if lib == "" || trino == "" {
		b.Skip("needs PRESTROID_ORT_LIB and PRESTROID_TRINO_URL")
	}
	dir := os.Getenv("PRESTROID_WORKLOADS")
	if dir == "" {
		dir = filepath.Join("..", "..", "shared", "workloads")
	}
	var queries []string
	for _, wl := range []string{"tpch", "tpcds"} {
		files, _ := filepath.Glob(filepath.Join(dir, wl, "*.sql"))
		for _, f := range files {
			s, _ := os.ReadFile(f)
			q := strings.NewReplacer("${database}", wl, "${schema}", "tiny", "${prefix}", "", "${scale}", "0.01").Replace(string(s))
			queries = append(queries, strings.TrimRight(strings.TrimSpace(q), ";"))
		}
	}
	if len(queries) == 0 {
		b.Skip(workloads.Missing(dir))
	}
	model := os.Getenv("PRESTROID_BENCH_MODEL")
	if model == "" {
		model = filepath.Join("..", "estimator", "testdata", "bundle-fixture")
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rt, err := onnx.New(onnx.Options{LibraryPath: lib})
	if err != nil {
		b.Fatal(err)
	}
	vc, _ := cache.NewVectors(0)
	ec, _ := cache.NewTTL[estimate.Estimate](0, time.Hour)
	m, err := bundle.LoadDir(rt, bundle.ModelOptions{PredicateCache: vc})(model)
	if err != nil {
		b.Fatal(err)
	}
	svc := estimator.NewService(m, estimator.ServiceOptions{Cache: ec, Logger: logger})
	defer svc.Close()
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.2, 1, uint64(len(queries)-1))
	r := rand.New(rand.NewPCG(3, 4))
	users := []string{"alice", "bob", "carol"}
	var explains, failures int
	var explainTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		q := queries[zipf.Uint64()]
		// Dashboards change literals (dates, limits): the fingerprint
		// ignores them.
		q = strings.Replace(q, "1995", []string{"1994", "1995", "1996"}[r.IntN(3)], 1)
		h := http.Header{"X-Trino-User": {users[r.IntN(len(users))]}}
		est, err := svc.Estimate(context.Background(), trino, q, h)
		if err != nil {
			failures++
			continue
		}
		if !est.Cached {
			explains++
			explainTime += est.Explain
		}
		ec.Wait() // make the Set visible before the next request (ristretto buffers Sets)
	}
	b.StopTimer()
	b.ReportMetric(ec.Stats().HitRatio(), "estimate-cache-hit")
	b.ReportMetric(vc.Stats().HitRatio(), "pred-cache-hit")
	b.ReportMetric(float64(explains)/float64(b.N), "explains/op")
	if explains > 0 {
		b.ReportMetric(float64(explainTime.Milliseconds())/float64(explains), "explain-ms")
	}
	b.ReportMetric(float64(failures), "failures")
}
