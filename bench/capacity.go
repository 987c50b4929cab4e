package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/internal/capacity"
)

// CapacityOptions configure Capacity; `prestroid bench capacity`
// documents the defaults of its flags.
type CapacityOptions struct {
	// Bin is the prestroid binary run as the replica (`prestroid serve`).
	Bin string
	// Trino is the real Trino the replica fronts.
	Trino string
	// Workloads holds tpch/*.sql; Scale fills them ("tiny").
	Workloads, Scale string
	// Rounds is the passes over the TPC-H templates of a measured pass.
	Rounds int
	// Concurrency is the number of clients.
	Concurrency int
	// RedisServer is the redis-server binary; RedisBenchmark redis-benchmark
	// (empty: no ceiling measured).
	RedisServer, RedisBenchmark string
	// Repo is the repository root (the Lua scripts are read from it, to
	// name them and to benchmark them).
	Repo string
	// ORTLib is the ONNX Runtime library the replica loads.
	ORTLib string
	// Only, when set, runs only the phases named.
	Only []string
	// Command is the command line, for the figures' provenance.
	Command string
}

// capPhase is one configuration of the replica and its passes.
type capPhase struct {
	name   string
	config string // YAML after listen, route_secret, clusters and routing
	redis  bool   // the replica's Redis goes through the relay
	passes []capPass
	idle   time.Duration // a quiet window measured after the passes
}

// capPass is one pass over the statements, measured (into a path or a
// feature of the figures) or a warm-up.
type capPass struct {
	rounds  int
	path    string // capacity.Path*: the proxy cost goes there
	feature string // capacity.Feature*: the Redis cost goes there
	want    string // the Server-Timing path expected ("" any)
	base    string // capacity.Path* the feature's measurement ran on ("": pass-through)
}

func (p capPass) measured() bool { return p.path != "" || p.feature != "" }

// capacityPhases are the replica configurations measured. Every phase
// has the monitor off (its polls are per replica, not per statement) and
// the estimate cache off unless it is what is measured.
func capacityPhases(rounds int, redisURL string) []capPhase {
	noCache := "  cache_ttl: -1s\n"
	histOff := "  history: {disabled: true}\n"
	hist := "  history: {min_count: 2, max_spread: 1.5, redis_timeout: 1s%s}\n"
	return []capPhase{
		{name: "passthrough", config: "estimator: {disabled: true}\n",
			passes: []capPass{{rounds: 1}, {rounds: rounds, path: capacity.PathPassthrough, want: "none"}}},
		{name: "text", config: "estimator:\n  explain: never\n  explain_rate: 0.0001\n  explain_burst: 1\n" + noCache + histOff,
			passes: []capPass{{rounds: 1}, {rounds: rounds, path: capacity.PathText, want: "text"}}},
		{name: "text_learn", config: "estimator:\n  explain: never\n  learn_min_runs: -1\n" + noCache + histOff,
			passes: []capPass{{rounds: 1}, {rounds: rounds, path: capacity.PathTextLearn, want: "text"}}},
		{name: "explain", config: "estimator:\n  explain: always\n" + noCache + histOff,
			passes: []capPass{{rounds: 1}, {rounds: rounds, path: capacity.PathExplain, want: "explain"}}},
		{name: "history", config: "estimator:\n  explain: always\n" + noCache + fmt.Sprintf(hist, ""),
			passes: []capPass{{rounds: 3}, {rounds: rounds, path: capacity.PathHistory, want: "history"}}},
		{name: "cache", config: "estimator:\n  explain: always\n  cache_ttl: 1h\n" + histOff,
			passes: []capPass{{rounds: 1}, {rounds: rounds, path: capacity.PathCache, want: "cache"}}},
		{name: "redis_admission", redis: true, config: "estimator: {disabled: true}\nadmission:\n  max_queries: 1000\n  user_max_queries: 100\n  group_max_queries: 500\n  max_cpu_seconds: 100000\n  redis: " + redisURL + "\nusage: {disabled: true}\n",
			passes: []capPass{{rounds: 1}, {rounds: rounds, feature: capacity.FeatureAdmission}}},
		{name: "redis_rate_limit", redis: true, config: "estimator: {disabled: true}\nadmission:\n  user_rate: 10000\n  group_rate: 100000\n  redis: " + redisURL + "\nusage: {disabled: true}\n",
			passes: []capPass{{rounds: 1}, {rounds: rounds, feature: capacity.FeatureRateLimit}}},
		// Usage writes more fields for an estimated statement: measured on
		// the text stage (no EXPLAIN), whose CPU the model subtracts.
		{name: "redis_usage", redis: true, config: "estimator:\n  explain: never\n  explain_rate: 0.0001\n  explain_burst: 1\n" + noCache + histOff + "usage:\n  redis: " + redisURL + "\n",
			passes: []capPass{{rounds: 1}, {rounds: rounds, feature: capacity.FeatureUsage, base: capacity.PathText}}},
		{name: "redis_history", redis: true, config: "estimator:\n  explain: always\n" + noCache + fmt.Sprintf(hist, ", redis: "+redisURL),
			passes: []capPass{{rounds: 1, feature: capacity.FeatureHistoryFirst, want: "explain"}, {rounds: 2},
				{rounds: rounds, feature: capacity.FeatureHistoryRepeat, want: "history"}}},
		// A first sight the text stage answers, with the history in Redis
		// (its reads before the plan; background EXPLAINs held off by the
		// ceiling, learnReason still reads).
		{name: "redis_history_text", redis: true, config: "estimator:\n  explain: never\n  explain_rate: 0.0001\n  explain_burst: 1\n" + noCache + fmt.Sprintf(hist, ", redis: "+redisURL),
			passes: []capPass{{rounds: 1, feature: capacity.FeatureHistoryText, want: "text", base: capacity.PathText}}},
		{name: "redis_all", redis: true, idle: 10 * time.Second,
			config: "estimator:\n  explain: always\n" + noCache + fmt.Sprintf(hist, ", redis: "+redisURL) +
				"admission:\n  max_queries: 1000\n  user_max_queries: 100\n  group_max_queries: 500\n  max_cpu_seconds: 100000\n  user_rate: 10000\n  group_rate: 100000\n  redis: " + redisURL + "\n",
			passes: []capPass{{rounds: rounds, feature: featureAll}}},
	}
}

// featureAll is the pass with every feature on: Figures.Check.
const featureAll = "all"

// capStatement is one statement of a pass.
type capStatement struct{ sql, catalog, schema, user string }

// capResult is one statement's outcome.
type capResult struct {
	path   string // from Server-Timing: none, text, history, cheap, explain, cache
	decide time.Duration
	err    error
}

// Capacity measures one replica's cost per statement on each decision
// path and the Redis cost per statement of each shared feature, and the
// ceiling of one Redis under our commands: the real binary (o.Bin) in
// front of the real Trino, its CPU read from /proc, a real redis-server
// behind a counting relay. It prints a report to w and returns the
// figures.
func Capacity(w io.Writer, o CapacityOptions) (capacity.Figures, error) {
	f := capacity.Figures{Paths: map[string]capacity.PathCost{}, Redis: map[string]capacity.RedisCost{}}
	ts, err := collector.LoadTemplates(o.Workloads)
	if err != nil {
		return f, err
	}
	var stmts []capStatement
	for _, t := range ts {
		if t.Family != "tpch" {
			continue
		}
		it := collector.TemplateVariant(t, o.Scale, 0, 1, 0, nil)
		stmts = append(stmts, capStatement{sql: it.SQL, catalog: it.Catalog, schema: it.Schema,
			user: fmt.Sprintf("capacity-%d", len(stmts)%8)})
	}
	if len(stmts) == 0 {
		return f, fmt.Errorf("bench: no TPC-H templates in %s", o.Workloads)
	}
	scripts, err := luaScripts(o.Repo)
	if err != nil {
		return f, err
	}
	rs, err := startRedisServer(o.RedisServer)
	if err != nil {
		return f, err
	}
	defer rs.stop()
	relay, err := startRedisRelay(rs.addr, scripts)
	if err != nil {
		return f, err
	}
	defer relay.Close()
	rdb := redis.NewClient(&redis.Options{Addr: rs.addr})
	defer rdb.Close()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(w, "Trino %s, %d TPC-H statements at %s × %d rounds a pass, %d clients, %d CPUs, load %s",
		o.Trino, len(stmts), o.Scale, o.Rounds, o.Concurrency, runtime.NumCPU(), load)
	for _, ph := range capacityPhases(o.Rounds, "redis://"+relay.Addr()+"/0") {
		if len(o.Only) > 0 && !contains(o.Only, ph.name) {
			continue
		}
		if err := runCapPhase(w, o, ph, stmts, relay, rdb, &f); err != nil {
			return f, fmt.Errorf("phase %s: %w", ph.name, err)
		}
	}
	if o.RedisBenchmark != "" && (len(o.Only) == 0 || contains(o.Only, "ceiling")) {
		c, err := redisCeiling(w, o, rs.addr, rdb)
		if err != nil {
			return f, err
		}
		f.RedisCeiling = c
	}
	f.Provenance = capacity.Provenance{Date: time.Now().UTC().Format(time.RFC3339), Command: o.Command,
		Machine: fmt.Sprintf("%d CPUs, load average %s", runtime.NumCPU(), strings.TrimSpace(string(load)))}
	return f, nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// runCapPhase starts the replica with the phase's configuration, runs its
// passes and records the measured ones in f.
func runCapPhase(w io.Writer, o CapacityOptions, ph capPhase, stmts []capStatement, relay *redisRelay, rdb *redis.Client, f *capacity.Figures) error {
	ctx := context.Background()
	if ph.redis {
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	rep, err := startReplica(o, ph.config)
	if err != nil {
		return err
	}
	defer rep.stop()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}}
	for i, p := range ph.passes {
		var list []capStatement
		for r := 0; r < p.rounds; r++ {
			list = append(list, stmts...)
		}
		// What the replica does with no statement (timers, GC, Redis
		// sweeps) over a quiet window, subtracted from a measured pass.
		// Measured before and after the pass, the lower of the two is
		// taken: what the warm-up (or the pass) left running in the
		// background, still settling, would otherwise be subtracted.
		var quiet *capRates
		if p.measured() {
			q := quietRates(ctx, rep, relay, rdb)
			quiet = &q
		}
		before := takeCapSnapshot(ctx, rep, relay, rdb)
		t0 := time.Now()
		res := runStatements(client, rep.base, list, o.Concurrency)
		wall := time.Since(t0)
		// The learner writes the history after each completion, in
		// batches: let the last ones land before the counters are read.
		time.Sleep(1500 * time.Millisecond)
		after := takeCapSnapshot(ctx, rep, relay, rdb)
		if quiet != nil {
			q := quiet.min(quietRates(ctx, rep, relay, rdb))
			quiet = &q
			after = quiet.subtractFrom(before, after)
		}
		paths, failed, decide := map[string]int{}, 0, time.Duration(0)
		var firstErr error
		for _, r := range res {
			paths[r.path]++
			decide += r.decide
			if r.err != nil {
				failed++
				if firstErr == nil {
					firstErr = r.err
				}
			}
		}
		n := float64(len(res))
		cpu := (after.cpu - before.cpu).Seconds()
		explains := after.explains - before.explains
		explainSec := after.explainSec - before.explainSec
		label := p.path + p.feature
		if label == "" {
			label = "warm-up"
		}
		fmt.Fprintf(w, "\n%s pass %d (%s): %d statements in %s (%d failed), paths %v\n", ph.name, i+1, label, len(res),
			wall.Round(time.Millisecond), failed, paths)
		if firstErr != nil {
			fmt.Fprintf(w, "  first failure: %v\n", firstErr)
		}
		if quiet != nil {
			fmt.Fprintf(w, "  quiet: proxy CPU %.2f ms/s, Redis %.2f ops/s, %.0f B/s in (subtracted below)\n", 1000*quiet.cpu, quiet.ops, quiet.in)
		}
		fmt.Fprintf(w, "  proxy CPU %.3f s = %.3f ms/statement (%.0f statements/s per core); /proc/PID/stat %.2f s\n",
			cpu, 1000*cpu/n, n/cpu, after.ticks-before.ticks)
		fmt.Fprintf(w, "  EXPLAINs %.0f (%.3f/statement), their wall time %.3f s (%.1f ms/statement); decision %.2f ms/statement\n",
			explains, explains/n, explainSec, 1000*explainSec/n, float64(decide.Microseconds())/1000/n)
		if p.path != "" {
			f.Paths[p.path] = capacity.PathCost{Statements: len(res), CPUSeconds: cpu / n, Explains: explains / n,
				ExplainSeconds: explainSec / n, DecideSeconds: decide.Seconds() / n, Share: float64(paths[p.want]) / n}
		}
		if ph.redis {
			rc := redisCostOf(before, after, n)
			rc.Statements = len(res)
			printRedisCost(w, rc, "statement")
			rc.ProxyCPUSeconds, rc.BasePath = cpu/n, p.base
			switch p.feature {
			case "":
			case featureAll:
				mix := map[string]float64{}
				for path, k := range paths {
					mix[map[string]string{"none": capacity.PathPassthrough, "text": capacity.PathTextLearn}[path]+
						map[bool]string{true: path}[path != "none" && path != "text"]] += float64(k) / n
				}
				f.Check = &capacity.Check{Mix: mix,
					Features:   []string{capacity.FeatureAdmission, capacity.FeatureRateLimit, capacity.FeatureUsage, capacity.FeatureHistory},
					Statements: len(res), CPUSeconds: cpu / n, Redis: rc}
			default:
				f.Redis[p.feature] = rc
			}
		}
	}
	if ph.idle > 0 {
		before := takeCapSnapshot(ctx, rep, relay, rdb)
		time.Sleep(ph.idle)
		after := takeCapSnapshot(ctx, rep, relay, rdb)
		rc := redisCostOf(before, after, ph.idle.Seconds())
		fmt.Fprintf(w, "%s: %s without statements, proxy CPU %.4f s/s\n", ph.name, ph.idle, (after.cpu-before.cpu).Seconds()/ph.idle.Seconds())
		printRedisCost(w, rc, "second")
		f.RedisIdle = rc
	}
	return nil
}

func redisCostOf(before, after capSnapshot, n float64) capacity.RedisCost {
	d := after.relay.sub(before.relay)
	rc := capacity.RedisCost{Ops: map[string]float64{}, RoundTrips: float64(d.trips) / n, BytesIn: float64(d.in) / n, BytesOut: float64(d.out) / n,
		Commands: (after.redisCmds - before.redisCmds) / n, CPUSeconds: (after.redisCPU - before.redisCPU) / n}
	for k, v := range d.ops {
		if connectionSetup[k] {
			continue // once per new connection, not per statement
		}
		rc.Ops[k] = float64(v) / n
	}
	return rc
}

// connectionSetup are the commands go-redis sends on a new connection.
var connectionSetup = map[string]bool{"HELLO": true, "CLIENT SETINFO": true, "CLIENT MAINT_NOTIFICATIONS": true}

func printRedisCost(w io.Writer, rc capacity.RedisCost, per string) {
	keys := make([]string, 0, len(rc.Ops))
	for k := range rc.Ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ops []string
	for _, k := range keys {
		ops = append(ops, fmt.Sprintf("%s %.2f", k, rc.Ops[k]))
	}
	fmt.Fprintf(w, "  Redis per %s: %.2f round trips, %.2f ops [%s], %.1f commands executed, %.0f B in, %.0f B out, Redis CPU %.1f µs\n",
		per, rc.RoundTrips, rc.TotalOps(), strings.Join(ops, ", "), rc.Commands, rc.BytesIn, rc.BytesOut, 1e6*rc.CPUSeconds)
}

// quietWindow is how long the replica's quiet rates are measured before
// a measured pass.
const quietWindow = 5 * time.Second

// capRates are a replica's counters per second with no statement.
type capRates struct {
	cpu, ticks, redisCmds, redisCPU, ops, in, out, trips float64
	opsBy                                                map[string]float64
}

func rates(a, b capSnapshot) capRates {
	s := b.at.Sub(a.at).Seconds()
	d := b.relay.sub(a.relay)
	r := capRates{cpu: (b.cpu - a.cpu).Seconds() / s, ticks: (b.ticks - a.ticks) / s,
		redisCmds: (b.redisCmds - a.redisCmds) / s, redisCPU: (b.redisCPU - a.redisCPU) / s,
		in: float64(d.in) / s, out: float64(d.out) / s, trips: float64(d.trips) / s, opsBy: map[string]float64{}}
	for k, v := range d.ops {
		r.opsBy[k] = float64(v) / s
		r.ops += float64(v) / s
	}
	return r
}

// quietRates lets the replica settle, then measures its rates over
// quietWindow.
func quietRates(ctx context.Context, rep *replicaProc, relay *redisRelay, rdb *redis.Client) capRates {
	time.Sleep(2 * time.Second)
	a := takeCapSnapshot(ctx, rep, relay, rdb)
	time.Sleep(quietWindow)
	return rates(a, takeCapSnapshot(ctx, rep, relay, rdb))
}

// min is the lower of q and o, figure by figure.
func (q capRates) min(o capRates) capRates {
	r := capRates{cpu: min(q.cpu, o.cpu), ticks: min(q.ticks, o.ticks), redisCmds: min(q.redisCmds, o.redisCmds),
		redisCPU: min(q.redisCPU, o.redisCPU), ops: min(q.ops, o.ops), in: min(q.in, o.in), out: min(q.out, o.out),
		trips: min(q.trips, o.trips), opsBy: map[string]float64{}}
	for k, v := range q.opsBy {
		r.opsBy[k] = min(v, o.opsBy[k])
	}
	return r
}

// subtractFrom returns after less what the quiet rates account for
// between before and after (never below before).
func (q capRates) subtractFrom(before, after capSnapshot) capSnapshot {
	s := after.at.Sub(before.at).Seconds()
	sub := func(b, a, rate float64) float64 { return max(b, a-rate*s) }
	after.cpu = time.Duration(sub(float64(before.cpu), float64(after.cpu), q.cpu*1e9))
	after.ticks = sub(before.ticks, after.ticks, q.ticks)
	after.redisCmds = sub(before.redisCmds, after.redisCmds, q.redisCmds)
	after.redisCPU = sub(before.redisCPU, after.redisCPU, q.redisCPU)
	r := relayCounts{ops: map[string]int64{}, in: int64(sub(float64(before.relay.in), float64(after.relay.in), q.in)),
		out:   int64(sub(float64(before.relay.out), float64(after.relay.out), q.out)),
		trips: int64(sub(float64(before.relay.trips), float64(after.relay.trips), q.trips))}
	for k, v := range after.relay.ops {
		r.ops[k] = int64(sub(float64(before.relay.ops[k]), float64(v), q.opsBy[k]))
	}
	after.relay = r
	return after
}

// capSnapshot is the counters read before and after a pass.
type capSnapshot struct {
	at                   time.Time
	cpu                  time.Duration // the replica's on-CPU time, every thread
	ticks                float64       // utime+stime of /proc/PID/stat, seconds (a check)
	explains, explainSec float64
	relay                relayCounts
	redisCmds, redisCPU  float64
}

func takeCapSnapshot(ctx context.Context, rep *replicaProc, relay *redisRelay, rdb *redis.Client) capSnapshot {
	s := capSnapshot{at: time.Now()}
	s.cpu, s.ticks = processCPU(rep.cmd.Process.Pid)
	m := scrapeMetrics(rep.base + "/metrics")
	s.explains = m["prestroid_explains_by_reason_total"] - m[`prestroid_explains_by_reason_total{reason="skipped_ceiling"}`]
	s.explainSec = m["prestroid_explain_seconds_sum"]
	s.relay = relay.snapshot()
	if info, err := rdb.Info(ctx, "cpu", "commandstats").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			line = strings.TrimSpace(line)
			k, v, _ := strings.Cut(line, ":")
			switch {
			case k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread":
				x, _ := strconv.ParseFloat(v, 64)
				s.redisCPU += x
			case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info" && !strings.HasPrefix(k, "cmdstat_flushall"):
				calls, _, _ := strings.Cut(strings.TrimPrefix(v, "calls="), ",")
				x, _ := strconv.ParseFloat(calls, 64)
				s.redisCmds += x
			}
		}
	}
	return s
}

// processCPU returns the on-CPU time of every thread of pid
// (/proc/PID/task/*/schedstat, nanoseconds) and, as a check, the process's
// utime+stime (/proc/PID/stat, clock ticks of 10 ms).
func processCPU(pid int) (time.Duration, float64) {
	var ns int64
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			ns += v
		}
	}
	var ticks float64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				ticks = (u + st) / 100
			}
		}
	}
	return time.Duration(ns), ticks
}

// scrapeMetrics sums each metric of a Prometheus text page over its label
// sets (by name) and keeps each labelled series too.
func scrapeMetrics(url string) map[string]float64 {
	m := map[string]float64{}
	resp, err := http.Get(url)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		m[series] += v
		if j := strings.IndexByte(series, '{'); j > 0 {
			m[series[:j]] += v
		}
	}
	return m
}

// runStatements runs every statement to its last page with n clients.
func runStatements(c *http.Client, base string, list []capStatement, n int) []capResult {
	res := make([]capResult, len(list))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range max(1, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(list) {
					return
				}
				res[i] = runStatement(c, base, list[i])
			}
		}()
	}
	wg.Wait()
	return res
}

// runStatement POSTs the statement and follows nextUri to the last page.
func runStatement(c *http.Client, base string, s capStatement) capResult {
	h := http.Header{}
	h.Set("X-Trino-User", s.user)
	h.Set("X-Trino-Catalog", s.catalog)
	h.Set("X-Trino-Schema", s.schema)
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(s.sql))
	req.Header = h
	resp, err := c.Do(req)
	if err != nil {
		return capResult{path: "none", err: err}
	}
	r := capResult{path: timingPath(resp.Header.Get("Server-Timing")), decide: serverTiming(resp.Header.Get("Server-Timing"), "prestroid")}
	for {
		var p struct {
			NextURI string `json:"nextUri"`
			Error   *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		err := json.NewDecoder(resp.Body).Decode(&p)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			r.err = err
			return r
		case p.Error != nil:
			r.err = fmt.Errorf("query failed: %s", p.Error.Message)
			return r
		case p.NextURI == "":
			return r
		}
		req, _ := http.NewRequest("GET", p.NextURI, nil)
		req.Header = h
		if resp, err = c.Do(req); err != nil {
			r.err = err
			return r
		}
	}
}

// timingPath reads the decision path from the proxy's Server-Timing.
func timingPath(st string) string {
	switch {
	case strings.Contains(st, "estimate-cache;desc=hit"):
		return "cache"
	case strings.Contains(st, "explain;dur="):
		return "explain"
	case strings.Contains(st, "estimate;desc="):
		_, s, _ := strings.Cut(st, "estimate;desc=")
		s, _, _ = strings.Cut(s, ",")
		return strings.TrimSpace(s)
	}
	return "none"
}

// proc is a process the benchmark started and the directory it made for
// it; stop kills it and removes the directory.
type proc struct {
	cmd *exec.Cmd
	dir string
}

func (p *proc) stop() {
	p.cmd.Process.Kill()
	p.cmd.Wait()
	os.RemoveAll(p.dir)
}

// replicaProc is one running `prestroid serve`.
type replicaProc struct {
	proc
	base string
}

// startReplica runs o.Bin with the configuration body in front of
// o.Trino, and waits for its /metrics.
func startReplica(o CapacityOptions, body string) (*replicaProc, error) {
	port, err := FreeTCPPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "prestroid-capacity-")
	if err != nil {
		return nil, err
	}
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%d
route_secret: %s
clusters:
  - {name: live, url: %q}
routing:
  monitor_interval: -1s
  estimate_timeout: 60s
`, port, strings.Repeat("c", 40), o.Trino) + body
	if o.ORTLib != "" && strings.Contains(body, "estimator:\n") {
		cfg = strings.Replace(cfg, "estimator:\n", "estimator:\n  ort_lib: "+strconv.Quote(o.ORTLib)+"\n", 1)
	}
	path := filepath.Join(dir, "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Bin, "serve", "--log-level", "warn", "--config", path)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with the benchmark
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := &replicaProc{proc: proc{cmd: cmd, dir: dir}, base: fmt.Sprintf("http://127.0.0.1:%d", port)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(r.base + "/metrics")
		if err == nil {
			resp.Body.Close()
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("the replica did not answer within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreeTCPPort is a loopback port free now, for a server started next.
func FreeTCPPort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// redisProc is a redis-server started for the benchmark (persistence
// off): a process with its directory, as a replica is.
type redisProc struct {
	proc
	addr string
}

func startRedisServer(bin string) (*redisProc, error) {
	port, err := FreeTCPPort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "prestroid-capacity-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: %s: %w", bin, err)
	}
	r := &redisProc{proc: proc{cmd: cmd, dir: dir}, addr: "127.0.0.1:" + strconv.Itoa(port)}
	c := redis.NewClient(&redis.Options{Addr: r.addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(context.Background()).Err() == nil {
			return r, nil
		}
		if time.Now().After(deadline) {
			r.stop()
			return nil, fmt.Errorf("bench: redis-server on %s did not answer", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisCeiling measures one redis-server's throughput under each command
// our replicas send, as they send it (redis-benchmark, 50 clients, no
// pipelining, random users and keys): the history's GET and MGET, the
// rate limit's script, admission's entry script (unlimited budgets, so
// every call admits and charges) and release, and the history's
// compare-and-set script with one key. Scripts are loaded from the
// repository (SCRIPT LOAD), as go-redis' EVALSHA finds them.
func redisCeiling(w io.Writer, o CapacityOptions, addr string, rdb *redis.Client) (map[string]float64, error) {
	ctx := context.Background()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		return nil, err
	}
	dir := filepath.Join(o.Repo, "proxy", "admission", "lua")
	prelude, err := os.ReadFile(filepath.Join(dir, "admission.lua"))
	if err != nil {
		return nil, err
	}
	load := func(path string, withPrelude bool) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		body := string(b)
		if withPrelude {
			body = string(prelude) + "\n" + body
		}
		return rdb.ScriptLoad(ctx, body).Result()
	}
	rl, err := load(filepath.Join(dir, "ratelimit.lua"), false)
	if err != nil {
		return nil, err
	}
	enter, err := load(filepath.Join(dir, "enter.lua"), true)
	if err != nil {
		return nil, err
	}
	bind, err := load(filepath.Join(dir, "bind.lua"), true)
	if err != nil {
		return nil, err
	}
	release, err := load(filepath.Join(dir, "release.lua"), true)
	if err != nil {
		return nil, err
	}
	cas, err := load(filepath.Join(o.Repo, "estimator", "history", "redis_cas.lua"), false)
	if err != nil {
		return nil, err
	}
	// ARGV[1..13] of the admission scripts: the budgets (0: unlimited),
	// queue size, lease, TTL, max wait (ms), memory budgets.
	limits := []string{"0", "0", "0", "0", "0", "0", "1000", "30000", "720000", "600000", "0", "0", "0"}
	stat := strings.Repeat("s", 56) // Stats.MarshalBinary's size
	cases := []struct {
		name string
		args []string
	}{
		{"GET", []string{"GET", "p:h:__rand_int__"}},
		{"MGET", []string{"MGET", "p:h:a__rand_int__", "p:h:b__rand_int__", "p:h:c__rand_int__", "p:h:d__rand_int__", "p:h:e__rand_int__"}},
		{"EVALSHA ratelimit.lua", []string{"EVALSHA", rl, "1", "p:", "u:user__rand_int__", "10000", "10000", "g:group__rand_int__", "100000", "100000"}},
		{"EVALSHA enter.lua", append(append([]string{"EVALSHA", enter, "1", "p:"}, limits...),
			"id__rand_int__", "user__rand_int__", "group__rand_int__", "1.5", "", "0", "", "0")},
		{"EVALSHA bind.lua", append(append([]string{"EVALSHA", bind, "1", "p:"}, limits...), "id__rand_int__", "up__rand_int__")},
		{"EVALSHA release.lua", append(append([]string{"EVALSHA", release, "1", "p:"}, limits...), "t", "id__rand_int__")},
		{"EVALSHA redis_cas.lua", []string{"EVALSHA", cas, "3", "p:hlru", "p:hseq", "p:h:__rand_int__", "100000", "", stat}},
	}
	host, port, _ := net.SplitHostPort(addr)
	out := map[string]float64{}
	fmt.Fprintf(w, "\nOne redis-server's ceiling (redis-benchmark -c 50 -n 100000 -r 100000, no pipelining):\n"+
		"its main thread's CPU per op (INFO cpu) gives the ceiling of one dedicated core; the wall rate is this machine's\n")
	for _, c := range cases {
		cpu0 := redisMainCPU(ctx, rdb)
		args := append([]string{"-h", host, "-p", port, "-c", "50", "-n", "100000", "-r", "100000", "--csv"}, c.args...)
		b, err := exec.Command(o.RedisBenchmark, args...).Output()
		if err != nil {
			return nil, fmt.Errorf("bench: redis-benchmark %s: %w", c.name, err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		fields := strings.Split(lines[len(lines)-1], ",")
		if len(fields) < 2 {
			return nil, fmt.Errorf("bench: redis-benchmark %s: %q", c.name, b)
		}
		rps, err := strconv.ParseFloat(strings.Trim(fields[1], `"`), 64)
		if err != nil {
			return nil, fmt.Errorf("bench: redis-benchmark %s: %q", c.name, b)
		}
		perOp := (redisMainCPU(ctx, rdb) - cpu0) / 100000
		out[c.name] = 1 / perOp
		fmt.Fprintf(w, "  %-24s %6.1f µs CPU/op: %7.0f ops/s per core; wall %7.0f ops/s here (p50 %s ms, p99 %s ms)\n",
			c.name, 1e6*perOp, 1/perOp, rps, strings.Trim(fields[4], `"`), strings.Trim(fields[6], `"`))
	}
	// The usage accounting's transaction as proxy/usage writes it: three
	// hashes (user, group, source) of the minute's bucket, 3 HINCRBY, 12
	// HINCRBYFLOAT and 3 EXPIRE in one MULTI/EXEC. redis-benchmark sends
	// one command; a Go client sends this, with 50 goroutines.
	const txs = 20000
	cpu0 := redisMainCPU(ctx, rdb)
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	var txErr atomic.Value
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= txs {
				_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
					u := strconv.Itoa(int(next.Load() % 1000))
					for _, d := range []string{"user", "group", "source"} {
						h := "p:usage:1765000000:" + d
						for i := range 5 {
							if i < 1 {
								p.HIncrBy(ctx, h, "queries:"+u, 1)
							} else {
								p.HIncrByFloat(ctx, h, "f"+strconv.Itoa(i)+":"+u, 1.5)
							}
						}
						p.Expire(ctx, h, 25*time.Hour)
					}
					return nil
				})
				if err != nil {
					txErr.Store(err)
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := txErr.Load().(error); err != nil {
		return nil, fmt.Errorf("bench: usage transaction: %w", err)
	}
	perTx := (redisMainCPU(ctx, rdb) - cpu0) / txs
	out["EXEC"] = 1 / perTx
	fmt.Fprintf(w, "  %-24s %6.1f µs CPU/op: %7.0f ops/s per core; wall %7.0f ops/s here (a Go client, 50 goroutines)\n",
		"MULTI…EXEC usage (18 cmds)", 1e6*perTx, 1/perTx, txs/time.Since(t0).Seconds())
	return out, nil
}

// redisMainCPU is Redis' main-thread CPU seconds (INFO cpu).
func redisMainCPU(ctx context.Context, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "cpu").Result()
	if err != nil {
		return 0
	}
	var v float64
	for _, line := range strings.Split(info, "\n") {
		k, x, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user_main_thread" || k == "used_cpu_sys_main_thread" {
			f, _ := strconv.ParseFloat(x, 64)
			v += f
		}
	}
	return v
}
