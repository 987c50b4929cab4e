package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/internal/dialect"
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Settings are the estimating proxies (each with its history on,
	// cold), in front of the same real Trino, that run the workload side
	// by side: each statement goes to every one in turn (the first one
	// rotating, so that none always finds Trino warm). Their names label
	// the report (e.g. the estimator.explain setting).
	Settings []ReplaySetting
	// Bounds are the CPU-second bounds of the routing classes the proxies
	// route with, increasing; their clusters are named ClassName(i), so the
	// cluster a statement went to is its class. Empty: one class.
	Bounds []float64
	// Workloads is the directory of templates; Families limits them (e.g.
	// "tpch"; empty: all); Scale the schema they are filled with; Domains
	// the literal domains of the variant generator (data/domains.json).
	Workloads string
	Families  []string
	Scale     string
	Domains   *collector.Domains
	// N statements are run in order; a share New of them are templates
	// never run before, the rest repeat one already run: half exactly,
	// half with new literals. Seed fixes the draw.
	N    int
	New  float64
	Seed uint64
	// MaxDuration stops the replay after the statement running when it
	// has passed (the report covers the statements run). Zero means none.
	MaxDuration time.Duration
	// Runs, when set, gets one JSON line per statement and setting (what
	// the report is computed from), for analysis beyond the report.
	Runs io.Writer
	// Users sends statement i as user bench-replay-(i mod Users), as a
	// fleet of users repeating each other's statements. Zero or one means
	// one user, bench-replay. A Fleet names its own users.
	Users int
	// Fleet, when set, draws the statements as a fleet runs them
	// (FleetMix: dashboards, scheduled ETL, ad-hoc) instead of New's
	// share of new templates, and adds the fleet's report (reportFleet).
	Fleet *FleetMix
	// Storage places the statements in a catalog of materialized copies
	// of the TPC schemas (collector.Place: e.g. "iceberg", Parquet tables
	// partitioned by date); empty, the TPC connectors.
	Storage string
	// Templates limits the templates to these names (e.g. "tpch/q06");
	// empty, all of Families.
	Templates []string
}

// ReplaySetting is one estimating proxy of a replay.
type ReplaySetting struct {
	Name, ProxyURL string
}

// ClassName is the name of class i of a replay's classes (and of the
// cluster that serves it).
func ClassName(i int) string { return "class" + strconv.Itoa(i) }

// replayRun is one statement of the replay as the proxy placed it and
// Trino ran it.
type replayRun struct {
	idx                int    // the statement's position in the replay
	kind               string // new, exact, literals
	template           string
	variant            int
	source             string
	est, model, actual float64 // CPU seconds; model 0 when the model did not run on the hot path
	optimizer          float64 // the calibrated optimizer's CPU seconds (0: no hot-path plan, or not fitted yet)
	text               float64 // the text stage's CPU seconds on a statement the model served (0: not known)
	lo, hi             float64 // the served central 80% interval, CPU seconds
	class              int     // the class of the cluster it went to (-1: not a class's)
	decide             time.Duration
	explained          bool
	user               string
	cached             bool               // served from the estimate cache
	explains           map[string]float64 // the proxy's EXPLAINs by reason while it decided (prestroid_explains_by_reason_total)
	// beyond is the peak memory (bytes) and the elapsed time (seconds):
	// the served median and 80% interval when the estimate predicted them
	// (0: not), and what Trino reported.
	beyond [2]servedQuantity
}

// explainCount is the EXPLAIN round trips of r (hot, learn, drift).
func (r replayRun) explainCount() float64 {
	return r.explains["hot"] + r.explains["learn"] + r.explains["drift"]
}

// Replay runs a recurring workload through the estimating proxies from a
// cold history, in order, with feedback on, and
// reports per setting, per estimate source and overall: the decision time
// (p50/p99), the q-error (median, p95) over the run and over its last
// half, against the plain model's own number and the calibrated
// optimizer's (Trino's plan cost mapped to seconds by the cascade's
// online fit, as the optimizer stage would serve it) on the same statements, the
// share routed to the class of the actual CPU time, and the share that
// needed an EXPLAIN on the hot path; then the settings side by side
// against the targets.
func Replay(w io.Writer, o ReplayOptions) error {
	all, err := collector.LoadTemplates(o.Workloads)
	if err != nil {
		return err
	}
	var ts []collector.Template
	for _, t := range all {
		if (len(o.Families) == 0 || slices.Contains(o.Families, t.Family)) && (len(o.Templates) == 0 || slices.Contains(o.Templates, t.Name)) {
			ts = append(ts, t)
		}
	}
	for _, name := range o.Templates {
		if !slices.ContainsFunc(ts, func(t collector.Template) bool { return t.Name == name }) {
			return fmt.Errorf("bench replay: no template %s of %v in %s", name, o.Families, o.Workloads)
		}
	}
	if len(ts) == 0 {
		return fmt.Errorf("bench replay: no templates of %v in %s", o.Families, o.Workloads)
	}
	if len(o.Settings) == 0 {
		return fmt.Errorf("bench replay: no proxy to replay through")
	}
	var plan []planned
	if o.Fleet != nil {
		if plan, err = fleetPlan(ts, *o.Fleet, o.N, o.Seed); err != nil {
			return err
		}
	} else {
		plan = replayPlan(ts, o)
	}
	client := &http.Client{Timeout: 10 * time.Minute}
	runs := make([][]replayRun, len(o.Settings))
	var names []string
	for _, st := range o.Settings {
		names = append(names, st.Name)
	}
	if o.Fleet != nil {
		fmt.Fprintf(w, "replay: %d statements of a fleet (%s) through %d proxies (%s) from a cold history, %d templates, class bounds %v s, seed %d\n",
			o.N, o.Fleet.withDefaults(), len(o.Settings), strings.Join(names, ", "), len(ts), o.Bounds, o.Seed)
	} else {
		fmt.Fprintf(w, "replay: %d statements through %d proxies (%s) from a cold history, %.0f%% new templates (%d available), class bounds %v s, seed %d\n",
			o.N, len(o.Settings), strings.Join(names, ", "), 100*o.New, len(ts), o.Bounds, o.Seed)
	}
	start := time.Now()
	// Each proxy's EXPLAIN counts at the half-way point, for the last
	// half's (the steady state's) EXPLAINs per statement, and after each
	// statement, for the EXPLAINs its decision started.
	half, halfAt := make([]map[string]float64, len(o.Settings)), o.N/2
	before := make([]map[string]float64, len(o.Settings))
	for j, st := range o.Settings {
		before[j], _ = explainsByReason(st.ProxyURL)
	}
	for i := 0; i < o.N; i++ {
		if i == halfAt {
			for j, st := range o.Settings {
				half[j], _ = explainsByReason(st.ProxyURL)
			}
		}
		if o.MaxDuration > 0 && time.Since(start) > o.MaxDuration {
			fmt.Fprintf(w, "stopped after %d statements: --max-duration %s reached\n", i, o.MaxDuration)
			o.N = i
			break
		}
		s := plan[i]
		it := collector.TemplateVariantOn(o.Storage, s.t, o.Scale, s.v, int64(o.Seed), 0, o.Domains)
		for k := range o.Settings {
			j := (i + k) % len(o.Settings)
			r, err := replayOne(client, o.Settings[j].ProxyURL, dialect.Trino, s.user, it)
			after, merr := explainsByReason(o.Settings[j].ProxyURL)
			if merr == nil {
				r.explains = map[string]float64{}
				for k, v := range after {
					if d := v - before[j][k]; d != 0 {
						r.explains[k] = d
					}
				}
				before[j] = after
			}
			if err != nil {
				fmt.Fprintf(w, "  %s: skipped %s v%d: %v\n", o.Settings[j].Name, s.t.Name, s.v, err)
				continue
			}
			r.idx, r.kind, r.template, r.variant, r.user = i, s.kind, s.t.Name, s.v, s.user
			runs[j] = append(runs[j], r)
			if o.Runs != nil {
				writeRun(o.Runs, o.Settings[j].Name, r)
			}
		}
	}
	// The plain model's number of each statement: the model ran on the
	// hot path of some setting (its raw prediction does not depend on the
	// setting).
	// The calibrated optimizer's number likewise, from the first setting
	// that had one (each proxy fits its own calibration on the same
	// statements).
	plain := baselines{model: map[int]float64{}, optimizer: map[int]float64{}}
	for _, rs := range runs {
		for _, r := range rs {
			if _, ok := plain.model[r.idx]; !ok && r.model > 0 {
				plain.model[r.idx] = r.model
			}
			if _, ok := plain.optimizer[r.idx]; !ok && r.optimizer > 0 {
				plain.optimizer[r.idx] = r.optimizer
			}
		}
	}
	var sums []replaySummary
	for j, st := range o.Settings {
		fmt.Fprintf(w, "\nsetting %s\n", st.Name)
		sums = append(sums, reportReplay(w, runs[j], o.N, plain, o.Bounds))
		sums[j].name = st.Name
	}
	compareReplay(w, sums)
	if o.N <= halfAt { // stopped before the half-way point
		half = nil
	}
	reportExplains(w, o.Settings, o.N, o.N-halfAt, half)
	if o.Fleet != nil {
		reportFleet(w, names, runs, o.N, o.Bounds)
	}
	return nil
}

// replayPlan draws the statements of a replay without a Fleet: a share
// o.New of templates never run before (until none is left), the rest a
// repeat of one already run, half exactly, half with new literals; user
// bench-replay, or bench-replay-(i mod o.Users).
func replayPlan(ts []collector.Template, o ReplayOptions) []planned {
	rng := rand.New(rand.NewPCG(o.Seed, 17))
	ts = append([]collector.Template(nil), ts...)
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	var seen, out []planned
	variants := map[string]int{}
	next := 0
	for i := 0; i < o.N; i++ {
		var s planned
		switch {
		case next < len(ts) && (len(seen) == 0 || rng.Float64() < o.New):
			s = planned{kind: "new", t: ts[next]}
			next++
		case rng.IntN(2) == 0:
			s = seen[rng.IntN(len(seen))]
			s.kind = "exact"
		default:
			t := seen[rng.IntN(len(seen))].t
			variants[t.Name]++
			s = planned{kind: "literals", t: t, v: variants[t.Name]}
		}
		seen = append(seen, s)
		s.user = "bench-replay"
		if o.Users > 1 {
			s.user += "-" + strconv.Itoa(i%o.Users)
		}
		out = append(out, s)
	}
	return out
}

// reportExplains prints each proxy's EXPLAINs per 1,000 statements, by
// reason, from its /metrics (prestroid_explains_by_reason_total: every
// EXPLAIN round trip, hot path and background; the skipped ones are not
// in the total), over the whole replay (n statements) and over its last
// part (the last m statements, from the counts before them, half; nil:
// none).
func reportExplains(w io.Writer, settings []ReplaySetting, n, m int, half []map[string]float64) {
	if n <= 0 {
		return
	}
	if m > 0 && half != nil {
		defer reportExplainsSince(w, settings, m, half)
	}
	reasons := []string{"hot", "learn", "drift", "skipped_known", "skipped_ceiling"}
	fmt.Fprintf(w, "\nEXPLAINs per 1,000 statements (prestroid_explains_by_reason_total; total = hot + learn + drift)\n%-24s %7s", "setting", "total")
	for _, r := range reasons {
		fmt.Fprintf(w, " %15s", r)
	}
	fmt.Fprintln(w)
	for _, st := range settings {
		by, err := explainsByReason(st.ProxyURL)
		if err != nil {
			fmt.Fprintf(w, "%-24s %v\n", st.Name, err)
			continue
		}
		per := func(v float64) float64 { return 1000 * v / float64(n) }
		fmt.Fprintf(w, "%-24s %7.0f", st.Name, per(by["hot"]+by["learn"]+by["drift"]))
		for _, r := range reasons {
			fmt.Fprintf(w, " %15.0f", per(by[r]))
		}
		fmt.Fprintln(w)
	}
}

// reportExplainsSince prints the EXPLAINs per 1,000 of the last n
// statements, from each proxy's counts before them (since).
func reportExplainsSince(w io.Writer, settings []ReplaySetting, n int, since []map[string]float64) {
	fmt.Fprintf(w, "the last %d statements\n", n)
	for j, st := range settings {
		by, err := explainsByReason(st.ProxyURL)
		if err != nil || j >= len(since) || since[j] == nil {
			continue
		}
		per := func(r ...string) float64 {
			v := 0.0
			for _, r := range r {
				v += by[r] - since[j][r]
			}
			return 1000 * v / float64(n)
		}
		fmt.Fprintf(w, "%-24s %7.0f", st.Name, per("hot", "learn", "drift"))
		for _, r := range []string{"hot", "learn", "drift", "skipped_known", "skipped_ceiling"} {
			fmt.Fprintf(w, " %15.0f", per(r))
		}
		fmt.Fprintln(w)
	}
}

// explainsByReason reads prestroid_explains_by_reason_total from the
// proxy's /metrics, by reason.
func explainsByReason(base string) (map[string]float64, error) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	by := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, `prestroid_explains_by_reason_total{reason="`)
		if !ok {
			continue
		}
		reason, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
			by[reason] = v
		}
	}
	return by, nil
}

// writeRun writes r as one JSON line (CPU in seconds, decision time in
// milliseconds).
func writeRun(w io.Writer, setting string, r replayRun) {
	b, _ := json.Marshal(map[string]any{"setting": setting, "idx": r.idx, "kind": r.kind,
		"template": r.template, "variant": r.variant, "source": r.source, "est": r.est, "model": r.model,
		"optimizer": r.optimizer, "actual": r.actual, "class": r.class,
		"decide_ms": float64(r.decide.Microseconds()) / 1000, "explained": r.explained,
		"user": r.user, "cached": r.cached, "explains": r.explains})
	w.Write(append(b, '\n'))
}

// errNotEstimated: the statement ran, but the proxy served no estimate
// for it (it failed open).
var errNotEstimated = errors.New("not estimated")

// statementHeader is the header of a statement's submission as user: the
// item's catalog, schema and session.
func statementHeader(eng dialect.Engine, user string, it collector.Item) http.Header {
	h := http.Header{}
	h.Set("X-Trino-User", user)
	h.Set("X-Trino-Catalog", it.Catalog)
	h.Set("X-Trino-Schema", it.Schema)
	for k, v := range it.Session {
		h.Add("X-Trino-Session", k+"="+v)
	}
	return dialect.For(h, eng)
}

// replayOne runs one statement to its end through the proxy, as user.
func replayOne(c *http.Client, base string, eng dialect.Engine, user string, it collector.Item) (replayRun, error) {
	var r replayRun
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(it.SQL))
	req.Header = statementHeader(eng, user, it)
	type page struct {
		NextURI string `json:"nextUri"`
		Error   *struct{ Message string }
		Stats   struct {
			State             string `json:"state"`
			CPUTimeMillis     int64  `json:"cpuTimeMillis"`
			ElapsedTimeMillis int64  `json:"elapsedTimeMillis"`
			PeakMemoryBytes   int64  `json:"peakMemoryBytes"`
		}
	}
	do := func(req *http.Request) (page, http.Header, error) {
		var p page
		resp, err := c.Do(req)
		if err != nil {
			return p, nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return p, nil, fmt.Errorf("HTTP %s", resp.Status)
		}
		return p, resp.Header, json.NewDecoder(resp.Body).Decode(&p)
	}
	p, h, err := do(req)
	if err != nil {
		return r, err
	}
	est := h.Get("X-Prestroid-Estimate")
	r.source, _, _ = strings.Cut(est, ";")
	r.est = estimateField(est, "cpu")
	r.lo, r.hi = estimateField(est, "lo"), estimateField(est, "hi")
	r.model = estimateField(est, "model")
	r.optimizer = estimateField(est, "optimizer")
	r.text = estimateField(est, "text")
	for i, name := range beyondNames {
		r.beyond[i] = servedQuantity{est: estimateField(est, name), lo: estimateField(est, name+"_lo"), hi: estimateField(est, name+"_hi")}
	}
	r.decide = serverTiming(h.Get("Server-Timing"), "prestroid")
	r.class = -1
	if c, ok := strings.CutPrefix(h.Get("X-Prestroid-Cluster"), "class"); ok {
		if n, err := strconv.Atoi(c); err == nil {
			r.class = n
		}
	}
	r.explained = serverTiming(h.Get("Server-Timing"), "explain") > 0
	r.cached = strings.Contains(est, "; cached")
	for p.NextURI != "" {
		g, _ := http.NewRequest("GET", p.NextURI, nil)
		g.Header.Set("X-Trino-User", user)
		if p, _, err = do(g); err != nil {
			return r, err
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		return r, fmt.Errorf("state %s %v", p.Stats.State, p.Error)
	}
	if r.source == "" {
		return r, fmt.Errorf("%w: %s", errNotEstimated, h.Get("X-Prestroid-Decision"))
	}
	r.actual = math.Max(float64(p.Stats.CPUTimeMillis)/1000, 0.001)
	r.beyond[0].actual = float64(p.Stats.PeakMemoryBytes)
	r.beyond[1].actual = float64(p.Stats.ElapsedTimeMillis) / 1000
	return r, nil
}

// beyondNames are the X-Prestroid-Estimate names of the targets beyond the
// CPU time, in replayRun.beyond's order.
var beyondNames = [...]string{"mem", "elapsed"}

// servedQuantity is a target beyond the CPU time as one execution saw it:
// the served median and central 80% interval (0: not served) and the
// actual value (0: not reported).
type servedQuantity struct{ est, lo, hi, actual float64 }

// scored reports whether q has both a served median and an actual value.
func (q servedQuantity) scored() bool { return q.est > 0 && q.actual > 0 }

// estimateField reads NAME=S from an X-Prestroid-Estimate value (0 when
// absent).
func estimateField(v, name string) float64 {
	for _, f := range strings.Split(v, ";") {
		if s, ok := strings.CutPrefix(strings.TrimSpace(f), name+"="); ok {
			x, _ := strconv.ParseFloat(s, 64)
			return x
		}
	}
	return 0
}

func qerr(est, actual float64) float64 {
	est = math.Max(est, 0.001)
	return math.Max(est/actual, actual/est)
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(math.Min(float64(len(s)-1), math.Floor(q*float64(len(s)))))]
}

// classOf is the class of x CPU seconds: the first whose bound is at
// least x (len(bounds): above them all).
func classOf(bounds []float64, x float64) int {
	for i, b := range bounds {
		if x <= b {
			return i
		}
	}
	return len(bounds)
}

// baselines are the plain model's and the calibrated optimizer's numbers
// of each statement (by its position in the replay).
type baselines struct{ model, optimizer map[int]float64 }

// replayGroup is one row of the report.
type replayGroup struct {
	n                              int
	decP50, decP99                 float64 // ms
	qP50, qP95, modelP50, modelP95 float64
	nOpt                           int // statements with a calibrated optimizer number
	optP50, optP95                 float64
	right, hot, fast               float64 // shares: right class, EXPLAIN on the hot path, decided in <= 2 ms
}

func summarize(runs []replayRun, keep func(i int, r replayRun) bool, plain baselines, bounds []float64) replayGroup {
	var dec, q, mq, oq []float64
	var g replayGroup
	right, hot, fast := 0, 0, 0
	for i, r := range runs {
		if !keep(i, r) {
			continue
		}
		ms := float64(r.decide) / float64(time.Millisecond)
		dec = append(dec, ms)
		q = append(q, qerr(r.est, r.actual))
		if m := plain.model[r.idx]; m > 0 {
			mq = append(mq, qerr(m, r.actual))
		}
		if o := plain.optimizer[r.idx]; o > 0 {
			oq = append(oq, qerr(o, r.actual))
		}
		if r.explained {
			hot++
		}
		if ms <= 2 {
			fast++
		}
		if r.class == classOf(bounds, r.actual) {
			right++
		}
	}
	g.n = len(q)
	if g.n == 0 {
		return g
	}
	g.decP50, g.decP99 = quantile(dec, 0.5), quantile(dec, 0.99)
	g.qP50, g.qP95 = quantile(q, 0.5), quantile(q, 0.95)
	g.modelP50, g.modelP95 = quantile(mq, 0.5), quantile(mq, 0.95)
	g.nOpt, g.optP50, g.optP95 = len(oq), quantile(oq, 0.5), quantile(oq, 0.95)
	n := float64(g.n)
	g.right, g.hot, g.fast = float64(right)/n, float64(hot)/n, float64(fast)/n
	return g
}

// replaySummary is what compareReplay sets side by side.
type replaySummary struct {
	name            string
	all, last, news replayGroup
}

func reportReplay(w io.Writer, runs []replayRun, n int, plain baselines, bounds []float64) replaySummary {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no statement completed")
		return replaySummary{}
	}
	half := n / 2 // by position in the replay, the same statements for every setting
	type group struct {
		name string
		keep func(i int, r replayRun) bool
	}
	groups := []group{{"all", func(int, replayRun) bool { return true }},
		{"last half", func(_ int, r replayRun) bool { return r.idx >= half }}}
	for _, src := range []string{"cheap", "history", "text", "model+residual", "model", "optimizer"} {
		groups = append(groups, group{src, func(_ int, r replayRun) bool { return r.source == src }})
	}
	for _, k := range []string{"new", "exact", "literals", kindDashboard, kindDashboardRepeat, kindETL, kindAdhoc} {
		groups = append(groups, group{"kind " + k, func(_ int, r replayRun) bool { return r.kind == k }})
	}
	fmt.Fprintf(w, "%-16s %5s %9s %9s %7s %7s %9s %9s %5s %7s %7s %7s %7s %7s\n", "", "n", "dec p50", "dec p99", "q p50", "q p95",
		"model q50", "model q95", "opt n", "opt q50", "opt q95", "right", "hot EXP", "<=2ms")
	var sum replaySummary
	for gi, gr := range groups {
		g := summarize(runs, gr.keep, plain, bounds)
		if g.n == 0 {
			continue
		}
		switch gi {
		case 0:
			sum.all = g
		case 1:
			sum.last = g
		}
		if gr.name == "kind new" {
			sum.news = g
		}
		fmt.Fprintf(w, "%-16s %5d %7.2fms %7.2fms %7.2f %7.2f %9.2f %9.2f %5d %7.2f %7.2f %6.0f%% %6.0f%% %6.0f%%\n", gr.name, g.n,
			g.decP50, g.decP99, g.qP50, g.qP95, g.modelP50, g.modelP95, g.nOpt, g.optP50, g.optP95, 100*g.right, 100*g.hot, 100*g.fast)
	}
	// Learning curve: median q-error per tenth of the run.
	fmt.Fprint(w, "learning curve (median q-error per tenth):")
	for d := 0; d < 10; d++ {
		lo, hi := d*len(runs)/10, (d+1)*len(runs)/10
		var q []float64
		for _, r := range runs[lo:hi] {
			q = append(q, qerr(r.est, r.actual))
		}
		if len(q) > 0 {
			fmt.Fprintf(w, " %.2f", quantile(q, 0.5))
		}
	}
	fmt.Fprintln(w)
	return sum
}

// compareReplay sets the settings side by side against the issue's
// targets: last-half median q-error <= 1.25 and p95 <= 2.5, new shapes no
// worse than the plain model, >= 80% decided in <= 2 ms, and a wrong-class
// share at most 1 point above the first setting's (always).
func compareReplay(w io.Writer, sums []replaySummary) {
	fmt.Fprintf(w, "\nside by side (targets: last half q p50 <= 1.25, p95 <= 2.5; new shapes no worse than the model; >= 80%% in <= 2 ms; wrong class <= +1 point vs %s)\n", sums[0].name)
	fmt.Fprintf(w, "%-16s %9s %9s %7s %8s %8s %8s %8s %8s %8s %14s %14s %14s\n", "setting", "dec p50", "dec p99", "<=2ms", "hot EXP",
		"wrong", "q50 all", "q95 all", "q50 last", "q95 last", "new q50/model", "new q95/model", "last opt q50/95")
	for _, s := range sums {
		a, l, nw := s.all, s.last, s.news
		fmt.Fprintf(w, "%-16s %7.2fms %7.2fms %6.0f%% %7.0f%% %7.1f%% %8.2f %8.2f %8.2f %8.2f %6.2f/%-7.2f %6.2f/%-7.2f %6.2f/%-7.2f\n", s.name,
			a.decP50, a.decP99, 100*a.fast, 100*a.hot, 100*(1-a.right), a.qP50, a.qP95, l.qP50, l.qP95,
			nw.qP50, nw.modelP50, nw.qP95, nw.modelP95, l.optP50, l.optP95)
	}
}
