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
