package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
)

// run is a hand-made execution: served est in [lo, hi] to class, actual
// CPU seconds.
func run(kind, source string, est, lo, hi, actual float64, class int) servedRun {
	return servedRun{replayRun: replayRun{kind: kind, source: source, est: est, lo: lo, hi: hi, actual: actual,
		class: class, decide: time.Millisecond}, scale: "tiny", cost: math.NaN()}
}

func rowOf(t *testing.T, tb ServedTable, group string) ServedRow {
	t.Helper()
	for _, r := range tb.Rows {
		if r.Group == group {
			return r
		}
	}
	t.Fatalf("no row %q", group)
	return ServedRow{}
}

func near(a num, b float64) bool { return math.Abs(float64(a)-b) < 1e-9 }

func TestServedRowsCountCoverageWrongAndTooSmallClasses(t *testing.T) {
	bounds := []float64{2, 20} // classes: <= 2 s, <= 20 s, larger
	log := &servedLog{minCalib: 10}
	for _, r := range []servedRun{
		run(kindNewShape, "model", 1, 0.5, 2, 1, 0),       // inside, right class
		run(kindNewShape, "model", 1, 0.5, 2, 5, 0),       // outside, class 0 for 5 s: wrong and too small
		run(kindNewLiterals, "text", 30, 10, 60, 0.5, 2),  // outside, class 2 for 0.5 s: wrong, not too small
		run(kindRepeat, "history", 10, 5, 15, 10, 1),      // inside, right class
		run(kindRepeat, "history", 40, 30, 50, 25, 1),     // outside, class 1 for 25 s: too small
		run(kindRepeat, "history", 0.01, 0.005, 1, 1, -1), // inside; a cluster of no class: wrong, not too small
	} {
		log.add(r)
	}
	tb := servedTable("tiny", log.runs, bounds)

	all := rowOf(t, tb, "all, first sight")
	if all.N != 3 || !near(all.Coverage, 1.0/3) || !near(all.Wrong, 2.0/3) || !near(all.TooSmall, 1.0/3) {
		t.Errorf("first sight: n %d, coverage %v, wrong %v, too small %v; want 3, 1/3, 2/3, 1/3", all.N, all.Coverage, all.Wrong, all.TooSmall)
	}
	if r := rowOf(t, tb, "all, new shape"); r.N != 2 || !near(r.Q50, 5) || !near(r.Coverage, 0.5) {
		t.Errorf("new shape: n %d, q50 %v, coverage %v; want 2, 5 (the upper median of q 1 and 5), 0.5", r.N, r.Q50, r.Coverage)
	}
	rep := rowOf(t, tb, "all, repeat")
	if rep.N != 3 || !near(rep.Coverage, 2.0/3) || !near(rep.Wrong, 2.0/3) || !near(rep.TooSmall, 1.0/3) {
		t.Errorf("repeat: n %d, coverage %v, wrong %v, too small %v; want 3, 2/3, 2/3, 1/3", rep.N, rep.Coverage, rep.Wrong, rep.TooSmall)
	}
	big := rowOf(t, tb, "cpu>=1s, repeat")
	if big.N != 3 {
		t.Errorf("cpu>=1s repeat: n %d, want 3 (10 s, 25 s, 1 s)", big.N)
	}
	if r := rowOf(t, tb, "cpu>=1s, first sight"); r.N != 2 || !near(r.TooSmall, 0.5) {
		t.Errorf("cpu>=1s first sight: n %d, too small %v; want 2, 0.5", r.N, r.TooSmall)
	}
	if r := rowOf(t, tb, "source history"); r.N != 3 {
		t.Errorf("source history: n %d, want 3", r.N)
	}
	if r := rowOf(t, tb, "source optimizer"); r.N != 0 || !math.IsNaN(float64(r.Coverage)) {
		t.Errorf("source optimizer: n %d, coverage %v; want 0, NaN", r.N, r.Coverage)
	}
	if !near(tb.DecisionP50MS, 1) {
		t.Errorf("decision p50 %v ms, want 1", tb.DecisionP50MS)
	}
}

func TestServedOptimizerBaselineIsFittedOnlyOnEarlierExecutions(t *testing.T) {
	const a, b = 1.0, 0.5 // ln CPU = a + b·ln(1+cost)
	line := func(cost float64) float64 { return math.Exp(a + b*math.Log1p(cost)) }
	log := &servedLog{minCalib: 10}
	for i := range 10 {
		cost := math.Pow(10, float64(i))
		r := log.add(servedRun{replayRun: replayRun{kind: kindNewShape, est: 1, actual: line(cost)}, cost: cost})
		if r.opt != 0 {
			t.Fatalf("execution %d has an optimizer number %v with %d before it (want none below 10)", i, r.opt, i)
		}
	}
	// No plan cost: no number, and nothing learned.
	if r := log.add(servedRun{replayRun: replayRun{est: 1, actual: 1000}, cost: math.NaN()}); r.opt != 0 {
		t.Errorf("an execution without a plan cost got optimizer number %v", r.opt)
	}
	// The 11th costed one: the line through the 10 before it, whatever its own actual.
	r := log.add(servedRun{replayRun: replayRun{kind: kindRepeat, est: 2, actual: 100 * line(5)}, cost: 5})
	if math.Abs(r.opt-line(5)) > 1e-6*line(5) {
		t.Errorf("11th execution: optimizer %v, want %v (the fit before it, not pulled by its own actual)", r.opt, line(5))
	}
	// The 12th sees the 11th's miss: its number moves off the line.
	r = log.add(servedRun{replayRun: replayRun{kind: kindRepeat, est: 2, actual: line(5)}, cost: 5})
	if r.opt <= line(5)*1.01 {
		t.Errorf("12th execution: optimizer %v, want above %v after the 11th ran 100x over", r.opt, line(5))
	}
	row := servedRow(log.runs, []float64{2, 20})
	if row.Optimizer.N != 2 || row.N != 13 {
		t.Errorf("optimizer baseline on %d of %d executions, want 2 of 13", row.Optimizer.N, row.N)
	}
	if !near(row.Optimizer.ServedQ50, 100*line(5)/2) {
		t.Errorf("served q50 on the optimizer's executions %v, want %v (the upper of the two)", row.Optimizer.ServedQ50, 100*line(5)/2)
	}
}

// A warm-up execution teaches the optimizer baseline's fit as any other
// does but is not one of the scored executions.
func TestServedWarmUpIsLearnedNotScored(t *testing.T) {
	line := func(cost float64) float64 { return math.Exp(1 + 0.5*math.Log1p(cost)) }
	log := &servedLog{minCalib: 10}
	for i := range 10 {
		cost := math.Pow(10, float64(i))
		log.learn(servedRun{replayRun: replayRun{kind: kindWarmUp, est: 1, actual: line(cost)}, pass: -1, cost: cost})
	}
	if len(log.runs) != 0 {
		t.Fatalf("%d warm-up executions scored, want none", len(log.runs))
	}
	r := log.add(servedRun{replayRun: replayRun{kind: kindNewShape, est: 1, actual: 100}, cost: 5})
	if math.Abs(r.opt-line(5)) > 1e-6*line(5) {
		t.Errorf("first scored execution: optimizer %v, want %v (the fit on the warm-up)", r.opt, line(5))
	}
	rep := &ServedReport{Bounds: []float64{2}, Skipped: map[string]int{}}
	rep.fill(log.runs, []string{"tiny"})
	if rep.Executions != 1 || rowOf(t, rep.Overall, "all, first sight").N != 1 {
		t.Errorf("report: %d executions, want only the one scored", rep.Executions)
	}
}

func TestServedReportJSONWritesNullForFiguresOfNothing(t *testing.T) {
	rep := &ServedReport{Bounds: []float64{2}, Skipped: map[string]int{}}
	rep.fill([]servedRun{run(kindNewShape, "model", 1, 0.5, 2, 1, 0)}, []string{"tiny"})
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"group":"all, repeat","n":0,"q50":null`) {
		t.Errorf("an empty group's figures are not null: %s", b)
	}
	var buf bytes.Buffer
	rep.Text(&buf)
	if !strings.Contains(buf.String(), "scale tiny: 1 executions") || strings.Contains(buf.String(), "all, repeat") {
		t.Errorf("text report: want the tiny table without empty rows:\n%s", buf.String())
	}
}

func TestServedWorkloadFillsThePartsTemplatesAsCollectDoes(t *testing.T) {
	dom, err := collector.LoadDomains(filepath.Join("..", "data", "domains.json"))
	if err != nil {
		t.Fatal(err)
	}
	q12 := collector.Template{Name: "tpch/q12", Family: "tpch", Catalog: "tpch",
		Text: `SELECT count(*) FROM "${database}"."${schema}"."${prefix}lineitem" AS l WHERE l.shipmode IN ('MAIL', 'SHIP') AND l.quantity < 10`}
	w := ServedWorkload{
		Split:  &collector.Split{Train: []string{"tpch/q01"}, Test: []string{"gen/window", "tpch/q12", "tpcds/q99", "gen/nope"}},
		Parts:  []string{"test"},
		Scales: []string{"tiny", "sf1"}, Storage: "iceberg", Variants: 2, Seed: 1, SessionShare: 0.5,
	}
	items, skipped, err := w.Items([]collector.Template{q12}, dom)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(skipped, []string{"tpcds/q99", "gen/nope"}) {
		t.Errorf("not buildable: %v, want tpcds/q99 (no file) and gen/nope (no kind)", skipped)
	}
	count := map[string]int{}
	for _, it := range items {
		count[it.Workload.Template+"@"+it.Workload.Scale]++
		want := map[string]string{"tpch": "tpch_", "gen": "tpcds_"}[it.Workload.Family] + strings.ReplaceAll(it.Workload.Scale, ".", "_")
		if it.Catalog != "iceberg" || it.Schema != want {
			t.Errorf("%s at %s runs on %s.%s, want iceberg.%s", it.Workload.Template, it.Workload.Scale, it.Catalog, it.Schema, want)
		}
	}
	for _, k := range []string{"tpch/q12@tiny", "tpch/q12@sf1", "gen/window@tiny", "gen/window@sf1"} {
		if count[k] != 2 {
			t.Errorf("%s: %d statements, want 2 (the variants)", k, count[k])
		}
	}
	if len(count) != 4 {
		t.Errorf("statements of %v, want only q12 and gen/window (no other generator kind)", count)
	}
	if _, _, err := (ServedWorkload{Split: w.Split, Parts: []string{"holdout"}}).Items(nil, dom); err == nil {
		t.Error("an unknown part was accepted")
	}
}

// Learning groups first-sight executions by how many executions finished
// before them, in execution order; repeats count as finished, never as a
// row's own.
func TestServedLearningGroupsFirstSightByFinishedExecutions(t *testing.T) {
	var runs []servedRun
	for i := 0; i < 12; i++ {
		kind, est := kindNewLiterals, 10.0 // the first five are 10x off
		if i >= 5 {
			est = 1.2
		}
		if i%4 == 3 {
			kind = kindRepeat
		}
		runs = append(runs, run(kind, "model", est, est/2, est*2, 1, 0))
	}
	rows := learningRows(runs, []float64{2})
	if len(rows) != 3 {
		t.Fatalf("%d rows, want 0-4, 5-9 and 10-11: %+v", len(rows), rows)
	}
	want := []struct {
		group string
		n     int
		q50   float64
	}{{"first sight after 0-4", 4, 10}, {"first sight after 5-9", 4, 1.2}, {"first sight after 10-11", 1, 1.2}}
	for i, w := range want {
		if rows[i].Group != w.group || rows[i].N != w.n || !near(rows[i].Q50, w.q50) {
			t.Errorf("row %d: %s n %d q50 %v, want %s n %d q50 %v", i, rows[i].Group, rows[i].N, rows[i].Q50, w.group, w.n, w.q50)
		}
	}
}

func TestServedPairedRowsScoreBothOnTheSameStatements(t *testing.T) {
	at := func(r servedRun, pass, stmt int, first bool) servedRun {
		r.pass, r.stmt, r.first = pass, stmt, first
		return r
	}
	a := []servedRun{
		// statement 0: a ran first (4 s), b second (1 s): mean 2 s
		at(run(kindNewShape, "model", 2, 1, 4, 4, 1), 0, 0, true),
		// statement 1: b first (0.5 s), a second (0.5 s)
		at(run(kindNewLiterals, "text", 0.25, 0.1, 1, 0.5, 0), 0, 1, false),
		// statement 2: only a completed
		at(run(kindNewShape, "model", 1, 0.5, 2, 1, 0), 0, 2, true),
		at(run(kindRepeat, "history", 2, 1, 3, 2, 1), 1, 0, false),
	}
	b := []servedRun{
		at(run(kindNewShape, "model", 8, 4, 16, 1, 1), 0, 0, false),
		at(run(kindNewLiterals, "text", 0.5, 0.1, 1, 0.5, 0), 0, 1, true),
		at(run(kindRepeat, "history", 1, 0.5, 2, 2, 1), 1, 0, true),
	}
	rows := map[string]PairedRow{}
	for _, r := range pairedRows(a, b) {
		rows[r.Group] = r
	}
	fs := rows["first sight"]
	if fs.N != 2 {
		t.Fatalf("first sight: %d pairs, want 2 (statement 2 ran through a only)", fs.N)
	}
	// (quantile: the nearest rank above, so the p50 of two is the larger)
	// against each one's own CPU: a 2/4 → 2 and 0.25/0.5 → 2; b 8/1 → 8 and 1
	if !near(fs.AQ50, 2) || !near(fs.BQ50, 8) {
		t.Errorf("own CPU: a p50 %v b p50 %v, want 2 and 8", fs.AQ50, fs.BQ50)
	}
	// against the pair's mean CPU (2 s and 0.5 s): a 1 and 2; b 4 and 1
	if !near(fs.AMeanQ50, 2) || !near(fs.BMeanQ50, 4) || !near(fs.ACloser, 0.5) {
		t.Errorf("mean CPU: a %v b %v a closer %v, want 2, 4, 50%%", fs.AMeanQ50, fs.BMeanQ50, fs.ACloser)
	}
	// the first execution's CPU over the second's: 4/1 (a first) and 0.5/0.5 (b first)
	if !near(fs.FirstOverSecond, 4) {
		t.Errorf("first/second %v, want 4 and 1's upper median", fs.FirstOverSecond)
	}
	if big := rows["first sight, cpu>=1s"]; big.N != 1 || !near(big.AMeanQ50, 1) || !near(big.BMeanQ50, 4) || !near(big.ACloser, 1) {
		t.Errorf("first sight >= 1 s: %+v, want statement 0 alone", big)
	}
	if rp := rows["repeat"]; rp.N != 1 || !near(rp.AQ50, 1) || !near(rp.BQ50, 2) || !near(rp.FirstOverSecond, 1) {
		t.Errorf("repeat: %+v", rp)
	}
	var buf bytes.Buffer
	rep := &ServedReport{Bounds: []float64{2}, Skipped: map[string]int{}, Versus: &ServedReport{Bounds: []float64{2}, Skipped: map[string]int{}},
		Paired: pairedRows(a, b)}
	rep.fill(a, []string{"tiny"})
	rep.Versus.fill(b, []string{"tiny"})
	rep.Text(&buf)
	for _, want := range []string{"=== a", "=== b", "first sight, cpu>=1s", "first/second"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report text lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestServedRunLineCarriesTheStatementsSession(t *testing.T) {
	var buf bytes.Buffer
	r := run(kindNewShape, "model", 1, 0.5, 2, 1.5, 0)
	writeServedRun(&buf, r, false)
	r.session = map[string]string{"enable_dynamic_filtering": "false", "task_concurrency": "4"}
	writeServedRun(&buf, r, false)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2", len(lines))
	}
	var plain, set map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &plain); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &set); err != nil {
		t.Fatal(err)
	}
	if _, ok := plain["session"]; ok {
		t.Errorf("a statement in Trino's default session: %s, want no session field", lines[0])
	}
	s, _ := set["session"].(map[string]any)
	if s["enable_dynamic_filtering"] != "false" || s["task_concurrency"] != "4" || len(s) != 2 {
		t.Errorf("session field %v, want the statement's two properties", set["session"])
	}
}

// The peak memory and elapsed time served beside the CPU time are scored
// against what the query reported, on the executions that have both: the
// median's q-error and the share inside the served interval, per kind and
// source.
func TestServedBeyondRowsScoreMemoryAndElapsedWhereBothAreKnown(t *testing.T) {
	with := func(r servedRun, mem, elapsed servedQuantity) servedRun {
		r.beyond = [2]servedQuantity{mem, elapsed}
		return r
	}
	runs := []servedRun{
		with(run(kindNewShape, "model", 1, 0.5, 2, 1, 0), servedQuantity{1e8, 5e7, 2e8, 1e8}, servedQuantity{2, 1, 4, 8}),     // mem inside, q 1; elapsed outside, q 4
		with(run(kindRepeat, "history", 1, 0.5, 2, 1, 0), servedQuantity{1e8, 9e7, 1.1e8, 3e8}, servedQuantity{2, 1, 4, 3}),   // mem outside, q 3; elapsed inside
		with(run(kindRepeat, "history", 1, 0.5, 2, 1, 0), servedQuantity{}, servedQuantity{2, 1, 4, 0}),                       // not served; not reported
		with(run(kindNewLiterals, "text", 1, 0.5, 2, 1, 0), servedQuantity{4e8, 2e8, 8e8, 2e8}, servedQuantity{0, 0, 0, 1.5}), // mem inside (on the bound), q 2
	}
	rows := beyondRows(runs)
	get := func(target, group string) BeyondRow {
		for _, r := range rows {
			if r.Target == target && r.Group == group {
				return r
			}
		}
		return BeyondRow{}
	}
	if r := get("mem", "all"); r.N != 3 || !near(r.Q50, 2) || !near(r.Coverage, 2.0/3) {
		t.Errorf("mem, all: %+v; want 3 scored, q50 2, coverage 2/3", r)
	}
	if r := get("mem", "repeat"); r.N != 1 || !near(r.Q50, 3) || !near(r.Coverage, 0) {
		t.Errorf("mem, repeat: %+v; want the one served and reported, q 3, outside", r)
	}
	if r := get("elapsed", "all"); r.N != 2 || !near(r.Coverage, 0.5) || !near(r.Q90, 4) {
		t.Errorf("elapsed, all: %+v; want 2 scored, coverage 1/2, q90 4", r)
	}
	if r := get("elapsed", "source text"); r.N != 0 {
		t.Errorf("elapsed, source text: %+v; the text stage served no elapsed time, want no row", r)
	}
	var line bytes.Buffer
	writeServedRun(&line, runs[0], false)
	var m map[string]float64
	json.Unmarshal(bytes.TrimSpace(line.Bytes()), &m)
	if m["mem"] != 1e8 || m["mem_hi"] != 2e8 || m["actual_mem"] != 1e8 || m["elapsed_lo"] != 1 || m["actual_elapsed"] != 8 {
		t.Errorf("the runs line %s: want the served memory and elapsed time and what Trino reported", line.String())
	}
}
