package featurize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimator/internal/trinotest"
	"github.com/prestroid/prestroid/estimator/plan"
)

// Benchmark plans: a real TPC-H plan (~100 O-T-P nodes) and two real Trino
// plans of UNION ALLs of TPC-DS sf1 queries (~1,000 and ~5,000 nodes),
// captured by TestCaptureBenchPlans.
var benchPlans = []struct {
	name, file string
	unionOf    int // TPC-DS queries in the UNION ALL (0 = a captured workload plan)
}{
	{"100", filepath.Join(trinotest.ExplainDir, "tpch-q20-sf1.json"), 0},
	{"1000", filepath.Join(trinotest.Testdata, "bench", "union-7.json"), 7},
	{"5000", filepath.Join(trinotest.Testdata, "bench", "union-36.json"), 36},
}

// unionSQL is `(SELECT count(*) FROM (q1) t0) UNION ALL ...` over the first
// n TPC-DS queries (cycling) at sf1.
func unionSQL(t testing.TB, n int) string {
	var qs []string
	for _, q := range trinotest.Workloads(t, "sf1") {
		if q.Workload == "tpcds" {
			qs = append(qs, q.SQL)
		}
	}
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf("(SELECT count(*) AS c FROM (\n%s\n) t%d)", qs[i%len(qs)], i)
	}
	return strings.Join(parts, "\nUNION ALL\n")
}

// TestCaptureBenchPlans refreshes testdata/bench from the live Trino; only with -update.
func TestCaptureBenchPlans(t *testing.T) {
	if !*update {
		t.Skip("run with -update to refresh the benchmark plans")
	}
	server := trinotest.URL(t)
	for _, bp := range benchPlans {
		if bp.unionOf == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		h := trinotest.UserHeader("prestroid-capture")
		h.Set("X-Trino-Session", "query_max_stage_count=2000") // 36 TPC-DS queries have ~440 stages (default limit 150)
		res, err := (&plan.ExplainClient{}).Explain(ctx, server, unionSQL(t, bp.unionOf), h)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Dir(bp.file), 0o755)
		if err := os.WriteFile(bp.file, append(res.PlanJSON, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type benchInput struct {
	json  []byte
	plan  *plan.Plan
	root  *OTPNode
	nodes int
	enc   *Encoder
}

func loadBench(b *testing.B, file string) benchInput {
	b.Helper()
	js, err := os.ReadFile(file)
	if err != nil {
		b.Skipf("%v (run go test ./estimator/featurize -run CaptureBench -update with PRESTROID_TRINO_URL)", err)
	}
	p, err := plan.Parse(js)
	if err != nil {
		b.Fatal(err)
	}
	root, err := BuildOTP(p)
	if err != nil {
		b.Fatal(err)
	}
	ops, tables := BuildVocabs([]*OTPNode{root})
	vecs := testVectors(100)
	for _, tok := range collectTokens(root) {
		if _, ok := vecs.Tokens[tok]; !ok {
			v := make([]float32, 100)
			v[len(vecs.Tokens)%100] = 1
			vecs.Tokens[tok] = v
		}
	}
	enc := &Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: 100, Sampler: SamplerConfig{N: 15, K: 9, C: 3}}
	return benchInput{json: js, plan: p, root: root, nodes: Stats(root).Nodes, enc: enc}
}

// BenchmarkFeaturize measures the serving path's featurization of a parsed
// plan, with its pooled O-T-P arena and tensors: O-T-P conversion (PRED
// predicates parsed; join criteria, which the encoding does not read, are
// not), sub-tree sampling (N=15, K=9, C=3) and tensor encoding with Pf=100
// predicate vectors.
func BenchmarkFeaturize(b *testing.B) {
	for _, bp := range benchPlans {
		b.Run(bp.name, func(b *testing.B) {
			in := loadBench(b, bp.file)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				f, err := withOTP(in.plan, in.enc.Tree, in.enc.Encode)
				if err != nil {
					b.Fatal(err)
				}
				f.Release() // as the service does once the query is estimated
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(in.nodes), "otp-nodes")
		})
	}
}

// BenchmarkFeaturizeDynamicFilters is BenchmarkFeaturize with the tree's
// readings off (plain) and with the dynamic filter clauses (a bundle
// trained with --dynamic-filters), side by side on each plan.
func BenchmarkFeaturizeDynamicFilters(b *testing.B) {
	for _, bp := range benchPlans {
		for _, tree := range []TreeOptions{{}, {DynamicFilters: true}} {
			name := "plain"
			if tree.DynamicFilters {
				name = "dynamic-filters"
			}
			b.Run(bp.name+"/"+name, func(b *testing.B) {
				in := loadBench(b, bp.file)
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				for i := 0; i < b.N; i++ {
					f, err := withOTP(in.plan, tree, in.enc.Encode)
					if err != nil {
						b.Fatal(err)
					}
					f.Release()
				}
				reportCPU(b, cpu)
			})
		}
	}
}

// BenchmarkFeaturizeFullTree is the full-tree variant (one sub-tree holding
// every node).
func BenchmarkFeaturizeFullTree(b *testing.B) {
	for _, bp := range benchPlans {
		b.Run(bp.name, func(b *testing.B) {
			in := loadBench(b, bp.file)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				root, _ := BuildOTP(in.plan)
				if _, err := in.enc.EncodeFull(root, 0); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(in.nodes), "otp-nodes")
		})
	}
}

// BenchmarkParsePlan measures JSON parsing and stitching alone: the whole
// plan ("full") and the serving path's parse without output symbols and
// details ("lean").
func BenchmarkParsePlan(b *testing.B) {
	for _, bp := range benchPlans {
		for _, mode := range []struct {
			name string
			lim  plan.Limits
		}{{"full", plan.Limits{}}, {"lean", plan.Limits{Lean: true}}} {
			b.Run(bp.name+"/"+mode.name, func(b *testing.B) {
				in := loadBench(b, bp.file)
				b.SetBytes(int64(len(in.json)))
				b.ReportAllocs()
				b.ResetTimer()
				cpu := processCPU()
				for i := 0; i < b.N; i++ {
					if _, err := plan.ParseLimits(in.json, mode.lim); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu)
				b.ReportMetric(float64(in.nodes), "otp-nodes")
			})
		}
	}
}

func BenchmarkParsePredicate(b *testing.B) {
	s := "((d_year_6 = integer '1999') AND (d_moy_8 BETWEEN integer '9' AND integer '12')) OR (CAST(sum AS decimal(38,3)) > $operator$multiply(COALESCE(avg, avg_64), decimal(2,1) '1.3'))"
	b.ReportAllocs()
	cpu := processCPU()
	for i := 0; i < b.N; i++ {
		if _, err := ParsePredicate(s); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

// reportCPU adds "cpu-ns/op": process CPU time (GC included) per op since
// start, which stays meaningful when other processes load the machine.
func reportCPU(b *testing.B, start time.Duration) {
	if start > 0 {
		b.ReportMetric(float64(processCPU()-start)/float64(b.N), "cpu-ns/op")
	}
}
