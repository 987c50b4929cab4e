package bench

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/collector"
)

func TestParseFleetMix(t *testing.T) {
	m, err := ParseFleetMix("dashboards=0.6, etl=0.25,adhoc=0.15")
	if err != nil || m.Dashboards != 0.6 || m.ETL != 0.25 || m.Adhoc != 0.15 {
		t.Fatalf("%+v %v", m, err)
	}
	if m, err := ParseFleetMix("dashboards=1"); err != nil || m.Dashboards != 1 || m.ETL != 0 {
		t.Errorf("dashboards alone: %+v %v", m, err)
	}
	for _, bad := range []string{"dashboards=0.6,etl=0.2", "dashboards=0.5,reports=0.5", "dashboards=x,etl=1", "dashboards=-0.5,etl=1.5"} {
		if _, err := ParseFleetMix(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The fleet's statements come in the stated shares, the same ones for the
// same seed; dashboards repeat a few shapes with new literals or, by
// another user, the shape's current ones; jobs repeat exactly; ad-hoc
// statements are templates never seen.
func TestFleetPlan(t *testing.T) {
	var ts []collector.Template
	for i := range 120 {
		ts = append(ts, collector.Template{Name: fmt.Sprintf("t/q%03d", i), Family: "t"})
	}
	mix := FleetMix{Dashboards: 0.6, ETL: 0.25, Adhoc: 0.15}
	const n = 400
	p, err := fleetPlan(ts, mix, n, 7)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, s := range p {
		count[s.kind]++
	}
	if len(p) != n || count[kindDashboard]+count[kindDashboardRepeat] != 240 || count[kindETL] != 100 || count[kindAdhoc] != 60 {
		t.Fatalf("%d statements, kinds %v; want 240 dashboards, 100 etl, 60 adhoc", len(p), count)
	}
	if r := float64(count[kindDashboard]) / 240; r < 0.4 || r > 0.6 {
		t.Errorf("dashboards with new literals: %.2f of them; want about the default 0.5", r)
	}
	again, _ := fleetPlan(ts, mix, n, 7)
	if !reflect.DeepEqual(p, again) {
		t.Error("the same seed drew another plan")
	}
	if other, _ := fleetPlan(ts, mix, n, 8); reflect.DeepEqual(p, other) {
		t.Error("another seed drew the same plan")
	}
	type lit struct {
		name string
		v    int
	}
	current := map[string]planned{} // a dashboard's last statement
	dash, jobs, seen := map[string]bool{}, map[string]string{}, map[string]bool{}
	variants := map[lit]bool{}
	for i, s := range p {
		switch s.kind {
		case kindDashboard:
			if variants[lit{s.t.Name, s.v}] || s.v == 0 {
				t.Errorf("%d: dashboard %s v%d: literals not new", i, s.t.Name, s.v)
			}
			variants[lit{s.t.Name, s.v}] = true
			dash[s.t.Name], current[s.t.Name] = true, s
		case kindDashboardRepeat:
			last, ok := current[s.t.Name]
			if !ok || last.v != s.v || last.user == s.user {
				t.Errorf("%d: repeat %s v%d by %s after %+v; want the current literals by another user", i, s.t.Name, s.v, s.user, last)
			}
			current[s.t.Name] = s
		case kindETL:
			if s.v != 0 || (jobs[s.user] != "" && jobs[s.user] != s.t.Name) || !strings.HasPrefix(s.user, "etl-") {
				t.Errorf("%d: job %s ran %s v%d (before: %s)", i, s.user, s.t.Name, s.v, jobs[s.user])
			}
			jobs[s.user] = s.t.Name
		case kindAdhoc:
			if seen[s.t.Name] {
				t.Errorf("%d: ad-hoc %s seen before", i, s.t.Name)
			}
		}
		seen[s.t.Name] = true
	}
	if len(dash) > 24 || len(dash) < 20 || len(jobs) > 8 {
		t.Errorf("%d dashboard shapes, %d jobs; want at most (about) 24 and 8", len(dash), len(jobs))
	}
	users := map[string]bool{}
	for _, s := range p {
		if strings.HasPrefix(s.user, "dash-") {
			users[s.user] = true
		}
	}
	if len(users) < 40 {
		t.Errorf("%d dashboard users; want many of the 50", len(users))
	}
	if _, err := fleetPlan(ts[:80], mix, n, 7); err == nil || !strings.Contains(err.Error(), "92 in all") {
		t.Errorf("too few templates: %v", err)
	}
}

// The fleet's report: EXPLAINs per 1,000 per tenth and at steady state
// from each statement's own counts, served q-error against always on one
// actual per statement, the cache's answers with new literals, targets.
func TestReportFleet(t *testing.T) {
	const n = 20
	var always, wu []replayRun
	for i := range n {
		kind := []string{kindDashboard, kindDashboardRepeat, kindETL, kindAdhoc}[i%4]
		a := replayRun{idx: i, kind: kind, est: 0.5, actual: 0.5, class: 0, explains: map[string]float64{"hot": 1}}
		u := replayRun{idx: i, kind: kind, est: 0.5, actual: 0.5, class: 0, explains: map[string]float64{}}
		switch {
		case kind == kindAdhoc:
			u.explains["learn"] = 1
		case kind == kindDashboard && i >= n/2:
			u.cached, u.est = true, 1 // the estimate of other literals: q-error 2
		}
		always, wu = append(always, a), append(wu, u)
	}
	var b strings.Builder
	reportFleet(&b, []string{"always", "when-uncertain"}, [][]replayRun{always, wu}, n, []float64{1})
	out := b.String()
	for _, want := range []string{
		// Always explains every statement; when-uncertain the ad-hoc ones
		// (idx 3, 7, ...: one in each second tenth), 3 of the last 10.
		"always                         1000   1000   1000   1000   1000   1000   1000   1000   1000   1000",
		"when-uncertain                    0    500      0    500      0    500      0    500      0    500",
		"when-uncertain                   300               0             300",
		"when-uncertain               dashboard-repeat      5        0        0      0%",
		"when-uncertain               new               2     2.00     2.00     0.0%", // dashboards 12 and 16
		"  always                     q p50  1.00  p95  1.00  wrong   0.0%  from the cache 0",
		"steady  300/1k MISSED",
		"repeats by another user: 0 EXPLAINs of a plan explained before ok",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

// A repeat's EXPLAIN is the first of its plan when no earlier run of the
// statement was explained or served from the cache (its first run's
// background EXPLAIN over the ceiling); after an explained run it is an
// EXPLAIN again, which the target counts.
func TestFirstExplains(t *testing.T) {
	run := func(idx int, kind, tmpl string, explains map[string]float64, explained bool) replayRun {
		return replayRun{idx: idx, kind: kind, template: tmpl, variant: 1, explains: explains, explained: explained}
	}
	rs := []replayRun{
		run(3, kindDashboardRepeat, "tpch/q07", map[string]float64{"learn": 1}, false),     // the first of its plan
		run(0, kindDashboard, "tpch/q07", map[string]float64{"skipped_ceiling": 1}, false), // placed before the plan, none run
		run(1, kindDashboard, "tpch/q03", map[string]float64{"hot": 1}, true),
		run(2, kindDashboardRepeat, "tpch/q03", map[string]float64{"learn": 1}, false), // again
		run(4, kindDashboardRepeat, "tpch/q07", map[string]float64{"drift": 1}, false), // again: idx 3 explained it
	}
	if n := firstExplains(rs); n != 1 {
		t.Errorf("%v first EXPLAINs of their plan, want 1", n)
	}
	var b strings.Builder
	always := []replayRun{}
	for _, r := range rs {
		a := r
		a.explains, a.explained = map[string]float64{"hot": 1}, true
		always = append(always, a)
	}
	reportFleet(&b, []string{"always", "when-uncertain"}, [][]replayRun{always, rs}, len(rs), []float64{1})
	if want := "repeats by another user: 2 EXPLAINs of a plan explained before MISSED (1 the first of their plan: no earlier run was explained)"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, b.String())
	}
}

// --adhoc-families: the ad-hoc statements from those families, the
// dashboards and jobs from the others.
func TestFleetPlanAdhocFamilies(t *testing.T) {
	var ts []collector.Template
	for i := range 17 {
		ts = append(ts, collector.Template{Name: fmt.Sprintf("tpch/q%02d", i), Family: "tpch"})
	}
	for i := range 88 {
		ts = append(ts, collector.Template{Name: fmt.Sprintf("tpcds/q%02d", i), Family: "tpcds"})
	}
	mix := FleetMix{Dashboards: 0.6, ETL: 0.25, Adhoc: 0.15, DashboardShapes: 12, ETLJobs: 4, AdhocFamilies: []string{"tpcds"}}
	p, err := fleetPlan(ts, mix, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range p {
		if (s.kind == kindAdhoc) != (s.t.Family == "tpcds") {
			t.Fatalf("%d: %s is %s", i, s.kind, s.t.Name)
		}
	}
	mix.DashboardShapes = 16
	if _, err := fleetPlan(ts, mix, 300, 1); err == nil {
		t.Error("16 shapes and 4 jobs from 17 TPC-H templates: no error")
	}
}
