// Package soak runs queries from the Go, Python and CLI clients through two
// replicas of the real binary sharing a Redis (admission and history), with
// a mix of sizes, while faults are injected: one replica killed with
// SIGKILL and started again, Redis stopped (SIGSTOP) and resumed, and, in
// the full version, Trino killed and started again. It checks that every
// query that finished gave the rows a direct run gives, that every failure
// is explained by a fault, that none hangs past its deadline, and that
// afterwards no admission slot is held (metrics and Redis) and the
// replicas' fds and goroutines are back near their baseline, and their
// memory's growth is what the estimator caches report holding and the Go
// runtime keeps by its rules (memoryLeaks).
//
// The short version runs in make test (the suite's Trino, no Trino
// restart, a 5 s Redis stop); `make soak` runs the full one (its own Trino,
// 10,000 queries, 45 minutes at most, a 30 s Redis stop). docs/testing.md
// ("Soak") says how; RELIABILITY.md ("Soak with faults") has the figures.
package soak

import (
	"database/sql"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/prestroid/prestroid/testing/redistest"
	"github.com/redis/go-redis/v9"
)

var (
	flagFull     = flag.Bool("soak.full", false, "the full soak: its own Trino (restarted once), 10,000 queries (-soak.duration at most), a 30 s Redis stop")
	flagQueries  = flag.Int("soak.queries", 0, "queries to run (0: 10000 full, 300 short)")
	flagDuration = flag.Duration("soak.duration", 0, "stop issuing queries after this (0: 45m full, 15s short)")
	flagPort     = flag.String("soak.trino-port", "8131", "the full soak's own Trino's port")
	flagSeed     = flag.Uint64("soak.seed", 0, "the mix's seed (0: random, logged)")
	flagWaitGC   = flag.Bool("soak.wait-gc", false, "judge the live heap on the second GC after the load, a minute after it at least, as the full version does (waits up to 2.5 minutes at the baseline and 6 after the load)")
)

// settings are one version's sizes and faults.
type settings struct {
	queries     int
	duration    time.Duration
	timeout     time.Duration // one statement's deadline in any client (the CLI: per statement of its batch)
	goWorkers   int
	pyWorkers   int
	cliWorkers  int
	cliBatch    int
	redisStop   time.Duration
	replicaDown time.Duration // between the kill and the restart
	restartTrin bool
	settle      time.Duration // how long the leak checks wait for the baseline
	waitGC      bool          // judge the heap on a GC after the load (the runtime forces one within 2 minutes)
}

func versions() settings {
	if *flagFull {
		// 10 Go and 3 Python workers: run 3's 6 and 2 issued 7.2
		// queries/s here, short of 10,000 in 20 minutes; the duration is
		// a cap (a machine at load 50 issues about 5 a second), the soak
		// ends at its 10,000th query.
		s := settings{queries: 10000, duration: 45 * time.Minute, timeout: 5 * time.Minute, goWorkers: 10, pyWorkers: 3,
			cliWorkers: 1, cliBatch: 20, redisStop: 30 * time.Second, replicaDown: 10 * time.Second, restartTrin: true,
			settle: 6 * time.Minute, waitGC: true}
		return override(s)
	}
	return override(settings{queries: 300, duration: 15 * time.Second, timeout: 90 * time.Second, goWorkers: 4, pyWorkers: 1,
		cliWorkers: 1, cliBatch: 5, redisStop: 5 * time.Second, replicaDown: 3 * time.Second, settle: 30 * time.Second})
}

func override(s settings) settings {
	if *flagQueries > 0 {
		s.queries = *flagQueries
	}
	if *flagDuration > 0 {
		s.duration = *flagDuration
	}
	if *flagWaitGC {
		s.waitGC, s.settle = true, max(s.settle, 6*time.Minute)
	}
	return s
}

// Admission: a budget the mix queues behind at times (heavy statements
// hold slots for seconds), leases short enough that a killed replica's
// slots come back within the soak.
const (
	budget = 6
	lease  = 4 * time.Second
)

// replica is one `prestroid serve` process, started again on the same port
// after a kill.
type replica struct {
	name, port, cfg, base string
	bin                   string
	pid                   int
	mu                    sync.Mutex
	stop                  func()
}

func (r *replica) start(t *testing.T) {
	cmd, base := e2e.ServeBinary(t, r.bin, r.port, "--config", r.cfg)
	r.mu.Lock()
	r.base, r.pid, r.stop = base, cmd.Process.Pid, func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }
	r.mu.Unlock()
}

func (r *replica) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stop()
}

// fault is one injected fault's window.
type fault struct {
	name       string
	start, end time.Time
	grace      time.Duration // failures this long after end are still its
}

// faults is the fault script's record.
type faults struct {
	mu   sync.Mutex
	list []*fault
}

func (f *faults) begin(name string, grace time.Duration) *fault {
	return f.add(&fault{name: name, start: time.Now(), grace: grace})
}

func (f *faults) add(x *fault) *fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.list = append(f.list, x)
	return x
}

func (f *faults) finish(x *fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	x.end = time.Now()
}

// explain names the fault whose window [start-1s, end+grace] overlaps the
// query's [from, to], or "".
func (f *faults) explain(from, to time.Time) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.list {
		end := x.end
		if end.IsZero() {
			end = time.Now()
		}
		if !from.After(end.Add(x.grace)) && !to.Before(x.start.Add(-time.Second)) {
			return x.name
		}
	}
	return ""
}

// outcome is one query of the soak.
type outcome struct {
	client   string
	stmt     int
	batch    int // statements in the client call it was part of
	from, to time.Time
	res      result
}

func TestSoak(t *testing.T) {
	suiteTrino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	py := e2e.RequireEnv(t, "PRESTROID_PYTHON")
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	set := versions()
	seed := *flagSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("soak: %+v, seed %d", set, seed)
	began := time.Now()

	trinoURL := suiteTrino
	var own *e2e.Killable
	if set.restartTrin {
		own = e2e.StartKillableOn(t, "soak", *flagPort, "2G")
		trinoURL = own.URL
	}
	rs := redistest.Start(t)
	prefix := fmt.Sprintf("soak%d:", seed%100000)

	// The balancer's port first: the replicas' public_url names it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var reps []*replica
	for _, name := range []string{"a", "b"} {
		port := e2e.FreePort(t)
		cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
route_secret: %s
public_url: http://%s
clusters:
  - {name: default, url: %q}
routing:
  monitor_interval: 1s
admission:
  max_queries: %d
  redis: redis://%s/0
  redis_prefix: %q
  lease: %s
  replicas: 2
`, port, strings.Repeat("k", 40), ln.Addr(), trinoURL, budget, rs.Addr, prefix, lease)
		path := filepath.Join(dir, "replica-"+name+".yaml")
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		r := &replica{name: name, port: port, cfg: path, bin: bin}
		r.start(t)
		reps = append(reps, r)
	}
	lb := newBalancer(ln, reps[0].base, reps[1].base)
	// The replicas' connections to Redis and Trino are told apart from
	// their other descriptors (fdLeaks).
	pools := map[string]string{portOf(rs.Addr): "redis", portOf(trinoURL): "trino"}
	defer lb.close()

	// The clients.
	gc := &goClient{dbs: map[string]*sql.DB{}}
	defer gc.close()
	script := filepath.Join(e2e.RepoRoot(t), "testing/soak/pyworker.py")
	var pys []*pyClient
	for range set.pyWorkers + 1 { // one more for the direct runs
		p := &pyClient{py: py, script: script}
		pys = append(pys, p)
		defer p.stop()
	}
	cc := &cliClient{jar: cli, dir: dir, n: set.cliBatch}

	// The reference: every statement run directly by each client (the full
	// version runs it twice with the Go client: a statement whose result
	// varies between direct runs is left out of the mix).
	cat := catalogue(t, *flagFull)
	refStart := time.Now()
	refs := map[string][]result{} // client -> per statement
	var ginv []bool
	{
		var wg sync.WaitGroup
		g1, g2 := make([]result, len(cat)), make([]result, len(cat))
		var p1, c1 []result
		var next atomic.Int64
		for range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1) - 1); i < len(cat); i = int(next.Add(1) - 1) {
					g1[i] = runWith(gc, trinoURL, "soak-ref", []string{cat[i].sql}, set.timeout)[0]
					if g2[i] = g1[i]; *flagFull {
						g2[i] = runWith(gc, trinoURL, "soak-ref", []string{cat[i].sql}, set.timeout)[0]
					}
				}
			}()
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			for _, s := range cat {
				p1 = append(p1, runWith(pys[set.pyWorkers], trinoURL, "soak-ref", []string{s.sql}, set.timeout)[0])
			}
		}()
		go func() {
			defer wg.Done()
			var sqls []string
			for _, s := range cat {
				sqls = append(sqls, s.sql)
			}
			c1 = runWith(cc, trinoURL, "soak-ref", sqls, set.timeout)
		}()
		wg.Wait()
		refs["go"], refs["python"], refs["cli"] = g1, p1, c1
		for i, s := range cat {
			bad := !g1[i].ok || !p1[i].ok || !c1[i].ok || g1[i].sum != g2[i].sum || g1[i].rows == 0
			if bad {
				t.Logf("reference: %s left out: go %+v / %+v, python %+v, cli %+v", s.name, g1[i], g2[i], p1[i], c1[i])
			}
			ginv = append(ginv, bad)
		}
	}
	t.Logf("references: %d statements, each directly with every client, in %s", len(cat), time.Since(refStart).Round(time.Second))
	pk := newPicker(cat, func(i int) bool { return !ginv[i] })
	if len(pk.bySize["tiny"]) == 0 {
		t.Fatal("no usable tiny statement: the direct runs failed")
	}

	// Warm up through the balancer (both replicas, every client's path),
	// then the baseline.
	for i := range 6 {
		runWith(gc, lb.URL, "soak-warm", []string{cat[i%len(cat)].sql}, set.timeout)
	}
	time.Sleep(time.Second)
	// The full version's baseline waits for a GC after the warm-up (the
	// runtime forces one within 2 minutes), so that its live heap is an
	// idle one, as the one after the load is.
	warmEnd := time.Now()
	base := map[string]sample{}
	for _, r := range reps {
		var s sample
		for {
			if s, err = r.sample(pools); err != nil {
				t.Fatal(err)
			}
			if !set.waitGC || s.lastGC >= float64(warmEnd.UnixNano())/1e9 || time.Since(warmEnd) > 150*time.Second {
				break
			}
			time.Sleep(time.Second)
		}
		base[r.name] = s
		t.Logf("replica %s baseline (%s after the warm-up): %s", r.name, time.Since(warmEnd).Round(time.Second), s)
	}

	// The workers.
	var issued atomic.Int64
	stopAt := time.Now().Add(set.duration)
	claim := func(n int) (int, int) {
		if time.Now().After(stopAt) {
			return 0, 0
		}
		end := int(issued.Add(int64(n)))
		first := end - n
		if first >= set.queries {
			return 0, 0
		}
		return first, min(end, set.queries) - first
	}
	var mu sync.Mutex
	var outs []outcome
	record := func(c string, ids []int, from time.Time, rs []result) {
		to := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for i, id := range ids {
			outs = append(outs, outcome{client: c, stmt: id, batch: len(ids), from: from, to: to, res: rs[i]})
		}
	}
	users := []string{"soak-u0", "soak-u1", "soak-u2", "soak-u3"}
	work := func(c client) {
		backoff := time.Second
		for {
			first, n := claim(c.batch())
			if n == 0 {
				return
			}
			ids := make([]int, n)
			sqls := make([]string, n)
			for i := range n {
				ids[i] = pk.pick(seed, first+i)
				sqls[i] = cat[ids[i]].sql
			}
			from := time.Now()
			rs := runWith(c, lb.URL, users[first%len(users)], sqls, set.timeout)
			record(c.name(), ids, from, rs)
			// A failing client backs off before its next query (1 s,
			// doubling to 8 s while it keeps failing).
			if slices.ContainsFunc(rs, func(r result) bool { return !r.ok }) {
				time.Sleep(backoff)
				backoff = min(2*backoff, 8*time.Second)
			} else {
				backoff = time.Second
			}
		}
	}
	var wg sync.WaitGroup
	for range set.goWorkers {
		wg.Add(1)
		go func() { defer wg.Done(); work(gc) }()
	}
	for i := range set.pyWorkers {
		wg.Add(1)
		go func() { defer wg.Done(); work(pys[i]) }()
	}
	for range set.cliWorkers {
		wg.Add(1)
		go func() { defer wg.Done(); work(cc) }()
	}

	// The fault script, by progress (so that every fault happens however
	// fast the machine runs the mix): a replica at 15% of the queries or
	// of the duration, whichever comes first, Redis at 40%, Trino at 65%.
	fs := &faults{}
	soakStart := time.Now()
	at := func(frac float64) bool {
		when := soakStart.Add(time.Duration(frac * float64(set.duration)))
		for issued.Load() < int64(frac*float64(set.queries)) && time.Now().Before(when) {
			time.Sleep(100 * time.Millisecond)
		}
		return issued.Load() < int64(set.queries) && time.Now().Before(stopAt)
	}
	// Redis calls that fail without an injected fault (a replica's 1 s
	// timeout on a machine at load 50) trip the fallback as an outage
	// does: each is a fault window of its own, seen in the replicas'
	// prestroid_admission_store_errors_total (sampled every second) and
	// reported apart from the injected ones.
	watchDone := make(chan struct{})
	var watched sync.WaitGroup
	watched.Add(1)
	go func() {
		defer watched.Done()
		last := map[string]float64{}
		seen := time.Now()
		for {
			select {
			case <-watchDone:
				return
			case <-time.After(time.Second):
			}
			for _, r := range reps {
				s, err := sampleOf(r.base)
				if err != nil {
					continue // killed: the injected fault covers it
				}
				if prev, ok := last[r.name]; ok && s.storeErrors > prev && fs.explain(seen, time.Now()) == "" {
					fs.add(&fault{name: "redis errors seen by replica " + r.name + " (not injected)", start: seen, end: time.Now(), grace: 10 * time.Second})
				}
				last[r.name] = s.storeErrors
			}
			seen = time.Now()
		}
	}()
	var scriptDone sync.WaitGroup
	scriptDone.Add(1)
	go func() {
		defer scriptDone.Done()
		if !at(0.15) {
			return
		}
		f := fs.begin("replica b kill -9", 5*time.Second)
		reps[1].kill()
		time.Sleep(set.replicaDown)
		reps[1].start(t)
		fs.finish(f)
		t.Logf("fault: replica b killed at +%s, back after %s", f.start.Sub(soakStart).Round(time.Second), f.end.Sub(f.start).Round(100*time.Millisecond))
		if !at(0.40) {
			return
		}
		f = fs.begin("redis stopped", 10*time.Second)
		if err := rs.Pause(); err != nil {
			t.Error(err)
		}
		time.Sleep(set.redisStop)
		if err := rs.Resume(); err != nil {
			t.Error(err)
		}
		fs.finish(f)
		t.Logf("fault: redis stopped (SIGSTOP) at +%s for %s", f.start.Sub(soakStart).Round(time.Second), f.end.Sub(f.start).Round(100*time.Millisecond))
		if own == nil || !at(0.65) {
			return
		}
		f = fs.begin("trino kill -9 and restart", 20*time.Second)
		own.Kill9(t)
		d := own.Up(t)
		fs.finish(f)
		t.Logf("fault: trino killed at +%s, running queries again %s later", f.start.Sub(soakStart).Round(time.Second), d.Round(time.Second))
	}()
	wg.Wait()
	loadEnd := time.Now()
	// The GCs each replica had run when the load ended: its heap is
	// judged after two more, the last at least a minute after the load.
	// The first GC after the load still marks what sync.Pools held (it
	// moves them to the victim cache, which stays reachable); the second
	// drops them. Pages read ahead wait a minute for their client
	// (readAheadTTL), and behind the balancer the next poll often goes
	// to the other replica. Run 5: +67 MiB live at the first GC after
	// the load, +1.4 MiB at the next one.
	gcsAtEnd := map[string]float64{}
	for _, r := range reps {
		if s, err := sampleOf(r.base); err == nil {
			gcsAtEnd[r.name] = s.gcs
		}
	}
	soakTook := time.Since(soakStart)
	scriptDone.Wait()
	close(watchDone)
	watched.Wait()

	// Judge every query.
	type tally struct{ ok, varied, failed, wrong, hung int }
	clients := map[string]client{"go": gc, "python": pys[set.pyWorkers], "cli": cc}
	byClient := map[string]*tally{}
	byFault := map[string]map[string]int{} // fault -> client/kind -> n
	var problems []string
	for _, o := range outs {
		tl := byClient[o.client]
		if tl == nil {
			tl = &tally{}
			byClient[o.client] = tl
		}
		s := cat[o.stmt]
		switch {
		case o.res.ok && o.res.sum == refs[o.client][o.stmt].sum:
			tl.ok++
		case o.res.ok && variesDirectly(clients[o.client], trinoURL, s.sql, o.res.sum, set.timeout):
			tl.ok++
			tl.varied++
		case o.res.ok:
			tl.wrong++
			problems = append(problems, fmt.Sprintf("WRONG ROWS: %s %s: %d rows, direct %d (at +%s)", o.client, s.name,
				o.res.rows, refs[o.client][o.stmt].rows, o.from.Sub(soakStart).Round(time.Second)))
		case o.res.kind == kindTimeout || o.to.Sub(o.from) > set.timeout*time.Duration(o.batch)+30*time.Second:
			tl.hung++
			problems = append(problems, fmt.Sprintf("HANG: %s %s from +%s: %s", o.client, s.name, o.from.Sub(soakStart).Round(time.Second), o.res.err))
		default:
			tl.failed++
			f := fs.explain(o.from, o.to)
			if f == "" {
				f = "UNEXPLAINED"
				problems = append(problems, fmt.Sprintf("UNEXPLAINED FAILURE: %s %s [+%s, +%s] %s: %s", o.client, s.name,
					o.from.Sub(soakStart).Round(time.Second), o.to.Sub(soakStart).Round(time.Second), o.res.kind, o.res.err))
			} else if o.res.kind == kindOther && !strings.HasPrefix(f, "replica") {
				// Only a dead replica may cut a client off without a
				// Trino-shaped answer (nobody is left to write one).
				problems = append(problems, fmt.Sprintf("NOT TRINO-SHAPED: %s %s during %q: %s", o.client, s.name, f, o.res.err))
			}
			if byFault[f] == nil {
				byFault[f] = map[string]int{}
			}
			byFault[f][o.client+"/"+o.res.kind]++
		}
	}
	total := len(outs)
	t.Logf("soak: %d queries in %s (%.1f/s), Trino at %s", total, soakTook.Round(time.Second), float64(total)/soakTook.Seconds(), trinoURL)
	for _, c := range []string{"go", "python", "cli"} {
		if tl := byClient[c]; tl != nil {
			t.Logf("  %-6s %5d queries: %5d right rows (%d of them matching a later direct run, not the reference), %4d failed, %d wrong rows, %d hung",
				c, tl.ok+tl.failed+tl.wrong+tl.hung, tl.ok, tl.varied, tl.failed, tl.wrong, tl.hung)
		}
	}
	sizes := map[string]int{}
	for _, o := range outs {
		sizes[cat[o.stmt].size]++
	}
	t.Logf("  by size: %v", sizes)
	seenWindows := map[string]int{}
	for _, f := range fs.list {
		if strings.HasSuffix(f.name, "(not injected)") {
			seenWindows[f.name]++
			continue
		}
		t.Logf("  fault %q at +%s, %s long: failures %v", f.name, f.start.Sub(soakStart).Round(time.Second), f.end.Sub(f.start).Round(100*time.Millisecond), byFault[f.name])
	}
	for name, n := range seenWindows {
		t.Logf("  %s: %d one-second windows, failures %v", name, n, byFault[name])
	}
	if u := byFault["UNEXPLAINED"]; u != nil {
		t.Logf("  unexplained failures: %v", u)
	}
	samples := map[string][]string{}
	for _, o := range outs {
		if !o.res.ok {
			k := o.client + "/" + o.res.kind
			if len(samples[k]) < 3 {
				samples[k] = append(samples[k], o.res.err)
			}
		}
	}
	for k, v := range samples {
		t.Logf("  e.g. %s: %q", k, v)
	}
	sort.Strings(problems)
	for i, p := range problems {
		if i == 40 {
			t.Errorf("... and %d more", len(problems)-40)
			break
		}
		t.Error(p)
	}
	if total < set.queries/10 {
		t.Errorf("only %d of %d queries ran", total, set.queries)
	}
	injected := 0
	for _, f := range fs.list {
		if !strings.HasSuffix(f.name, "(not injected)") {
			injected++
		}
	}
	if injected < 2 || own != nil && injected < 3 {
		t.Errorf("only %d faults were injected before the soak ended: make it longer (-soak.duration) or smaller (-soak.queries)", injected)
	}

	// No admission slot leaked: both replicas' gauges and Redis at 0 once
	// the leases of slots a kill or the Redis stop orphaned have lapsed.
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer rdb.Close()
	var held string
	deadline := time.Now().Add(3*lease + 30*time.Second)
	for {
		held = slotsHeld(rdb, prefix, reps)
		if held == "" || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if held != "" {
		t.Errorf("admission slots still held %s after the last query: %s", (3*lease + 30*time.Second).String(), held)
	} else {
		t.Logf("admission: 0 in flight and 0 queued on both replicas and in Redis")
	}
	// Queries a replica counted LOST: admitted on the Trino that was
	// killed, their slots freed when the monitor saw it restarted.
	for _, r := range reps {
		if m, err := e2e.ReadMetrics(r.base); err == nil {
			lost, _ := m.Value(`prestroid_completed_queries_total{state="LOST"}`)
			t.Logf("replica %s: %.0f queries LOST to the Trino restart (slots freed then)", r.name, lost)
		}
	}

	// fds, goroutines and memory back near the baseline (the restarted
	// replica against the first one's). Tolerances: fds by kind
	// (fdLeaks) and 25 goroutines (the balancer's and the samplers'
	// connections, the monitor's probes); memory: what the estimator caches hold and the Go
	// runtime keeps by its rules, and no more (memoryLeaks). The heap is
	// judged on a GC after the load: the runtime forces one every 2
	// minutes when none ran, so the full version waits for it (the short
	// one judges the last GC's figure if none ran within its settle).
	waitGC := set.waitGC
	ok := func(name string, b, a sample) []string {
		var l []string
		l = append(l, fdLeaks(b, a)...)
		if a.goroutines > b.goroutines+25 {
			l = append(l, fmt.Sprintf("goroutines %d -> %d", b.goroutines, a.goroutines))
		}
		gcAfter := a.gcs >= gcsAtEnd[name]+2 && a.lastGC >= float64(loadEnd.Add(time.Minute).UnixNano())/1e9
		if waitGC && !gcAfter {
			l = append(l, "not two GCs since the load ended, the last a minute after it")
		}
		return append(l, memoryLeaks(b, a, gcAfter)...)
	}
	lb.close()
	gc.close()
	settleFrom := time.Now()
	for _, r := range reps {
		var last sample
		var leaks []string
		for {
			last, err = r.sample(pools)
			if err != nil {
				t.Fatal(err)
			}
			leaks = ok(r.name, base[r.name], last)
			if len(leaks) == 0 || time.Since(settleFrom) > set.settle {
				break
			}
			time.Sleep(time.Second)
		}
		t.Logf("replica %s after (%s after the last query): %s", r.name, time.Since(settleFrom).Round(time.Second), last)
		if last.gcs < gcsAtEnd[r.name]+2 || last.lastGC < float64(loadEnd.Add(time.Minute).UnixNano())/1e9 {
			t.Logf("replica %s: %.0f GCs since the load ended, the last %.0f s after it: its live heap is not judged (RSS is)", r.name,
				last.gcs-gcsAtEnd[r.name], last.lastGC-float64(loadEnd.UnixNano())/1e9)
		} else {
			t.Logf("replica %s: live heap %+.1f MiB, estimator caches %+.1f MiB, RSS %+.1f MiB since the baseline", r.name,
				(last.live()-base[r.name].live())/(1<<20), (last.cacheBytes()-base[r.name].cacheBytes())/(1<<20), (last.rss-base[r.name].rss)/(1<<20))
		}
		if len(leaks) > 0 {
			t.Errorf("replica %s not back to its baseline: %s", r.name, strings.Join(leaks, ", "))
		}
	}
	t.Logf("soak: %s in all", time.Since(began).Round(time.Second))
}

// variesDirectly runs sql directly with c up to three times and reports
// whether a run gives sum: a statement whose result varies from run to run
// (ties, double sums) matches on some run; rows the proxy changed never do.
func variesDirectly(c client, trino, sql, sum string, timeout time.Duration) bool {
	for range 3 {
		if r := runWith(c, trino, "soak-ref", []string{sql}, timeout)[0]; r.ok && r.sum == sum {
			return true
		}
	}
	return false
}
