package cache

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestVectorsRoundTrip(t *testing.T) {
	c, err := NewVectors(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.Get("AND([d_year =])"); ok {
		t.Fatal("hit on an empty cache")
	}
	c.Set("AND([d_year =])", []float32{1, 2, 3})
	c.Wait()
	v, ok := c.Get("AND([d_year =])")
	if !ok || len(v) != 3 || v[2] != 3 {
		t.Fatalf("Get = %v, %v", v, ok)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 1 {
		t.Errorf("stats = %+v, want 1 hit 1 miss", s)
	}
}

func TestNilCachesNeverHit(t *testing.T) {
	var v *Vectors
	v.Set("k", []float32{1})
	if _, ok := v.Get("k"); ok {
		t.Error("nil Vectors hit")
	}
	var c *TTL[int]
	c.Set("k", 1)
	if _, ok := c.Get("k"); ok {
		t.Error("nil TTL hit")
	}
}

func TestTTLExpires(t *testing.T) {
	c, err := NewTTL[string](100, 1100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Set("q", "v")
	c.Wait()
	if v, ok := c.Get("q"); !ok || v != "v" {
		t.Fatalf("Get = %q, %v", v, ok)
	}
	time.Sleep(2500 * time.Millisecond) // ristretto expires on a 1 s ticker
	if _, ok := c.Get("q"); ok {
		t.Error("entry still present after its TTL")
	}
	if _, err := NewTTL[int](1, 0); err == nil {
		t.Error("zero TTL accepted")
	}
}

func TestConcurrentUse(t *testing.T) {
	c, _ := NewVectors(1 << 20)
	defer c.Close()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				k := fmt.Sprint(i % 50)
				if v, ok := c.Get(k); ok && len(v) != 4 {
					t.Errorf("bad value %v", v)
				}
				c.Set(k, []float32{1, 2, 3, 4})
			}
		}()
	}
	wg.Wait()
}

func TestPlansBoundedBySize(t *testing.T) {
	const budget = 1 << 20
	c, err := NewPlans(budget, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	plan := []byte(`{"0":{"id":"0","name":"Output"}}`)
	c.Set("q", plan)
	c.Wait()
	if got, ok := c.Get("q"); !ok || string(got) != string(plan) {
		t.Fatalf("Get = %q, %v", got, ok)
	}
	c.Set("huge", make([]byte, budget/2)) // over a quarter of the budget: not kept
	c.Wait()
	if _, ok := c.Get("huge"); ok {
		t.Error("a plan over a quarter of the budget was kept")
	}
	// 64 plans of 100 KiB (6.4 MiB) into a 1 MiB cache: what stays fits.
	big := make([]byte, 100<<10)
	for i := 0; i < 64; i++ {
		c.Set(fmt.Sprint("p", i), big)
		c.Wait()
	}
	kept := 0
	for i := 0; i < 64; i++ {
		if _, ok := c.Get(fmt.Sprint("p", i)); ok {
			kept++
		}
	}
	if kept == 0 || kept*len(big) > budget {
		t.Errorf("%d plans of %d bytes kept in a %d-byte cache", kept, len(big), budget)
	}
	var nilPlans *TTL[[]byte]
	nilPlans.Set("q", plan)
	if _, ok := nilPlans.Get("q"); ok {
		t.Error("nil cache hit")
	}
	if _, err := NewPlans(1, 0); err == nil {
		t.Error("zero TTL accepted")
	}
}

// The size each cache reports moves with what it holds and returns to 0
// when it is emptied.
func TestStatsReportWhatTheCachesHold(t *testing.T) {
	t.Parallel() // the plan cache waits out its TTL
	t.Run("the vector cache counts its vectors' cost", func(t *testing.T) {
		c, err := NewVectors(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var want int64
		for i := range 50 {
			key := fmt.Sprintf("AND([c%d =])", i)
			vec := make([]float32, 100)
			c.Set(key, vec)
			want += int64(4*len(vec) + len(key) + 64)
		}
		c.Wait()
		s := c.Stats()
		// Each entry also carries ristretto's own item cost (a few dozen
		// bytes); a dropped Set (ristretto may drop under contention)
		// holds nothing.
		if s.Entries < 40 || s.Entries > 50 || s.Bytes < want*s.Entries/50 || s.Bytes > want+50*256 {
			t.Errorf("after 50 sets of ~%d bytes in all: %d entries, %d bytes", want, s.Entries, s.Bytes)
		}
		c.Clear()
		if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
			t.Errorf("after Clear: %d entries, %d bytes, want 0 and 0", s.Entries, s.Bytes)
		}
	})
	t.Run("the plan cache counts its plans' bytes and lets expired ones go", func(t *testing.T) {
		c, err := NewPlans(1<<20, 1100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for i := range 10 {
			c.Set(fmt.Sprint("q", i), make([]byte, 10000))
		}
		c.Wait()
		if s := c.Stats(); s.Entries != 10 || s.Bytes < 10*10064 || s.Bytes > 10*(10064+256) {
			t.Errorf("after 10 plans of 10,000 bytes: %d entries, %d bytes", s.Entries, s.Bytes)
		}
		// A plan sliced from a larger buffer keeps the buffer: it costs its
		// capacity.
		c.Set("sliced", make([]byte, 100, 50000))
		c.Wait()
		if s := c.Stats(); s.Entries != 11 || s.Bytes < 10*10064+50064 {
			t.Errorf("after a 100-byte plan in a 50,000-byte buffer: %d entries, %d bytes", s.Entries, s.Bytes)
		}
		deadline := time.Now().Add(15 * time.Second) // ristretto drops expired entries by 5 s buckets
		for c.Stats().Bytes != 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
			t.Errorf("after the TTL: %d entries, %d bytes, want 0 and 0", s.Entries, s.Bytes)
		}
	})
	t.Run("a sized TTL cache sums its values' sizes through replacements, evictions and Clear", func(t *testing.T) {
		c, err := NewSizedTTL[string](20, time.Hour, func(v string) int64 { return int64(len(v)) })
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Set("a", strings.Repeat("x", 100))
		c.Wait()
		c.Set("a", strings.Repeat("x", 30)) // replaces: the 100 bytes leave
		c.Set("b", strings.Repeat("y", 50))
		c.Wait()
		if s := c.Stats(); s.Entries != 2 || s.Bytes != 80 {
			t.Errorf("a (30 bytes) and b (50 bytes): %d entries, %d bytes, want 2 and 80", s.Entries, s.Bytes)
		}
		for i := range 100 { // past the 20-entry bound: evictions and rejections
			c.Set(fmt.Sprint("k", i), strings.Repeat("z", 10))
		}
		c.Wait()
		s := c.Stats()
		var held int64
		for _, k := range append([]string{"a", "b"}, keys(100)...) {
			if v, ok := c.Get(k); ok {
				held += int64(len(v))
			}
		}
		if s.Entries > 20 || s.Bytes != held {
			t.Errorf("past the bound: %d entries, %d bytes; the entries a Get finds hold %d", s.Entries, s.Bytes, held)
		}
		c.Clear()
		if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
			t.Errorf("after Clear: %d entries, %d bytes, want 0 and 0", s.Entries, s.Bytes)
		}
	})
	t.Run("an unsized TTL cache counts entries, not bytes", func(t *testing.T) {
		c, err := NewTTL[int](10, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Set("a", 1)
		c.Wait()
		if s := c.Stats(); s.Entries != 1 || s.Bytes != 0 {
			t.Errorf("%d entries, %d bytes, want 1 and 0", s.Entries, s.Bytes)
		}
	})
}

func keys(n int) []string {
	var l []string
	for i := range n {
		l = append(l, fmt.Sprint("k", i))
	}
	return l
}
