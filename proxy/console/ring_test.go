package console

import (
	"fmt"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
)

func ringRecord(r *Ring, id, cluster string, cpu float64, at time.Time) uint64 {
	return r.Add(Record{Routed: at, QueryID: id, Cluster: cluster, User: "alice", Decision: "routed: class small", Kind: "routed",
		Class: "small", Estimated: cpu > 0, Took: time.Millisecond,
		Estimate: estimate.Estimate{Estimated: cpu > 0, CPUSeconds: cpu, Source: estimate.SourceModel, Plan: []byte(`{"big":"plan"}`)}})
}

func TestRing(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 30, 10, 0, time.UTC)
	t.Run("it keeps the newest records, newest first, without their plans", func(t *testing.T) {
		r := NewRing(3, []string{"a"})
		if got := r.snapshot(10); len(got) != 0 {
			t.Fatalf("empty ring: %d records", len(got))
		}
		for i := 1; i <= 5; i++ {
			ringRecord(r, fmt.Sprintf("q%d", i), "a", 1, now)
		}
		got := r.snapshot(10)
		if len(got) != 3 || got[0].QueryID != "q5" || got[1].QueryID != "q4" || got[2].QueryID != "q3" {
			t.Fatalf("snapshot: %+v", got)
		}
		if got[0].Estimate.Plan != nil {
			t.Error("the ring holds the estimate's plan")
		}
		if two := r.snapshot(2); len(two) != 2 || two[1].QueryID != "q4" {
			t.Errorf("snapshot(2): %+v", two)
		}
	})
	t.Run("finishing a record that was overwritten changes nothing", func(t *testing.T) {
		r := NewRing(2, []string{"a"})
		old := ringRecord(r, "old", "a", 1, now)
		ringRecord(r, "q2", "a", 1, now)
		ringRecord(r, "q3", "a", 1, now) // overwrites "old"
		r.Finish(old, Final{State: "FINISHED", Finished: now, CPUSeconds: 0.5})
		r.Finish(0, Final{State: "FINISHED", Finished: now})
		for _, rec := range r.snapshot(2) {
			if !rec.Finished.IsZero() {
				t.Errorf("%s finished by another query's completion", rec.QueryID)
			}
		}
	})
	t.Run("a record added over a finished one starts unfinished", func(t *testing.T) {
		r := NewRing(1, []string{"a"})
		r.Finish(ringRecord(r, "q1", "a", 1, now), Final{State: "FINISHED", Finished: now, CPUSeconds: 0.5})
		r.Add(Record{QueryID: "q2", Cluster: "a", Routed: now, Final: Final{State: "FINISHED", Finished: now}})
		if got := r.snapshot(1); got[0].QueryID != "q2" || !got[0].Finished.IsZero() || got[0].State != "" {
			t.Errorf("snapshot: %+v", got)
		}
	})
	t.Run("a finished estimated query has its actual CPU and q-error", func(t *testing.T) {
		r := NewRing(4, []string{"a"})
		seq := ringRecord(r, "q1", "a", 2, now)
		failed := ringRecord(r, "q2", "a", 2, now)
		unestimated := ringRecord(r, "q3", "a", 0, now)
		r.Finish(seq, Final{State: "FINISHED", Finished: now, CPUSeconds: 0.5})
		r.Finish(failed, Final{State: "FAILED", ErrorName: "BOOM", Finished: now, CPUSeconds: 0.5})
		r.Finish(unestimated, Final{State: "FINISHED", Finished: now, CPUSeconds: 0.5})
		got := r.snapshot(3)
		if q, ok := got[2].qError(); !ok || q != 4 || got[2].CPUSeconds != 0.5 {
			t.Errorf("q1: q-error %v %v, actual %v; want 4 (2 s predicted, 0.5 s actual)", q, ok, got[2].CPUSeconds)
		}
		for _, rec := range got[:2] {
			if _, ok := rec.qError(); ok {
				t.Errorf("%s (%s, estimated %v) has a q-error", rec.QueryID, rec.State, rec.Estimated)
			}
		}
	})
	t.Run("it counts queries routed per cluster over the last N minutes", func(t *testing.T) {
		r := NewRing(2, []string{"a", "b"}) // counts do not depend on the ring's size
		ringRecord(r, "q1", "a", 1, now.Add(-90*time.Minute))
		ringRecord(r, "q2", "a", 1, now.Add(-10*time.Minute))
		ringRecord(r, "q3", "a", 1, now.Add(-time.Minute))
		ringRecord(r, "q4", "a", 1, now)
		ringRecord(r, "q5", "b", 1, now)
		ringRecord(r, "q6", "unknown", 1, now)
		for _, tc := range []struct {
			cluster string
			minutes int
			want    int64
		}{{"a", 1, 1}, {"a", 2, 2}, {"a", 15, 3}, {"a", 60, 3}, {"a", 1000, 3}, {"b", 5, 1}, {"unknown", 5, 0}} {
			if got := r.routedSince(tc.cluster, now, tc.minutes); got != tc.want {
				t.Errorf("%s over %d minutes: %d, want %d", tc.cluster, tc.minutes, got, tc.want)
			}
		}
	})
}

// The console's cost on the hot path: one ring write per query placed
// and one per query finished, without allocating.
func TestRingAllocatesNothing(t *testing.T) {
	r := NewRing(128, []string{"a"})
	rec := Record{QueryID: "20260101_000000_00001_abcde", Cluster: "a", User: "alice", Kind: "estimated", Estimated: true,
		Estimate: estimate.Estimate{CPUSeconds: 1}, Routed: time.Now()}
	f := Final{Finished: time.Now(), State: "FINISHED", CPUSeconds: 1}
	if n := testing.AllocsPerRun(1000, func() {
		r.Finish(r.Add(rec), f)
	}); n != 0 {
		t.Errorf("Add + Finish allocate %v times", n)
	}
}

func BenchmarkRing(b *testing.B) {
	r := NewRing(2000, []string{"a"})
	rec := Record{QueryID: "20260101_000000_00001_abcde", Cluster: "a", User: "alice", Kind: "estimated", Estimated: true,
		Estimate: estimate.Estimate{CPUSeconds: 1}}
	f := Final{State: "FINISHED", CPUSeconds: 1}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		rec := rec
		rec.Routed = time.Now()
		for pb.Next() {
			r.Finish(r.Add(rec), f)
		}
	})
}
