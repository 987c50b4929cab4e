package usage

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/testing/redistest"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 30, 0, time.UTC)

func query(user, state string, cpu float64, at time.Time) Query {
	return Query{User: user, Group: "g-" + user, Source: "cli", State: state, Finished: at, RolledUp: true,
		CPUSeconds: cpu, WallSeconds: 2 * cpu, ElapsedSeconds: 3, PeakMemoryBytes: 2e9,
		Predicted: true, PredictedCPUSeconds: cpu / 2}
}

// drain writes what Record queued, as Run does.
func drain(r *Recorder) {
	for {
		select {
		case q := <-r.pending:
			r.write(context.Background(), &q)
		default:
			return
		}
	}
}

func newRecorder(t *testing.T, store Store, top int) *Recorder {
	t.Helper()
	r, err := New(Options{Bucket: time.Minute, Retention: time.Hour, Top: top, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// checkSums records a small workload and checks the sums every store
// must give.
func checkSums(t *testing.T, store Store) {
	r := newRecorder(t, store, 20)
	r.Record(query("alice", "FINISHED", 1.5, t0))
	r.Record(query("alice", "FAILED", 0.25, t0.Add(time.Minute)))
	r.Record(query("bob", "FINISHED", 4, t0.Add(2*time.Minute)))
	r.Record(query("bob", "FINISHED", 100, t0.Add(-2*time.Hour))) // before the retention's window
	drain(r)
	ctx := context.Background()

	t.Run("a window sums the buckets in it, by user", func(t *testing.T) {
		from, to := r.Window(t0.Add(2*time.Minute), 5*time.Minute)
		rep, err := r.Report(ctx, ByUser, from, to, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 2 || rep.Rows[0].Key != "bob" || rep.Rows[1].Key != "alice" {
			t.Fatalf("rows %+v, want bob then alice (by CPU)", rep.Rows)
		}
		a := rep.Rows[1]
		if a.Queries != 2 || a.Failed != 1 || a.Predicted != 2 || !near(a.CPUSeconds, 1.75) || !near(a.PredictedCPUSeconds, 0.875) ||
			!near(a.WallSeconds, 3.5) || !near(a.ElapsedSeconds, 6) || !near(a.MemoryGBSeconds, 12) {
			t.Errorf("alice: %+v", a.Totals)
		}
		if rep.Totals.Queries != 3 || !near(rep.Totals.CPUSeconds, 5.75) {
			t.Errorf("totals %+v, want 3 queries, 5.75 s", rep.Totals)
		}
	})
	t.Run("a one-bucket window holds only the current minute", func(t *testing.T) {
		from, to := r.Window(t0.Add(time.Minute), time.Minute)
		rep, _ := r.Report(ctx, ByUser, from, to, 0)
		if rep.Totals.Queries != 1 || !near(rep.Totals.CPUSeconds, 0.25) {
			t.Errorf("totals %+v, want alice's failed query alone", rep.Totals)
		}
	})
	t.Run("groups and sources are summed too", func(t *testing.T) {
		from, to := r.Window(t0.Add(2*time.Minute), time.Hour)
		rep, _ := r.Report(ctx, ByGroup, from, to, 0)
		if len(rep.Rows) != 2 || rep.Rows[0].Key != "g-bob" {
			t.Errorf("groups %+v", rep.Rows)
		}
		rep, _ = r.Report(ctx, BySource, from, to, 0)
		if len(rep.Rows) != 1 || rep.Rows[0].Key != "cli" || rep.Rows[0].Queries != 3 {
			t.Errorf("sources %+v", rep.Rows)
		}
	})
	t.Run("a limit sums the rest in other", func(t *testing.T) {
		from, to := r.Window(t0.Add(2*time.Minute), time.Hour)
		rep, _ := r.Report(ctx, ByUser, from, to, 1)
		if len(rep.Rows) != 1 || rep.Other == nil || rep.Other.Queries != 2 || rep.Totals.Queries != 3 {
			t.Errorf("rows %+v other %+v", rep.Rows, rep.Other)
		}
	})
}

func TestMemoryStore(t *testing.T) {
	checkSums(t, NewMemoryStore(time.Hour))
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	mk := func() *RedisStore {
		st, err := NewRedisStore(RedisOptions{URL: "redis://" + srv.Addr, Prefix: "test:", Bucket: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	checkSums(t, mk())

	t.Run("two replicas' usage adds up", func(t *testing.T) {
		a, b := newRecorder(t, mk(), 20), newRecorder(t, mk(), 20)
		at := t0.Add(10 * time.Minute)
		a.Record(query("carol", "FINISHED", 0.1, at))
		b.Record(query("carol", "FINISHED", 0.2, at))
		b.Record(query("carol", "FINISHED", 0.3, at.Add(time.Minute)))
		// One query's last page fetched through both replicas counts once.
		q := query("carol", "FINISHED", 5, at)
		q.QueryID = "20261205_120000_00001_aaaaa"
		a.Record(q)
		b.Record(q)
		drain(a)
		drain(b)
		from, to := a.Window(at.Add(time.Minute), 2*time.Minute)
		rep, err := a.Report(context.Background(), ByUser, from, to, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Rows) != 1 || rep.Rows[0].Queries != 4 || !near(rep.Rows[0].CPUSeconds, 5.6) || !rep.Shared {
			t.Errorf("report %+v, want carol's 4 queries and 5.6 s from both", rep)
		}
		if n := testutil.ToFloat64(a.cpu.WithLabelValues("user", "carol")) + testutil.ToFloat64(b.cpu.WithLabelValues("user", "carol")); !near(n, 5.6) {
			t.Errorf("the replicas' counters sum to %v s, want 5.6", n)
		}
	})
	t.Run("keys expire after the retention", func(t *testing.T) {
		st := mk()
		r := newRecorder(t, st, 20)
		r.Record(query("dave", "FINISHED", 1, time.Now()))
		drain(r)
		keys, err := st.rdb.Keys(context.Background(), "test:usage:*:user").Result()
		if err != nil || len(keys) == 0 {
			t.Fatalf("keys %v, %v", keys, err)
		}
		for _, k := range keys {
			ttl := st.rdb.TTL(context.Background(), k).Val()
			if ttl <= 0 || ttl > time.Hour+time.Minute {
				t.Errorf("%s: TTL %s, want within retention + bucket", k, ttl)
			}
		}
	})
	t.Run("an unreachable Redis is counted, not fatal", func(t *testing.T) {
		st, _ := NewRedisStore(RedisOptions{URL: "redis://127.0.0.1:1", Prefix: "x:", Bucket: time.Minute, Retention: time.Hour})
		r := newRecorder(t, st, 20)
		for i := range 50 {
			q := query("erin", "FINISHED", 1, t0)
			q.QueryID = fmt.Sprintf("20261205_120000_%05d_aaaaa", i)
			r.Record(q)
		}
		start := time.Now()
		drain(r)
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("50 queries took the writer %s with Redis down: want the outage to fail fast", took)
		}
		if n := testutil.ToFloat64(r.storeErrors); n < 50 {
			t.Errorf("store errors %v, want one per query at least", n)
		}
		if n := testutil.ToFloat64(r.cpu.WithLabelValues("user", "erin")); n != 50 {
			t.Errorf("erin's CPU counter %v, want 50 (the metrics do not need the store)", n)
		}
	})
}

func TestMetricsKeepTheFirstTopNamesAndSumTheRestInOther(t *testing.T) {
	r := newRecorder(t, nil, 2)
	reg := prometheus.NewRegistry()
	for _, c := range r.Collectors() {
		reg.MustRegister(c)
	}
	for i, u := range []string{"u1", "u2", "u3", "u4", "u1"} {
		r.Record(query(u, "FINISHED", float64(i+1), t0))
	}
	drain(r)
	for name, want := range map[string]float64{"u1": 1 + 5, "u2": 2, Other: 3 + 4} {
		if got := testutil.ToFloat64(r.cpu.WithLabelValues("user", name)); !near(got, want) {
			t.Errorf("cpu{user=%s} = %v, want %v", name, got, want)
		}
	}
	n, err := testutil.GatherAndCount(reg, "prestroid_usage_cpu_seconds_total")
	if err != nil {
		t.Fatal(err)
	}
	// users u1 u2 (other), groups g-u1 g-u2 (other), source cli.
	if n != 7 {
		t.Errorf("%d cpu series, want 7 (two names and other per dimension, one source)", n)
	}
	if got := testutil.ToFloat64(r.queries.WithLabelValues("user", Other, "FINISHED")); got != 2 {
		t.Errorf("queries{user=other} = %v, want 2", got)
	}
}

func TestAnEmptyNameCountsAsNone(t *testing.T) {
	q := Query{}
	if q.Key(BySource) != Unknown {
		t.Errorf("empty source keyed %q", q.Key(BySource))
	}
}

func TestAPIParameters(t *testing.T) {
	r := newRecorder(t, nil, 20)
	r.Record(query("alice", "FINISHED", 1, time.Now()))
	drain(r)
	for _, tc := range []struct {
		query  string
		status int
		want   string
	}{
		{"", 200, `"by":"user"`},
		{"by=group&window=5m", 200, `"key":"g-alice"`},
		{"by=source&window=24h", 400, "longer than the retention"},
		{"by=host", 400, "unknown dimension"},
		{"window=-1m", 400, "positive duration"},
		{"from=2026-12-05T00:00:00Z&window=1h", 400, "not both"},
		{"from=yesterday", 400, "RFC 3339"},
		{"from=2026-12-05T10:00:00Z&to=2026-12-05T09:00:00Z", 400, "before"},
		{"limit=x", 400, "whole number"},
	} {
		t.Run(fmt.Sprintf("?%s answers %d", tc.query, tc.status), func(t *testing.T) {
			var ctx fasthttp.RequestCtx
			ctx.Request.SetRequestURI("/prestroid/api/usage?" + tc.query)
			r.ServeAPI(&ctx)
			body := string(ctx.Response.Body())
			if ctx.Response.StatusCode() != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("%d %s, want %d and %q", ctx.Response.StatusCode(), body, tc.status, tc.want)
			}
		})
	}
}

func TestWindowsAreWholeBuckets(t *testing.T) {
	r := newRecorder(t, nil, 20)
	from, to := r.Window(t0, 5*time.Minute)
	if want := t0.Truncate(time.Minute).Add(time.Minute); !to.Equal(want) || !from.Equal(want.Add(-5*time.Minute)) {
		t.Errorf("window [%s, %s)", from, to)
	}
	from, to = r.Span(t0, t0.Add(-90*time.Second), t0.Add(-30*time.Second))
	if !from.Equal(t0.Add(-90*time.Second)) || !to.Equal(t0.Add(-30*time.Second)) { // 11:59:00, 12:00:00
		t.Errorf("span [%s, %s)", from, to)
	}
	from, _ = r.Span(t0, t0.Add(-48*time.Hour), t0)
	if want := t0.Truncate(time.Minute).Add(-time.Hour); !from.Equal(want) {
		t.Errorf("span from %s, want cut to the retention, %s", from, want)
	}
}

func TestALastPageFetchedTwiceCountsOnce(t *testing.T) {
	r := newRecorder(t, nil, 20)
	q := query("alice", "FINISHED", 1, t0)
	q.QueryID = "20261205_120000_00002_aaaaa"
	r.Record(q)
	r.Record(q)
	drain(r)
	rep, _ := r.Report(context.Background(), ByUser, t0.Add(-time.Minute), t0.Add(time.Minute), 0)
	if rep.Totals.Queries != 1 || testutil.ToFloat64(r.duplicates) != 1 || testutil.ToFloat64(r.cpu.WithLabelValues("user", "alice")) != 1 {
		t.Errorf("totals %+v, duplicates %v: want the query once", rep.Totals, testutil.ToFloat64(r.duplicates))
	}
}

func TestSeenIDsForgetsTheOldest(t *testing.T) {
	s := newSeenIDs(2)
	for _, c := range []struct {
		id   string
		want bool
	}{{"a", true}, {"a", false}, {"b", true}, {"c", true}, {"a", true}, {"c", false}} {
		if got := s.add(c.id); got != c.want {
			t.Errorf("add(%s) = %v, want %v", c.id, got, c.want)
		}
	}
}

// failedInfo is Trino 476's GET /v1/query/{id} of a query that failed at
// run time (trimmed): its last page had said 0 ms of CPU.
func failedInfo(t *testing.T) []byte {
	b, err := os.ReadFile("testdata/failed-query-info.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseQueryInfo(t *testing.T) {
	f, err := parseQueryInfo(failedInfo(t))
	if err != nil {
		t.Fatal(err)
	}
	if !near(f.cpu, 0.246) || !near(f.wall, 1.70) || !near(f.elapsed, 0.67712) || f.peak != 3974298 || f.user != "alice" || f.source != "usage-testdata" {
		t.Errorf("%+v", f)
	}
	if _, err := parseQueryInfo([]byte(`{"finalQueryInfo": false}`)); !errors.Is(err, errNotFinal) {
		t.Errorf("a running query's info: %v, want errNotFinal", err)
	}
	for _, c := range []struct {
		in   string
		want float64
	}{{"245.12ms", 0.24512}, {"1.23s", 1.23}, {"2.50m", 150}, {"10.00us", 1e-5}, {"1.00h", 3600}} {
		if got, err := parseDuration(c.in); err != nil || !near(got, c.want) {
			t.Errorf("parseDuration(%q) = %v, %v", c.in, got, err)
		}
	}
	if _, err := parseDuration("12 parsecs"); err == nil {
		t.Error("a bad unit parsed")
	}
	if got, err := parseDataSize("1.50MB"); err != nil || got != 1.5*(1<<20) {
		t.Errorf("parseDataSize(1.50MB) = %v, %v", got, err)
	}
}

func TestSettling(t *testing.T) {
	info := failedInfo(t)
	fetched := make(chan string, 4)
	r, err := New(Options{Bucket: time.Minute, Retention: time.Hour, Top: 20,
		Fetch: func(_ context.Context, cluster, id string) ([]byte, error) {
			fetched <- cluster + "/" + id
			return info, nil
		},
		GroupOf: func(u string) string { return "team-" + u }})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a failed query is accounted with the cluster's final figures", func(t *testing.T) {
		q := query("alice", "FAILED", 0, t0)
		q.Cluster, q.QueryID = "default", "20261205_120000_00003_aaaaa"
		r.Record(q)
		if got := <-fetched; got != "default/20261205_120000_00003_aaaaa" {
			t.Errorf("fetched %s", got)
		}
		got := <-r.pending
		if !near(got.CPUSeconds, 0.246) || got.User != "alice" || !got.RolledUp {
			t.Errorf("settled %+v", got)
		}
	})
	t.Run("a query another replica placed gets its user, group and source from the cluster", func(t *testing.T) {
		q := Query{Cluster: "default", QueryID: "20261205_120000_00004_aaaaa", Untracked: true, State: "FINISHED", RolledUp: true, Finished: t0}
		r.Record(q)
		<-fetched
		got := <-r.pending
		if got.User != "alice" || got.Group != "team-alice" || got.Source != "usage-testdata" || got.Predicted {
			t.Errorf("settled %+v", got)
		}
	})
	t.Run("a finished query this replica placed is not fetched", func(t *testing.T) {
		r.Record(query("bob", "FINISHED", 1, t0))
		select {
		case id := <-fetched:
			t.Errorf("fetched %s", id)
		case got := <-r.pending:
			if got.User != "bob" {
				t.Errorf("%+v", got)
			}
		}
	})
}

func TestCloseWritesWhatIsQueued(t *testing.T) {
	st := NewMemoryStore(time.Hour)
	r := newRecorder(t, st, 20)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	cancel()
	<-done
	r.Record(query("fay", "FINISHED", 2, t0)) // a last page during the drain
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	sums, _ := st.Sum(context.Background(), ByUser, t0.Add(-time.Minute), t0.Add(time.Minute))
	if sums["fay"] == nil || sums["fay"].Queries != 1 {
		t.Errorf("after Close: %v", sums)
	}
}

func TestConcurrentRecordsAllCount(t *testing.T) {
	r := newRecorder(t, nil, 3)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				q := query(fmt.Sprintf("u%d", g), "FINISHED", 0.5, t0)
				q.QueryID = fmt.Sprintf("20261205_120000_%05d_g%d", i, g)
				r.Record(q)
				if i%50 == 0 {
					_, _ = r.Report(context.Background(), ByUser, t0.Add(-time.Minute), t0.Add(time.Minute), 0)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-done
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, _ := r.Report(context.Background(), ByUser, t0.Add(-time.Minute), t0.Add(time.Minute), 0)
	if rep.Totals.Queries != 1600 || !near(rep.Totals.CPUSeconds, 800) || len(rep.Rows) != 8 {
		t.Errorf("totals %+v over %d users, want 1600 queries, 800 s, 8 users", rep.Totals, len(rep.Rows))
	}
	var metric float64
	for _, name := range []string{"u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7", Other} {
		metric += testutil.ToFloat64(r.cpu.WithLabelValues("user", name))
	}
	if !near(metric, 800) {
		t.Errorf("the user counters sum to %v s, want 800 (three names and other)", metric)
	}
}
