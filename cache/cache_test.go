package cache

import (
	"fmt"
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
