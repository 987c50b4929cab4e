package history

import (
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/redistest"
)

func TestStatsMeanIsPlainAtFirstThenRecencyWeighted(t *testing.T) {
	var s Stats
	at := time.Unix(1, 0)
	for _, y := range []float64{1, 2, 3} {
		s = s.Add(y, 0.1, at)
	}
	if math.Abs(s.Mean-2) > 1e-12 {
		t.Fatalf("mean of 1,2,3 with alpha 0.1 = %g; want 2 (the first observations weigh 1/n)", s.Mean)
	}
	for range 200 {
		s = s.Add(10, 0.1, at)
	}
	if math.Abs(s.Mean-10) > 1e-6 || s.Spread() > 1e-3 {
		t.Fatalf("after a shift to 10: mean %g spread %g; want it to forget the old values", s.Mean, s.Spread())
	}
}

func TestStatsLineFitsALogLinearCalibration(t *testing.T) {
	var s Stats
	for i := range 50 {
		x := float64(i % 10)
		s = s.AddXY(x, 0.5+2*x, 0.05, time.Unix(0, 0))
	}
	a, b, sd, ok := s.Line()
	if !ok || math.Abs(a-0.5) > 1e-9 || math.Abs(b-2) > 1e-9 || sd > 1e-6 {
		t.Fatalf("fit %g + %g·x (spread %g, ok %v); want 0.5 + 2·x", a, b, sd, ok)
	}
	if _, _, _, ok := (Stats{}).AddXY(1, 1, 0.1, time.Time{}).Line(); ok {
		t.Fatal("a fit from one point must not be ok")
	}
}

func TestStatsEncodingRoundTrips(t *testing.T) {
	s := Stats{Count: 7, Mean: 1.5, Var: 0.25, MeanX: -3, VarX: 2, Cov: 0.5, Last: time.Unix(100, 5)}
	b, _ := s.MarshalBinary()
	var got Stats
	if err := got.UnmarshalBinary(b); err != nil || !got.Last.Equal(s.Last) {
		t.Fatalf("%v %+v", err, got)
	}
	got.Last = s.Last
	if got != s {
		t.Fatalf("round trip %+v, want %+v", got, s)
	}
	if err := got.UnmarshalBinary(b[:10]); err == nil {
		t.Fatal("a short value must be refused")
	}
}

func add(y float64, at time.Time) func(Stats, bool) Stats {
	return func(s Stats, _ bool) Stats { return s.Add(y, 0.2, at) }
}

func testStoreBound(t *testing.T, st Store, max int) {
	t.Helper()
	base := time.Unix(1000, 0)
	for i := range max * 3 {
		if err := st.Update(Update{Key: fmt.Sprintf("k%03d", i), Apply: add(float64(i), base.Add(time.Duration(i)*time.Second))}); err != nil {
			t.Fatal(err)
		}
		// k000 is refreshed every time: the most recently updated survives.
		if err := st.Update(Update{Key: "k000", Apply: add(0, base.Add(time.Duration(i)*time.Second+time.Millisecond))}); err != nil {
			t.Fatal(err)
		}
	}
	if st.Len() != max {
		t.Fatalf("Len %d after %d keys; want the bound %d", st.Len(), max*3, max)
	}
	if _, ok := st.Get("k000"); !ok {
		t.Fatal("the most recently updated key was evicted")
	}
	if _, ok := st.Get("k001"); ok {
		t.Fatal("the oldest key survived eviction")
	}
	if s, ok := st.Get(fmt.Sprintf("k%03d", max*3-1)); !ok || s.Count != 1 {
		t.Fatalf("the newest key: %+v %v", s, ok)
	}
}

// stores are the Store implementations every shared test runs against:
// memory, bbolt and Redis (a real redis-server; skipped, saying so, where
// there is none), each bounded to max keys.
func stores(max int) []struct {
	name string
	open func(t testing.TB) Store
} {
	return []struct {
		name string
		open func(t testing.TB) Store
	}{
		{"memory", func(testing.TB) Store { return NewMemory(max) }},
		{"bolt", func(t testing.TB) Store {
			b, err := OpenBolt(filepath.Join(t.TempDir(), "h.db"), max)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"redis", func(t testing.TB) Store { return openRedis(t, redistest.Start(t).Addr, "test:", max) }},
	}
}

func openRedis(t testing.TB, addr, prefix string, max int) *Redis {
	t.Helper()
	r, err := OpenRedis(RedisOptions{URL: "redis://" + addr, Prefix: prefix, MaxEntries: max, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestStores(t *testing.T) {
	for _, st := range stores(10) {
		t.Run(st.name+" evicts the least recently updated", func(t *testing.T) {
			s := st.open(t)
			defer s.Close()
			testStoreBound(t, s, 10)
		})
		t.Run(st.name+" applies a batch's updates in order, per key", func(t *testing.T) {
			s := st.open(t)
			defer s.Close()
			at := time.Unix(5, 0)
			var seen []bool
			first := func(s Stats, ok bool) Stats { seen = append(seen, ok); return s.Add(1, 0.5, at) }
			if err := s.Update(Update{Key: "a", Apply: first}, Update{Key: "b", Apply: add(7, at)}, Update{Key: "a", Apply: add(3, at)}); err != nil {
				t.Fatal(err)
			}
			a, ok := s.Get("a")
			if !ok || a.Count != 2 || a.Mean != 2 || !a.Last.Equal(at) {
				t.Fatalf("a = %+v (ok %v); want 2 runs of mean 2 at %v", a, ok, at)
			}
			if len(seen) == 0 || seen[0] {
				t.Fatalf("Apply of a new key saw ok=%v; want false", seen)
			}
			if b, ok := s.Get("b"); !ok || b.Count != 1 || b.Mean != 7 {
				t.Fatalf("b = %+v (ok %v)", b, ok)
			}
			if _, ok := s.Get("c"); ok {
				t.Fatal("a key never written was found")
			}
			if s.Len() != 2 {
				t.Fatalf("Len %d; want 2", s.Len())
			}
		})
		t.Run(st.name+" reads several keys at once as Get reads each", func(t *testing.T) {
			s := st.open(t)
			defer s.Close()
			at := time.Unix(5, 0)
			if err := s.Update(Update{Key: "a", Apply: add(1, at)}, Update{Key: "c", Apply: add(3, at)}); err != nil {
				t.Fatal(err)
			}
			got, ok := GetMany(s, "a", "b", "c")
			if len(got) != 3 || !ok[0] || ok[1] || !ok[2] || got[0].Mean != 1 || got[1] != (Stats{}) || got[2].Mean != 3 {
				t.Fatalf("GetMany = %+v %v; want a and c, no b", got, ok)
			}
			if _, multi := s.(Multi); multi != (st.name != "memory") {
				t.Fatalf("%T implements Multi: %v; want bolt and Redis to (one transaction, one MGET)", s, multi)
			}
		})
	}
}

func TestBoltSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.db")
	b, err := OpenBolt(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(5, 0)
	if err := b.Update(Update{Key: "a", Apply: add(1, at)}, Update{Key: "a", Apply: add(3, at)}, Update{Key: "b", Apply: add(7, at)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = OpenBolt(path, 100)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s, ok := b.Get("a")
	if !ok || s.Count != 2 || s.Mean != 2 || b.Len() != 2 {
		t.Fatalf("after reopen: a=%+v ok=%v len=%d; want count 2, mean 2, 2 keys", s, ok, b.Len())
	}
}
