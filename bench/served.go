package bench

// bench served: the estimates `prestroid serve` as shipped serves, on the
// held-out templates of the split, against the actual CPU time of the same
// executions and against the calibrated optimizer on the same statements.

import (
	"context"
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
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

// ServedUser is the Trino user the statements of bench served run as,
// through the proxy and, for the optimizer's plan, directly.
const ServedUser = "bench-served"

// The kinds of execution of bench served: the first sight of a statement
// whose template never completed before at its scale, the first sight of
// another variant of a template that did, and a statement run again.
const (
	kindNewShape    = "new shape"
	kindNewLiterals = "new literals"
	kindRepeat      = "repeat"
	// kindWarmUp is a statement of ServedOptions.Warm: run before the
	// measured passes, learned from, not scored.
	kindWarmUp = "warm-up"
)

// ServedWorkload says which statements bench served runs: the templates of
// some parts of the split, each at every scale, filled exactly as
// `prestroid collect` fills them (collector.Generate).
type ServedWorkload struct {
	// Split is the template-level split; Parts the parts whose templates
	// run ("test"); Templates, when set, keeps only these of them.
	Split     *collector.Split
	Parts     []string
	Templates []string
	// Scales are the schemas the templates are filled at, in order;
	// Storage is the catalog of the materialized copies (collect
	// --storage, e.g. iceberg: schemas tpch_sf1, tpcds_sf0_1); empty runs
	// on the tpch/tpcds connectors.
	Scales  []string
	Storage string
	// Variants per template and scale (variant 0: the file's own values;
	// a generator kind's are all drawn); Seed and SessionShare are
	// collect's --seed and --session-share.
	Variants     int
	Seed         int64
	SessionShare float64
}

// Names lists the template names of w's parts (kept by w.Templates).
func (w ServedWorkload) Names() ([]string, error) {
	if w.Split == nil {
		return nil, errors.New("bench served: no split")
	}
	var out []string
	for _, p := range w.Parts {
		ns, ok := w.Split.Part(p)
		if !ok {
			return nil, fmt.Errorf("bench served: no part %q in the split (train, validation, test)", p)
		}
		for _, n := range ns {
			if (len(w.Templates) == 0 || slices.Contains(w.Templates, n)) && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("bench served: no template of parts %v (kept: %v)", w.Parts, w.Templates)
	}
	return out, nil
}

// GenConfig is the collector's generation config of w's statements (what
// collect plans with --templates, --gen-scales and --storage; collect's
// fetchDomains reads the domains it needs), the generator kinds of w, and
// w's template names that cannot be built: neither a template file of ts
// nor a generator kind.
func (w ServedWorkload) GenConfig(ts []collector.Template) (cfg collector.GenConfig, gen, skipped []string, err error) {
	names, err := w.Names()
	if err != nil {
		return cfg, nil, nil, err
	}
	var tpc []string
	for _, n := range names {
		switch {
		case slices.ContainsFunc(ts, func(t collector.Template) bool { return t.Name == n }):
			tpc = append(tpc, n)
		case strings.HasPrefix(n, "gen/") && slices.Contains(collector.GenKinds, strings.TrimPrefix(n, "gen/")):
			gen = append(gen, n)
		default:
			skipped = append(skipped, n)
		}
	}
	cfg = collector.GenConfig{Seed: w.Seed, Variants: w.Variants, SessionShare: w.SessionShare,
		Templates: tpc, Storage: w.Storage}
	if len(tpc) > 0 { // no names would mean every template
		cfg.Scales = w.Scales
	}
	if len(gen) > 0 {
		cfg.GenScales, cfg.GenVariants = w.Scales, w.Variants
	}
	return cfg, gen, skipped, nil
}

// Items are w's statements, filled as collect fills them, and the names
// that cannot be built (GenConfig).
func (w ServedWorkload) Items(ts []collector.Template, dom *collector.Domains) ([]collector.Item, []string, error) {
	cfg, gen, skipped, err := w.GenConfig(ts)
	if err != nil {
		return nil, nil, err
	}
	var out []collector.Item
	for _, it := range collector.Generate(cfg, ts, dom) {
		// Generate makes every generator kind; keep those of the parts.
		if it.Workload.Family != "gen" || slices.Contains(gen, it.Workload.Template) {
			out = append(out, it)
		}
	}
	return out, skipped, nil
}

// ServedOptions configure Served.
type ServedOptions struct {
	// ProxyURL is the serving proxy (prestroid serve as shipped) in front
	// of the coordinator; Trino is the same coordinator (Trino or PrestoDB,
	// as Engine says), asked directly for the plans of the optimizer
	// baseline.
	ProxyURL, Trino string
	// Engine is the coordinator's engine: the statements are sent in its
	// dialect.
	Engine dialect.Engine
	// Bounds are the CPU-second bounds of the proxy's routing classes,
	// increasing; class i's cluster is named ClassName(i).
	Bounds []float64
	// Items are the statements (ServedWorkload.Items). Pass 1 runs each
	// once in a seeded shuffled order; Repeats further passes run them
	// again, each pass shuffled anew. Seed fixes the orders.
	Items   []collector.Item
	Repeats int
	Seed    uint64
	// Warm are statements of other templates (the split's training part,
	// drawn by the caller) run once each, in their order, before the first
	// pass:
	// the deployment, and the optimizer baseline's fit, learn from them as
	// from any traffic, so the passes measure what a deployment that has
	// been running serves a template it never saw, beside a new one (no
	// Warm). They are not scored (the report's WarmUp counts them); Runs
	// gets them with kind "warm-up" and pass -1.
	Warm []collector.Item
	// MaxDuration stops the run after the statement running when it has
	// passed (the report covers the executions completed). Zero: none.
	MaxDuration time.Duration
	// MinCalibration is how many completed executions the optimizer
	// baseline's fit needs before it gives a number. Zero means 10 (the
	// cascade's estimator.history.min_calibration default).
	MinCalibration int
	// Runs, when set, gets one JSON line per completed execution; Progress
	// a line per execution as it goes.
	Runs, Progress io.Writer
	// VersusURL, when set, is a second serving proxy (another bundle or
	// setting) in front of the same coordinator: every statement, the
	// warm-up's too, also runs through it, right before or after the first
	// proxy's execution (which one goes first is drawn per statement with
	// Seed), so that both meet the coordinator equally warm. Each proxy
	// learns from its own executions only. The report gains the second
	// proxy's figures (Versus) and the pair's on the same statements
	// (Paired); VersusRuns gets its executions as Runs gets the first's.
	VersusURL  string
	VersusRuns io.Writer
}

// servedRun is one execution: as the proxy served and placed it
// (replayRun: kind is one of the kinds above), its statement's Trino plan
// cost and the calibrated optimizer's number for it.
type servedRun struct {
	replayRun
	scale string
	pass  int // 0: first sight; 1, 2, ...: repeats
	stmt  int // the statement's index in ServedOptions.Items
	// cost is Σ cpuCost of the statement's plan, asked from Trino
	// directly (NaN: the EXPLAIN failed); opt the prequential calibrated
	// optimizer's CPU seconds (0: no cost, or fewer than MinCalibration
	// executions before it).
	cost, opt float64
	// first: in a paired run (ServedOptions.VersusURL), this execution
	// came before the other proxy's of the same statement.
	first bool
	// session is the session properties the statement ran with (nil:
	// Trino's defaults), so that a run's figures can be split by them
	// (python -m trainer.served --session).
	session map[string]string
}

// servedLog holds the executions in the order they completed, with the
// optimizer baseline fitted on them as they come.
type servedLog struct {
	runs []servedRun
	// cal is the least-squares fit ln CPU = a + b·ln(1+cost) over the
	// executions so far (history.Stats with no recency weight: the plain
	// fit; the cascade's own calibration weighs recent runs by
	// estimator.history.alpha).
	cal      history.Stats
	minCalib int
}

// add appends r to the scored executions after learn.
func (l *servedLog) add(r servedRun) servedRun {
	r = l.learn(r)
	l.runs = append(l.runs, r)
	return r
}

// learn gives r the optimizer's number from the fit on the executions
// before it (prequential), then teaches the fit r.
func (l *servedLog) learn(r servedRun) servedRun {
	r.opt = 0
	if !math.IsNaN(r.cost) {
		x := math.Log1p(max(r.cost, 0))
		if l.cal.Count >= uint64(l.minCalib) {
			if a, b, _, ok := l.cal.Line(); ok {
				r.opt = math.Exp(a + b*x)
			}
		}
		l.cal = l.cal.AddXY(x, math.Log(max(r.actual, 0.001)), 0, time.Time{})
	}
	return r
}

// Served runs the statements through the serving proxy, one at a time,
// and reports (to w, and returned for --out) how good the estimates it
// served were: per scale and overall, by kind of execution and by serving
// source, against the calibrated optimizer and the plain model on the
// same executions. ctx stops it early (the report covers what ran).
func Served(ctx context.Context, w io.Writer, o ServedOptions) (*ServedReport, error) {
	if len(o.Items) == 0 {
		return nil, errors.New("bench served: no statements")
	}
	if o.MinCalibration <= 0 {
		o.MinCalibration = 10
	}
	client := &http.Client{Timeout: 10 * time.Minute}
	explain := &plan.ExplainClient{HTTP: &http.Client{Timeout: 10 * time.Minute}}
	rng := rand.New(rand.NewPCG(o.Seed, 23))
	costs := make([]float64, len(o.Items))
	asked := make([]bool, len(o.Items))
	completed := map[string]bool{} // template@scale with an execution completed
	newReport := func() *ServedReport {
		return &ServedReport{Statements: len(o.Items), Bounds: o.Bounds, Repeats: o.Repeats, Skipped: map[string]int{}}
	}
	rep := newReport()
	arms := []*servedArm{{name: "a", url: o.ProxyURL, log: &servedLog{minCalib: o.MinCalibration}, rep: rep, runs: o.Runs}}
	if o.VersusURL != "" {
		arms = append(arms, &servedArm{name: "b", url: o.VersusURL, log: &servedLog{minCalib: o.MinCalibration}, rep: newReport(), runs: o.VersusRuns})
	}
	// which proxy runs a statement first: its own stream, so that the
	// passes' orders stay those of a run with one proxy
	coin := rand.New(rand.NewPCG(o.Seed, 29))
	var scales []string
	for _, it := range o.Items {
		if !slices.Contains(scales, it.Workload.Scale) {
			scales = append(scales, it.Workload.Scale)
		}
	}
	fmt.Fprintf(w, "served: %d statements (%d scales) x %d passes through %s as %s, class bounds %v s, seed %d\n",
		len(o.Items), len(scales), 1+o.Repeats, o.ProxyURL, ServedUser, o.Bounds, o.Seed)
	if o.VersusURL != "" {
		fmt.Fprintf(w, "paired: each statement also through %s (b), before or after a's execution as drawn\n", o.VersusURL)
	}
	if len(o.Warm) > 0 {
		fmt.Fprintf(w, "after a warm-up of %d statements of other templates (learned from, not scored)\n", len(o.Warm))
	}
	start := time.Now()
	total := (len(o.Warm) + len(o.Items)*(1+o.Repeats)) * len(arms)
	done := 0
	// runOn sends one statement through one proxy and records its
	// execution (cost is asked only for a completed one); false when it
	// did not complete or was not estimated (counted in its Skipped).
	runOn := func(a *servedArm, first bool, it collector.Item, kind string, pass, stmt int, cost func() float64) bool {
		done++
		r, err := replayOne(client, a.url, o.Engine, ServedUser, it)
		name := fmt.Sprintf("%s v%d %s", it.Workload.Template, it.Workload.Variant, it.Workload.Scale)
		if err != nil {
			reason := "failed"
			if errors.Is(err, errNotEstimated) {
				reason = "not estimated"
			}
			if kind == kindWarmUp {
				reason += " (warm-up)"
			}
			a.rep.Skipped[reason]++
			fmt.Fprintf(w, "  skipped %s (%s%s): %v\n", name, kind, a.label(len(arms)), err)
			return false
		}
		r.kind, r.template, r.variant = kind, it.Workload.Template, it.Workload.Variant
		sr := servedRun{replayRun: r, scale: it.Workload.Scale, pass: pass, stmt: stmt, cost: cost(), first: first && len(arms) > 1, session: it.Session}
		if kind == kindWarmUp {
			sr = a.log.learn(sr)
			a.rep.WarmUp++
		} else {
			sr = a.log.add(sr)
		}
		if a.runs != nil {
			writeServedRun(a.runs, sr, len(arms) > 1)
		}
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "served %d/%d %-28s %-12s%s %-14s est %8.3fs actual %8.3fs q %6.2f\n", done, total, name, kind,
				a.label(len(arms)), sr.source, sr.est, sr.actual, qerr(sr.est, sr.actual))
		}
		return true
	}
	// run sends the statement through every proxy, in the order drawn
	// (its plan cost asked once for both); whether the first proxy's (a's)
	// execution completed.
	run := func(it collector.Item, kind string, pass, stmt int, cost func() float64) bool {
		order := arms
		if len(arms) > 1 && coin.IntN(2) == 1 {
			order = []*servedArm{arms[1], arms[0]}
		}
		var stmtCost float64
		have := false
		once := func() float64 {
			if !have {
				stmtCost, have = cost(), true
			}
			return stmtCost
		}
		ok := false
		for j, a := range order {
			if c := runOn(a, j == 0, it, kind, pass, stmt, once); a == arms[0] {
				ok = c
			}
		}
		return ok
	}
	// ask gives the statement's plan cost, asked from the coordinator.
	ask := func(it collector.Item) float64 {
		c := planCost(ctx, explain, o.Trino, o.Engine, it)
		if math.IsNaN(c) {
			rep.ExplainFailed++
		}
		return c
	}
	// The warm-up in its given order, before the passes' shuffles (which
	// stay those of a run without one).
	for j, it := range o.Warm {
		if ctx.Err() != nil {
			break
		}
		run(it, kindWarmUp, -1, j, func() float64 { return ask(it) })
	}
passes:
	for pass := 0; pass <= o.Repeats; pass++ {
		for _, i := range rng.Perm(len(o.Items)) {
			if err := ctx.Err(); err != nil {
				rep.Stopped = "interrupted: " + err.Error()
				break passes
			}
			if o.MaxDuration > 0 && time.Since(start) > o.MaxDuration {
				rep.Stopped = "--max-duration " + o.MaxDuration.String() + " reached"
				break passes
			}
			it := o.Items[i]
			shape := it.Workload.Template + "@" + it.Workload.Scale
			kind := kindRepeat
			if pass == 0 {
				kind = kindNewShape
				if completed[shape] {
					kind = kindNewLiterals
				}
			}
			if run(it, kind, pass, i, func() float64 {
				if !asked[i] {
					asked[i], costs[i] = true, ask(it)
				}
				return costs[i]
			}) {
				completed[shape] = true
			}
		}
	}
	for _, a := range arms {
		a.rep.Elapsed = time.Since(start).Round(time.Second).String()
		a.rep.Stopped = rep.Stopped
		a.rep.fill(a.log.runs, scales)
	}
	if len(arms) > 1 {
		rep.Versus = arms[1].rep
		rep.Paired = pairedRows(arms[0].log.runs, arms[1].log.runs)
	}
	rep.Text(w)
	return rep, nil
}

// servedArm is one serving proxy of a run: its executions, its report.
type servedArm struct {
	name, url string
	log       *servedLog
	rep       *ServedReport
	runs      io.Writer
}

// label names the arm in a paired run's lines ("" with one proxy).
func (a *servedArm) label(arms int) string {
	if arms < 2 {
		return ""
	}
	return " [" + a.name + "]"
}

// planCost asks the coordinator directly for the statement's distributed
// plan and gives the optimizer's cost of it that the cascade's optimizer
// stage maps to seconds (Trino: Σ cpuCost; PrestoDB, which gives no cost:
// its row counts, plan.OptimizerCost); NaN when that fails.
func planCost(ctx context.Context, c *plan.ExplainClient, server string, eng dialect.Engine, it collector.Item) float64 {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	res, err := c.ExplainOn(ctx, server, eng, it.SQL, statementHeader(dialect.Trino, ServedUser, it))
	if err != nil {
		return math.NaN()
	}
	cost, err := plan.OptimizerCost(eng, res.PlanJSON)
	if err != nil {
		return math.NaN()
	}
	return cost
}

// writeServedRun writes r as one JSON line (CPU in seconds, decision time
// in milliseconds; cost null when the EXPLAIN failed, opt 0 while the
// optimizer baseline had no number; session only when the statement set
// any); in a paired run also whether it ran before the other proxy's
// execution (first).
func writeServedRun(w io.Writer, r servedRun, paired bool) {
	m := map[string]any{"pass": r.pass, "stmt": r.stmt, "kind": r.kind, "template": r.template,
		"variant": r.variant, "scale": r.scale, "source": r.source, "est": r.est, "lo": r.lo, "hi": r.hi,
		"model": r.model, "optimizer": r.optimizer, "text": r.text, "cost": num(r.cost), "opt": r.opt, "actual": r.actual,
		"class": r.class, "decide_ms": float64(r.decide.Microseconds()) / 1000, "explained": r.explained}
	for i, name := range beyondNames { // mem: bytes; elapsed: seconds
		q := r.beyond[i]
		m[name], m[name+"_lo"], m[name+"_hi"], m["actual_"+name] = q.est, q.lo, q.hi, q.actual
	}
	if paired {
		m["first"] = r.first
	}
	if len(r.session) > 0 {
		m["session"] = r.session
	}
	b, _ := json.Marshal(m)
	w.Write(append(b, '\n'))
}

// num is a figure of the report: JSON null when it is not a number (a
// quantile or share of nothing).
type num float64

func (x num) MarshalJSON() ([]byte, error) {
	if f := float64(x); math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(x), 'g', 6, 64), nil
}

// ServedReport is every figure of bench served (--out writes it as JSON).
type ServedReport struct {
	Statements    int            `json:"statements"`        // distinct statements
	Repeats       int            `json:"repeats"`           // passes after the first
	Executions    int            `json:"executions"`        // completed
	Skipped       map[string]int `json:"skipped"`           // by reason: failed, not estimated (the proxy failed open)
	ExplainFailed int            `json:"explain_failed"`    // statements whose direct EXPLAIN failed (no optimizer number)
	WarmUp        int            `json:"warm_up,omitempty"` // warm-up executions completed (ServedOptions.Warm; not scored)
	Stopped       string         `json:"stopped,omitempty"`
	Elapsed       string         `json:"elapsed"`
	Bounds        []float64      `json:"class_bounds"`
	// Settings are the command's (flags, the proxy's configuration).
	Settings map[string]any `json:"settings,omitempty"`
	// Scales has a table per scale, in order; Overall all executions.
	Scales  []ServedTable `json:"scales"`
	Overall ServedTable   `json:"overall"`
	// Learning is how fast the deployment learns: the first-sight
	// executions (all scales) grouped by how many executions had finished
	// before them (learningBins), for a cluster the model has not seen.
	Learning []ServedRow `json:"learning"`
	// Beyond is the peak memory and the elapsed time served beside the
	// CPU time, against what Trino reported (all scales).
	Beyond []BeyondRow `json:"beyond,omitempty"`
	// Versus is the second proxy's report in a paired run
	// (ServedOptions.VersusURL), Paired the two on the same statements.
	Versus *ServedReport `json:"versus,omitempty"`
	Paired []PairedRow   `json:"paired,omitempty"`
}

// PairedRow compares the two proxies of a paired run on the executions of
// one group that completed through both (the same statement in the same
// pass). Each proxy's estimate is scored against its own execution's CPU
// (A, B) and against the geometric mean of the two executions' (AMean,
// BMean: the same number for both, which takes the two executions' noise
// and the coordinator's warmth out of the comparison); ACloser is the share
// where a's estimate is nearer that mean. FirstOverSecond is the median
// ratio of the CPU of the execution that ran first to the other's: what
// running first costs (above 1: the first meets a colder coordinator).
type PairedRow struct {
	Group           string `json:"group"`
	N               int    `json:"n"`
	AQ50            num    `json:"a_q50"`
	AQ90            num    `json:"a_q90"`
	BQ50            num    `json:"b_q50"`
	BQ90            num    `json:"b_q90"`
	AMeanQ50        num    `json:"a_mean_q50"`
	AMeanQ90        num    `json:"a_mean_q90"`
	BMeanQ50        num    `json:"b_mean_q50"`
	BMeanQ90        num    `json:"b_mean_q90"`
	ACloser         num    `json:"a_closer"`
	FirstOverSecond num    `json:"first_over_second"`
}

// pairedRows groups the executions a and b share (pass and statement) as
// the tables do, the CPU bound on the pair's geometric mean.
func pairedRows(a, b []servedRun) []PairedRow {
	type key struct{ pass, stmt int }
	bs := map[key]servedRun{}
	for _, r := range b {
		bs[key{r.pass, r.stmt}] = r
	}
	type both struct{ a, b servedRun }
	var pairs []both
	for _, r := range a {
		if o, ok := bs[key{r.pass, r.stmt}]; ok {
			pairs = append(pairs, both{r, o})
		}
	}
	mean := func(p both) float64 { return math.Sqrt(max(p.a.actual, 0.001) * max(p.b.actual, 0.001)) }
	groups := []struct {
		name string
		keep func(both) bool
	}{
		{"first sight", func(p both) bool { return p.a.kind != kindRepeat }},
		{"first sight, cpu>=1s", func(p both) bool { return p.a.kind != kindRepeat && mean(p) >= 1 }},
		{"repeat", func(p both) bool { return p.a.kind == kindRepeat }},
		{"repeat, cpu>=1s", func(p both) bool { return p.a.kind == kindRepeat && mean(p) >= 1 }},
	}
	var out []PairedRow
	for _, g := range groups {
		var qa, qb, ma, mb, ratio []float64
		closer := 0
		for _, p := range pairs {
			if !g.keep(p) {
				continue
			}
			m := mean(p)
			qa, qb = append(qa, qerr(p.a.est, p.a.actual)), append(qb, qerr(p.b.est, p.b.actual))
			ea, eb := qerr(p.a.est, m), qerr(p.b.est, m)
			ma, mb = append(ma, ea), append(mb, eb)
			if ea < eb {
				closer++
			}
			first, second := p.a, p.b
			if p.b.first {
				first, second = p.b, p.a
			}
			ratio = append(ratio, max(first.actual, 0.001)/max(second.actual, 0.001))
		}
		out = append(out, PairedRow{Group: g.name, N: len(qa),
			AQ50: num(quantile(qa, 0.5)), AQ90: num(quantile(qa, 0.9)), BQ50: num(quantile(qb, 0.5)), BQ90: num(quantile(qb, 0.9)),
			AMeanQ50: num(quantile(ma, 0.5)), AMeanQ90: num(quantile(ma, 0.9)), BMeanQ50: num(quantile(mb, 0.5)), BMeanQ90: num(quantile(mb, 0.9)),
			ACloser: num(float64(closer) / float64(len(qa))), FirstOverSecond: num(quantile(ratio, 0.5))})
	}
	return out
}

// learningBins are the lower bounds of Learning's groups: first-sight
// executions after 0–4, 5–9, 10–19, … finished executions.
var learningBins = []int{0, 5, 10, 20, 40, 80, 160}

// ServedTable is the report of one scale (or all).
type ServedTable struct {
	Scale         string      `json:"scale"` // "all" for the overall table
	Executions    int         `json:"executions"`
	DecisionP50MS num         `json:"decision_p50_ms"`
	Rows          []ServedRow `json:"rows"`
}

// ServedRow is one group of executions: by actual CPU and kind, or by the
// source that served the estimate.
type ServedRow struct {
	Group string `json:"group"`
	N     int    `json:"n"`
	// The served estimate's q-error quantiles; Coverage the share of
	// actual CPU inside the served central 80% interval [lo, hi]; Wrong
	// the share that went to another class than its actual CPU's;
	// TooSmall the share that went to a class whose bound is below its
	// actual CPU.
	Q50      num `json:"q50"`
	Q90      num `json:"q90"`
	Q95      num `json:"q95"`
	Coverage num `json:"coverage"`
	Wrong    num `json:"wrong_class"`
	TooSmall num `json:"too_small_class"`
	// Optimizer: the executions with a calibrated optimizer number, the
	// served and the optimizer's q-errors on them; Model likewise with the
	// plain model's number (the header's model=).
	Optimizer Baseline `json:"optimizer"`
	Model     Baseline `json:"model"`
}

// Baseline sets a baseline's q-error beside the served one's on the
// executions where the baseline has a number.
type Baseline struct {
	N         int `json:"n"`
	ServedQ50 num `json:"served_q50"`
	ServedQ90 num `json:"served_q90"`
	Q50       num `json:"q50"`
	Q90       num `json:"q90"`
}

// fill computes the tables from the executions in order.
func (rep *ServedReport) fill(runs []servedRun, scales []string) {
	rep.Executions = len(runs)
	rep.Scales = nil
	for _, sc := range scales {
		var rs []servedRun
		for _, r := range runs {
			if r.scale == sc {
				rs = append(rs, r)
			}
		}
		rep.Scales = append(rep.Scales, servedTable(sc, rs, rep.Bounds))
	}
	rep.Overall = servedTable("all", runs, rep.Bounds)
	rep.Learning = learningRows(runs, rep.Bounds)
	rep.Beyond = beyondRows(runs)
}

// BeyondRow is one group of executions for a target beyond the CPU time
// (peak memory, elapsed time): those served a median of it whose query
// reported it, the median's q-error quantiles and the share inside the
// served 80% interval.
type BeyondRow struct {
	Target   string `json:"target"` // mem or elapsed
	Group    string `json:"group"`
	N        int    `json:"n"`
	Q50      num    `json:"q50"`
	Q90      num    `json:"q90"`
	Coverage num    `json:"coverage"`
}

// beyondGroups are BeyondRow's groups, in order: the kinds, then the
// sources that served the estimate.
var beyondGroups = func() []struct {
	name string
	keep func(servedRun) bool
} {
	gs := []struct {
		name string
		keep func(servedRun) bool
	}{
		{"all", func(servedRun) bool { return true }},
		{"first sight", func(r servedRun) bool { return r.kind != kindRepeat }},
		{kindRepeat, func(r servedRun) bool { return r.kind == kindRepeat }},
	}
	for _, src := range []string{"history", "text", "model", "model+residual", "optimizer"} {
		gs = append(gs, struct {
			name string
			keep func(servedRun) bool
		}{"source " + src, func(r servedRun) bool { return r.source == src }})
	}
	return gs
}()

// beyondRows scores the targets beyond the CPU time over runs (groups
// with no scored execution left out).
func beyondRows(runs []servedRun) []BeyondRow {
	var out []BeyondRow
	for i, name := range beyondNames {
		for _, g := range beyondGroups {
			var q []float64
			cover := 0
			for _, r := range runs {
				b := r.beyond[i]
				if !g.keep(r) || !b.scored() {
					continue
				}
				q = append(q, max(b.est/b.actual, b.actual/b.est))
				if b.lo <= b.actual && b.actual <= b.hi {
					cover++
				}
			}
			if len(q) == 0 {
				continue
			}
			out = append(out, BeyondRow{Target: name, Group: g.name, N: len(q), Q50: num(quantile(q, 0.5)), Q90: num(quantile(q, 0.9)),
				Coverage: num(float64(cover) / float64(len(q)))})
		}
	}
	return out
}

// learningRows groups the first-sight executions by how many executions
// (of any kind) had finished before each: runs are in execution order.
func learningRows(runs []servedRun, bounds []float64) []ServedRow {
	var out []ServedRow
	for i, lo := range learningBins {
		hi := len(runs)
		if i+1 < len(learningBins) {
			hi = min(hi, learningBins[i+1])
		}
		var rs []servedRun
		for j := lo; j < hi; j++ {
			if runs[j].kind != kindRepeat {
				rs = append(rs, runs[j])
			}
		}
		if len(rs) == 0 {
			continue
		}
		row := servedRow(rs, bounds)
		row.Group = fmt.Sprintf("first sight after %d-%d", lo, hi-1)
		out = append(out, row)
	}
	return out
}

// servedGroups are the rows of a table, in order.
var servedGroups = func() []struct {
	name string
	keep func(servedRun) bool
} {
	type group = struct {
		name string
		keep func(servedRun) bool
	}
	var gs []group
	for _, big := range []bool{false, true} {
		prefix := "all"
		if big {
			prefix = "cpu>=1s"
		}
		for _, k := range []string{kindNewShape, kindNewLiterals, "first sight", kindRepeat} {
			gs = append(gs, group{prefix + ", " + k, func(r servedRun) bool {
				if big && r.actual < 1 {
					return false
				}
				if k == "first sight" {
					return r.kind != kindRepeat
				}
				return r.kind == k
			}})
		}
	}
	for _, src := range []string{"cheap", "history", "text", "model", "model+residual", "optimizer"} {
		gs = append(gs, group{"source " + src, func(r servedRun) bool { return r.source == src }})
	}
	return gs
}()

func servedTable(scale string, runs []servedRun, bounds []float64) ServedTable {
	t := ServedTable{Scale: scale, Executions: len(runs)}
	var dec []float64
	for _, r := range runs {
		dec = append(dec, float64(r.decide)/float64(time.Millisecond))
	}
	t.DecisionP50MS = num(quantile(dec, 0.5))
	for _, g := range servedGroups {
		var rs []servedRun
		for _, r := range runs {
			if g.keep(r) {
				rs = append(rs, r)
			}
		}
		row := servedRow(rs, bounds)
		row.Group = g.name
		t.Rows = append(t.Rows, row)
	}
	return t
}

// servedRow aggregates the executions of one group.
func servedRow(runs []servedRun, bounds []float64) ServedRow {
	var q, optServed, opt, modelServed, model []float64
	cover, wrong, small := 0, 0, 0
	for _, r := range runs {
		e := qerr(r.est, r.actual)
		q = append(q, e)
		if r.lo <= r.actual && r.actual <= r.hi {
			cover++
		}
		c := classOf(bounds, r.actual)
		if r.class != c {
			wrong++
		}
		if r.class >= 0 && r.class < c {
			small++
		}
		if r.opt > 0 {
			optServed, opt = append(optServed, e), append(opt, qerr(r.opt, r.actual))
		}
		if r.model > 0 {
			modelServed, model = append(modelServed, e), append(model, qerr(r.model, r.actual))
		}
	}
	n := float64(len(runs))
	share := func(k int) num { return num(float64(k) / n) } // NaN for no runs
	base := func(served, own []float64) Baseline {
		return Baseline{N: len(own), ServedQ50: num(quantile(served, 0.5)), ServedQ90: num(quantile(served, 0.9)),
			Q50: num(quantile(own, 0.5)), Q90: num(quantile(own, 0.9))}
	}
	return ServedRow{N: len(runs), Q50: num(quantile(q, 0.5)), Q90: num(quantile(q, 0.9)), Q95: num(quantile(q, 0.95)),
		Coverage: share(cover), Wrong: share(wrong), TooSmall: share(small),
		Optimizer: base(optServed, opt), Model: base(modelServed, model)}
}

// Text writes the report's tables: one per scale, then the overall one;
// in a paired run the first proxy's (a), the second's (b) and the pair's.
func (rep *ServedReport) Text(w io.Writer) {
	if rep.Versus == nil {
		rep.text(w)
		return
	}
	fmt.Fprintln(w, "\n=== a")
	rep.text(w)
	fmt.Fprintln(w, "\n=== b")
	rep.Versus.text(w)
	fmt.Fprintln(w, "\n=== a and b on the same statements: q-error against each one's own CPU, and against the pair's geometric mean CPU (mean);")
	fmt.Fprintln(w, "a closer: share where a's estimate is nearer the mean; first/second: median CPU ratio of the execution that ran first to the other's")
	fmt.Fprintf(w, "%-22s %5s %13s %13s %13s %13s %9s %13s\n", "group", "n", "p50 a/b", "p90 a/b", "mean p50 a/b", "mean p90 a/b", "a closer", "first/second")
	for _, r := range rep.Paired {
		if r.N == 0 {
			continue
		}
		fmt.Fprintf(w, "%-22s %5d %13s %13s %13s %13s %9s %13s\n", r.Group, r.N, pair(r.AQ50, r.BQ50), pair(r.AQ90, r.BQ90),
			pair(r.AMeanQ50, r.BMeanQ50), pair(r.AMeanQ90, r.BMeanQ90), pc(r.ACloser), f2(r.FirstOverSecond))
	}
}

func (rep *ServedReport) text(w io.Writer) {
	fmt.Fprintf(w, "\n%d executions of %d statements in %s", rep.Executions, rep.Statements, rep.Elapsed)
	if rep.WarmUp > 0 {
		fmt.Fprintf(w, " after %d warm-up executions", rep.WarmUp)
	}
	if len(rep.Skipped) > 0 {
		fmt.Fprintf(w, "; skipped %v", rep.Skipped)
	}
	if rep.ExplainFailed > 0 {
		fmt.Fprintf(w, "; %d statements without a plan cost", rep.ExplainFailed)
	}
	if rep.Stopped != "" {
		fmt.Fprintf(w, "; stopped early: %s", rep.Stopped)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "q: q-error of the served estimate; cover: actual inside the served 80% interval; wrong/small: went to another class / a class below its actual CPU;")
	fmt.Fprintln(w, "opt: the calibrated optimizer (prequential fit), model: the plain model, each with the served q-error on the same executions (srv/base)")
	for _, t := range append(slices.Clone(rep.Scales), rep.Overall) {
		title := "scale " + t.Scale
		if t.Scale == "all" {
			title = "all scales"
		}
		fmt.Fprintf(w, "\n%s: %d executions, decision p50 %s ms\n", title, t.Executions, f2(t.DecisionP50MS))
		servedRows(w, t.Rows)
	}
	if len(rep.Learning) > 0 {
		fmt.Fprintln(w, "\nlearning: first-sight executions by how many executions had finished before them")
		servedRows(w, rep.Learning)
	}
	if len(rep.Beyond) > 0 {
		fmt.Fprintln(w, "\npeak memory and elapsed time (all scales): the served median's q-error and the share inside its 80% interval, against Trino's")
		fmt.Fprintf(w, "%-8s %-22s %5s %6s %6s %6s\n", "target", "group", "n", "q p50", "q p90", "cover")
		for _, r := range rep.Beyond {
			fmt.Fprintf(w, "%-8s %-22s %5d %6s %6s %6s\n", r.Target, r.Group, r.N, f2(r.Q50), f2(r.Q90), pc(r.Coverage))
		}
	}
}

// servedRows writes a table's header and its non-empty rows.
func servedRows(w io.Writer, rows []ServedRow) {
	fmt.Fprintf(w, "%-26s %5s %6s %6s %6s %6s %6s %6s | %5s %13s %13s | %5s %13s %13s\n", "group", "n", "q p50", "q p90", "q p95",
		"cover", "wrong", "small", "opt n", "p50 srv/opt", "p90 srv/opt", "mdl n", "p50 srv/mdl", "p90 srv/mdl")
	for _, r := range rows {
		if r.N == 0 {
			continue
		}
		fmt.Fprintf(w, "%-26s %5d %6s %6s %6s %6s %6s %6s | %5d %13s %13s | %5d %13s %13s\n", r.Group, r.N, f2(r.Q50), f2(r.Q90), f2(r.Q95),
			pc(r.Coverage), pc(r.Wrong), pc(r.TooSmall),
			r.Optimizer.N, pair(r.Optimizer.ServedQ50, r.Optimizer.Q50), pair(r.Optimizer.ServedQ90, r.Optimizer.Q90),
			r.Model.N, pair(r.Model.ServedQ50, r.Model.Q50), pair(r.Model.ServedQ90, r.Model.Q90))
	}
}

func f2(x num) string {
	if math.IsNaN(float64(x)) {
		return "-"
	}
	return strconv.FormatFloat(float64(x), 'f', 2, 64)
}

func pc(x num) string {
	if math.IsNaN(float64(x)) {
		return "-"
	}
	return strconv.FormatFloat(100*float64(x), 'f', 0, 64) + "%"
}

func pair(a, b num) string {
	if math.IsNaN(float64(b)) {
		return "-"
	}
	return f2(a) + "/" + f2(b)
}
