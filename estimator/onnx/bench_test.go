package onnx

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/prestroid/prestroid/cache"
	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// Benchmarks of the serving path. The model is PRESTROID_BENCH_MODEL (a
// bundle directory; e.g. the paper-sized untrained bundle of
// testdata/bundle-fixture/gen.sh, or the trained default) or else the tiny
// committed fixture.
//
//	PRESTROID_ORT_LIB=... PRESTROID_BENCH_MODEL=/tmp/bench-bundle \
//	  go test ./estimator/onnx -run '^$' -bench . -cpu 2

var benchPlans = []struct{ name, file string }{
	{"100", filepath.Join("..", "testdata", "explain", "tpch-q20-sf1.json")},
	{"1000", filepath.Join("..", "testdata", "bench", "union-7.json")},
	{"5000", filepath.Join("..", "testdata", "bench", "union-36.json")},
}

func benchModel(b *testing.B, mo bundle.ModelOptions) *bundle.Model {
	b.Helper()
	rt := runtime(b)
	dir := os.Getenv("PRESTROID_BENCH_MODEL")
	if dir == "" {
		dir = fixtureDir
	}
	m, err := bundle.LoadDir(rt, mo)(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Close)
	return m
}

// processCPU is the process's CPU time so far (ONNX Runtime's threads
// included): per-op CPU stays meaningful on a loaded machine.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((processCPU()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// reportLatency adds p50 and p99 of the samples (µs).
func reportLatency(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	q := func(p float64) float64 {
		return float64(samples[min(len(samples)-1, int(p*float64(len(samples))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

// BenchmarkFeaturizeInfer is one query's serving cost after EXPLAIN: plan
// JSON → O-T-P → sub-trees → tensors (Featurize), then a batch-of-one
// inference. No predicate cache.
func BenchmarkFeaturizeInfer(b *testing.B) {
	for _, bp := range benchPlans {
		b.Run(bp.name, func(b *testing.B) {
			js, err := os.ReadFile(bp.file)
			if err != nil {
				b.Skip(err)
			}
			m := benchModel(b, bundle.ModelOptions{})
			samples := make([]time.Duration, 0, b.N)
			var feat, inf time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				f, err := m.Featurize(js)
				if err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := m.Predict([]*featurize.Features{f}); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				f.Release() // as the service does
				feat += t1.Sub(t0)
				inf += t2.Sub(t1)
				samples = append(samples, t2.Sub(t0))
			}
			b.StopTimer()
			reportCPU(b, cpu)
			reportLatency(b, samples)
			b.ReportMetric(float64(feat.Microseconds())/float64(b.N), "featurize-µs")
			b.ReportMetric(float64(inf.Microseconds())/float64(b.N), "infer-µs")
		})
	}
}

// BenchmarkInferBatch is inference alone for batches of B queries.
func BenchmarkInferBatch(b *testing.B) {
	js, _ := os.ReadFile(benchPlans[0].file)
	m := benchModel(b, bundle.ModelOptions{})
	f, err := m.Featurize(js)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 8, 32} {
		b.Run(map[int]string{1: "B=1", 8: "B=8", 32: "B=32"}[n], func(b *testing.B) {
			batch := make([]*featurize.Features, n)
			for i := range batch {
				batch[i] = f
			}
			b.ReportAllocs()
			cpu := processCPU()
			for i := 0; i < b.N; i++ {
				if _, err := m.Predict(batch); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}

// BenchmarkEstimatesPerSecond runs Service.EstimatePlan from many
// concurrent clients over a mix of TPC-H/TPC-DS plans (the EXPLAIN round
// trip excluded), with and without micro-batching; run with -cpu 2 for the
// 2-core figure.
func BenchmarkEstimatesPerSecond(b *testing.B) {
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "explain", "*-sf1.json"))
	var plans [][]byte
	for _, f := range files {
		js, _ := os.ReadFile(f)
		plans = append(plans, js)
	}
	for _, c := range []struct {
		name     string
		maxBatch int
		maxWait  time.Duration
	}{{"unbatched", 1, 0}, {"batched", 32, 0}, {"batched-wait-1ms", 32, time.Millisecond}} {
		b.Run(c.name, func(b *testing.B) {
			vc, _ := cache.NewVectors(0)
			defer vc.Close()
			svc := estimator.NewService(benchModel(b, bundle.ModelOptions{PredicateCache: vc}),
				estimator.ServiceOptions{MaxBatch: c.maxBatch, MaxWait: c.maxWait})
			defer svc.Close()
			b.SetParallelism(8)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := processCPU()
			b.RunParallel(func(pb *testing.PB) {
				r := rand.New(rand.NewPCG(rand.Uint64(), 1))
				for pb.Next() {
					if _, err := svc.EstimatePlan(context.Background(), plans[r.IntN(len(plans))]); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, cpu)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "estimates/s")
			b.ReportMetric(float64(b.N)/((processCPU()-cpu).Seconds()/2), "estimates/s-per-2-cores-of-cpu")
			b.ReportMetric(vc.Stats().HitRatio(), "pred-cache-hit")
		})
	}
}
