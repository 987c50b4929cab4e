package admission

import (
	"context"
	"testing"

	"github.com/prestroid/prestroid/testing/redistest"
)

// BenchmarkAdmission is the store's cost per query that is admitted at once
// and finishes: Enter, Bind, Touch (a page), Finish. With Redis that is
// four round trips to a local redis-server.
func BenchmarkAdmission(b *testing.B) {
	for _, bk := range []struct {
		name  string
		redis bool
	}{{"memory", false}, {"redis", true}} {
		b.Run(bk.name, func(b *testing.B) {
			o := Options{MaxQueries: 1 << 20}
			if bk.redis {
				srv := redistest.Start(b)
				o.Redis = &RedisOptions{URL: "redis://" + srv.Addr}
			}
			st, err := NewStore(withDefaults(o), testMetrics(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				e := mkEntry("alice", 1)
				if now, err := st.Enter(ctx, e); !now || err != nil {
					b.Fatal(now, err)
				}
				up := "up" + e.ID
				_ = st.Bind(ctx, e.ID, up)
				st.Touch(up)
				_, _ = st.Finish(ctx, up)
			}
		})
	}
}

// BenchmarkRateLimit is one allow check of a user and a group bucket.
func BenchmarkRateLimit(b *testing.B) {
	for _, bk := range []struct {
		name  string
		redis bool
	}{{"memory", false}, {"redis", true}} {
		b.Run(bk.name, func(b *testing.B) {
			o := Options{Rate: RateLimits{UserRate: 1e9, GroupRate: 1e9}}
			if bk.redis {
				srv := redistest.Start(b)
				o.Redis = &RedisOptions{URL: "redis://" + srv.Addr}
			}
			rl, err := NewRateLimiter(withDefaults(o), nil, testMetrics(), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer rl.Close()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if v := rl.Allow(ctx, "alice", "analysts"); !v.OK {
					b.Fatal(v)
				}
			}
		})
	}
}
