package usage

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRecord is the cost on a query's last page: a hand-off to the
// writer (a finished query needs no settling).
func BenchmarkRecord(b *testing.B) {
	r, err := New(Options{Bucket: time.Minute, Retention: time.Hour, Top: 20, Queue: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	q := query("alice", "FINISHED", 1, t0)
	b.ReportAllocs()
	for b.Loop() {
		r.Record(q)
		if len(r.pending) == cap(r.pending) {
			b.StopTimer()
			drain(r)
			b.StartTimer()
		}
	}
}

// BenchmarkWrite is the writer's cost per query into memory: the claim,
// the metrics and the buckets.
func BenchmarkWrite(b *testing.B) {
	r, err := New(Options{Bucket: time.Minute, Retention: time.Hour, Top: 20})
	if err != nil {
		b.Fatal(err)
	}
	q := query("alice", "FINISHED", 1, t0)
	b.ReportAllocs()
	for b.Loop() {
		r.write(context.Background(), &q) // no id: always accounted
	}
}
