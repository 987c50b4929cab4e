package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// The fleet's targets (the Done-when): at steady state at most
// 150 EXPLAINs per 1,000 statements, with a served median q-error and a
// wrong-class share no worse than explain: always's on the same statements
// by more than 0.05 and 1 point; a repeat by another user runs no EXPLAIN.
const (
	fleetSteadyExplains = 150
	fleetQErrSlack      = 0.05
	fleetWrongSlack     = 0.01
)

// fleetKinds are the kinds of a fleet's statements, in report order.
var fleetKinds = []string{kindDashboard, kindDashboardRepeat, kindETL, kindAdhoc}

// reportFleet prints a fleet replay's report, per setting (names, each
// with its runs; n statements planned): the EXPLAINs per 1,000 statements
// per tenth of the run from the cold start, at steady state (the last
// half) by reason, and per kind of statement with its decision time; the
// served q-error and wrong-class share against the setting named
// "always…" (else the first) on the same statements, each scored against
// one actual per statement (the median of its runs under the settings:
// each setting runs its own copy, and near a class bound the runs differ);
// the statements answered by the estimate cache, with the same literals
// and with new ones, and how the settings served the latter; then the
// targets.
func reportFleet(w io.Writer, names []string, runs [][]replayRun, n int, bounds []float64) {
	if n <= 0 || len(runs) == 0 {
		return
	}
	ref := 0
	for j, name := range names {
		if strings.HasPrefix(name, "always") {
			ref = j
			break
		}
	}
	// One actual per statement: the median of the settings' runs of it.
	byIdx := make([]map[int]replayRun, len(runs))
	acts := map[int][]float64{}
	for j, rs := range runs {
		byIdx[j] = map[int]replayRun{}
		for _, r := range rs {
			byIdx[j][r.idx] = r
			acts[r.idx] = append(acts[r.idx], r.actual)
		}
	}
	actual := map[int]float64{}
	for i, a := range acts {
		if len(a) == len(runs) { // run under every setting: comparable
			actual[i] = median(a)
		}
	}

	per := func(x float64, m int) float64 {
		if m == 0 {
			return 0
		}
		return 1000 * x / float64(m)
	}
	fmt.Fprintf(w, "\nfleet: EXPLAINs per 1,000 statements per tenth of the run, from a cold start (hot + learn + drift)\n%-28s", "setting")
	for d := range 10 {
		fmt.Fprintf(w, " %6s", fmt.Sprintf("%d0%%", d+1))
	}
	fmt.Fprintln(w)
	for j, rs := range runs {
		fmt.Fprintf(w, "%-28s", names[j])
		for d := range 10 {
			lo, hi := d*n/10, (d+1)*n/10
			x := 0.0
			for _, r := range rs {
				if r.idx >= lo && r.idx < hi {
					x += r.explainCount()
				}
			}
			fmt.Fprintf(w, " %6.0f", per(x, hi-lo))
		}
		fmt.Fprintln(w)
	}

	half := n / 2
	reasons := []string{"hot", "learn", "drift", "skipped_known", "skipped_ceiling"}
	fmt.Fprintf(w, "\nfleet: steady state (the last %d statements), EXPLAINs per 1,000 by reason\n%-28s %7s", n-half, "setting", "total")
	for _, r := range reasons {
		fmt.Fprintf(w, " %15s", r)
	}
	fmt.Fprintln(w)
	steady := make([]float64, len(runs))
	for j, rs := range runs {
		by := map[string]float64{}
		for _, r := range rs {
			if r.idx >= half {
				for k, v := range r.explains {
					by[k] += v
				}
			}
		}
		steady[j] = per(by["hot"]+by["learn"]+by["drift"], n-half)
		fmt.Fprintf(w, "%-28s %7.0f", names[j], steady[j])
		for _, r := range reasons {
			fmt.Fprintf(w, " %15.0f", per(by[r], n-half))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\nfleet: per kind of statement (EXPLAINs per 1,000 of the kind; cached: answered by the estimate cache)\n%-28s %-17s %5s %8s %8s %7s %9s %9s %7s\n",
		"setting", "kind", "n", "EXP/1k", "hot/1k", "cached", "dec p50", "dec p99", "q p50")
	repeatExplains := make([]float64, len(runs))
	firstOfPlan := make([]float64, len(runs)) // of those, the first EXPLAIN of their plan (firstExplains)
	for j, rs := range runs {
		firstOfPlan[j] = firstExplains(rs)
		for _, k := range fleetKinds {
			var dec, q []float64
			x, hot, cached := 0.0, 0.0, 0
			for _, r := range rs {
				if r.kind != k {
					continue
				}
				dec = append(dec, float64(r.decide)/float64(time.Millisecond))
				q = append(q, qerr(r.est, r.actual))
				x += r.explainCount()
				hot += r.explains["hot"]
				if r.cached {
					cached++
				}
			}
			if k == kindDashboardRepeat {
				repeatExplains[j] = x
			}
			if len(q) == 0 {
				continue
			}
			fmt.Fprintf(w, "%-28s %-17s %5d %8.0f %8.0f %6.0f%% %7.2fms %7.2fms %7.2f\n", names[j], k, len(q), per(x, len(q)), per(hot, len(q)),
				100*float64(cached)/float64(len(q)), quantile(dec, 0.5), quantile(dec, 0.99), quantile(q, 0.5))
		}
	}

	// Served against explain: always on the same statements.
	type score struct {
		n            int
		q50, q95     float64
		wrong        float64
		q50L, wrongL float64 // the last half
	}
	scoreOf := func(j int, keep func(r replayRun) bool) score {
		var q, qL []float64
		wrong, wrongL := 0, 0
		for i, a := range actual {
			r, ok := byIdx[j][i]
			if !ok || !keep(r) {
				continue
			}
			q = append(q, qerr(r.est, a))
			bad := r.class != classOf(bounds, a)
			if bad {
				wrong++
			}
			if i >= half {
				qL = append(qL, qerr(r.est, a))
				if bad {
					wrongL++
				}
			}
		}
		s := score{n: len(q), q50: quantile(q, 0.5), q95: quantile(q, 0.95), q50L: quantile(qL, 0.5)}
		if len(q) > 0 {
			s.wrong = float64(wrong) / float64(len(q))
		}
		if len(qL) > 0 {
			s.wrongL = float64(wrongL) / float64(len(qL))
		}
		return s
	}
	all := func(replayRun) bool { return true }
	fmt.Fprintf(w, "\nfleet: served estimates on the %d statements every setting ran, each against one actual (the median of its runs), vs %s\n%-28s %5s %8s %8s %8s %9s %8s %10s %9s\n",
		len(actual), names[ref], "setting", "n", "q p50", "q p95", "wrong", "Δq p50", "Δwrong", "q50 last", "Δq last")
	scores := make([]score, len(runs))
	for j := range runs {
		scores[j] = scoreOf(j, all)
	}
	for j, s := range scores {
		r := scores[ref]
		fmt.Fprintf(w, "%-28s %5d %8.2f %8.2f %7.1f%% %+9.2f %+7.1fpt %10.2f %+9.2f\n", names[j], s.n, s.q50, s.q95, 100*s.wrong,
			s.q50-r.q50, 100*(s.wrong-r.wrong), s.q50L, s.q50L-r.q50L)
	}

	// The estimate cache: statements it answered with the literals it was
	// filled for, and with new ones (a dashboard's moved range: the
	// estimate of other literals), and the latter under every setting.
	sameLits := func(r replayRun) bool {
		return r.kind == kindDashboardRepeat || r.kind == kindETL || r.kind == "exact"
	}
	fmt.Fprintf(w, "\nfleet: answered by the estimate cache (one actual per statement)\n%-28s %-13s %5s %8s %8s %8s\n", "setting", "literals", "n", "q p50", "q p95", "wrong")
	for j := range runs {
		for _, same := range []bool{true, false} {
			s := scoreOf(j, func(r replayRun) bool { return r.cached && sameLits(r) == same })
			if s.n == 0 {
				continue
			}
			label := "new"
			if same {
				label = "the same"
			}
			fmt.Fprintf(w, "%-28s %-13s %5d %8.2f %8.2f %7.1f%%\n", names[j], label, s.n, s.q50, s.q95, 100*s.wrong)
		}
	}
	for j := range runs {
		served := map[int]bool{}
		for _, r := range runs[j] {
			if _, ok := actual[r.idx]; ok && r.cached && !sameLits(r) {
				served[r.idx] = true
			}
		}
		if len(served) == 0 {
			continue
		}
		fmt.Fprintf(w, "the %d statements %s served from the cache with new literals, under each setting:\n", len(served), names[j])
		for k := range runs {
			cached := 0
			s := scoreOf(k, func(r replayRun) bool {
				if served[r.idx] && r.cached {
					cached++
				}
				return served[r.idx]
			})
			fmt.Fprintf(w, "  %-26s q p50 %5.2f  p95 %5.2f  wrong %5.1f%%  from the cache %d\n", names[k], s.q50, s.q95, 100*s.wrong, cached)
		}
	}

	fmt.Fprintf(w, "\nfleet: targets (steady state <= %d EXPLAINs per 1,000; median q-error <= %s's + %.2f; wrong class <= %s's + %.0f point; a repeat by another user: no EXPLAIN)\n",
		fleetSteadyExplains, names[ref], fleetQErrSlack, names[ref], 100*fleetWrongSlack)
	for j := range runs {
		if j == ref {
			continue
		}
		ok := func(b bool) string {
			if b {
				return "ok"
			}
			return "MISSED"
		}
		s, r := scores[j], scores[ref]
		again := repeatExplains[j] - firstOfPlan[j]
		fmt.Fprintf(w, "%-28s steady %4.0f/1k %-6s  Δq p50 %+.2f %-6s  Δwrong %+.1fpt %-6s  repeats by another user: %.0f EXPLAINs of a plan explained before %s",
			names[j], steady[j], ok(steady[j] <= fleetSteadyExplains), s.q50-r.q50, ok(s.q50-r.q50 <= fleetQErrSlack),
			100*(s.wrong-r.wrong), ok(s.wrong-r.wrong <= fleetWrongSlack+1e-9), again, ok(again == 0))
		if firstOfPlan[j] > 0 {
			fmt.Fprintf(w, " (%.0f the first of their plan: no earlier run was explained)", firstOfPlan[j])
		}
		fmt.Fprintln(w)
	}
}

// firstExplains counts the EXPLAINs of the repeats by another user in rs
// (one setting's runs) that were the first of their statement: no
// earlier run of the statement (its template and literals) was explained
// or served from the estimate cache, as when its first run was placed
// before the plan and its background EXPLAIN was over the ceiling. The
// target (no EXPLAIN for a repeat) is about a plan already explained:
// the "not again for a plan already explained".
func firstExplains(rs []replayRun) float64 {
	order := slices.Clone(rs)
	slices.SortFunc(order, func(a, b replayRun) int { return a.idx - b.idx })
	type stmt struct {
		template string
		variant  int
	}
	explained := map[stmt]bool{}
	n := 0.0
	for _, r := range order {
		k := stmt{r.template, r.variant}
		x := r.explainCount()
		if r.kind == kindDashboardRepeat && x > 0 && !explained[k] {
			n += x
		}
		if x > 0 || r.cached || r.explained {
			explained[k] = true
		}
	}
	return n
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
