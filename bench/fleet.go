package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/collector"
)

// FleetMix is a replay's workload drawn as a fleet runs it (bench replay
// --mix): dashboards, scheduled ETL and ad-hoc statements in stated
// shares of the statements.
//
//   - Dashboards are DashboardShapes templates (a few dozen shapes), each
//     opened by many users (Users): a share Refresh of a dashboard's
//     statements come with new literals from the collector's variant
//     generator (its window moved, a filter changed: kind
//     "dashboard"), the others repeat the dashboard's current literals as
//     another user than the one who ran them last ("dashboard-repeat").
//   - Scheduled ETL is ETLJobs other templates, each one statement run
//     again exactly, by its job's own user ("etl").
//   - Ad-hoc statements are templates never run before, each once, by one
//     of a few analysts ("adhoc"): the templates left after the
//     dashboards' and the jobs'.
//
// The kinds are dealt in exactly their shares (rounded), in an order, and
// with shapes, users and literals, drawn from the seed.
type FleetMix struct {
	Dashboards, ETL, Adhoc float64
	// DashboardShapes is how many templates the dashboards show. Zero means 24.
	DashboardShapes int
	// ETLJobs is how many scheduled statements repeat. Zero means 8.
	ETLJobs int
	// Users is how many users open the dashboards. Zero means 50.
	Users int
	// Refresh is the share of a dashboard's statements that come with new
	// literals. Zero means 0.5.
	Refresh float64
	// AdhocFamilies, when set, are the template families the ad-hoc
	// statements are drawn from, and the dashboards and jobs from the
	// others (e.g. TPC-DS's larger, slower set for the ad-hoc ones).
	AdhocFamilies []string
}

// Kinds of a fleet replay's statements (replayRun.kind).
const (
	kindDashboard       = "dashboard"        // a dashboard's shape with new literals
	kindDashboardRepeat = "dashboard-repeat" // a dashboard's current literals again, by another user
	kindETL             = "etl"              // a scheduled job's statement, exactly
	kindAdhoc           = "adhoc"            // a template never run before
)

// ParseFleetMix reads --mix: NAME=SHARE pairs, comma-separated, of the
// kinds dashboards, etl and adhoc (a kind left out has no share); the
// shares are non-negative and sum to 1 (within 0.001).
func ParseFleetMix(s string) (FleetMix, error) {
	var m FleetMix
	sum := 0.0
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, val, ok := strings.Cut(f, "=")
		x, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if !ok || err != nil || x < 0 || math.IsNaN(x) {
			return m, fmt.Errorf("--mix %q: want NAME=SHARE pairs, e.g. dashboards=0.6,etl=0.25,adhoc=0.15", s)
		}
		switch strings.TrimSpace(name) {
		case "dashboards":
			m.Dashboards = x
		case "etl":
			m.ETL = x
		case "adhoc":
			m.Adhoc = x
		default:
			return m, fmt.Errorf("--mix %q: unknown kind %q (dashboards, etl, adhoc)", s, name)
		}
		sum += x
	}
	if math.Abs(sum-1) > 0.001 {
		return m, fmt.Errorf("--mix %q: the shares sum to %g, not 1", s, sum)
	}
	return m, nil
}

func (m FleetMix) String() string {
	return fmt.Sprintf("dashboards=%g (%d shapes, %d users, %.0f%% new literals), etl=%g (%d jobs), adhoc=%g",
		m.Dashboards, m.DashboardShapes, m.Users, 100*m.Refresh, m.ETL, m.ETLJobs, m.Adhoc)
}

func (m FleetMix) withDefaults() FleetMix {
	if m.DashboardShapes <= 0 {
		m.DashboardShapes = 24
	}
	if m.ETLJobs <= 0 {
		m.ETLJobs = 8
	}
	if m.Users <= 0 {
		m.Users = 50
	}
	if m.Refresh <= 0 {
		m.Refresh = 0.5
	}
	return m
}

// planned is one statement of a replay's plan: template t's variant v
// (0: the template's own literals), sent as user.
type planned struct {
	kind string
	t    collector.Template
	v    int
	user string
}

// fleetPlan deals n statements of the mix m from the templates ts (in the
// seed's order: the first DashboardShapes are the dashboards', the next
// ETLJobs the jobs', the rest, in turn, the ad-hoc statements'). A mix
// needing more ad-hoc templates than are left is an error.
func fleetPlan(ts []collector.Template, m FleetMix, n int, seed uint64) ([]planned, error) {
	m = m.withDefaults()
	rng := rand.New(rand.NewPCG(seed, 29))
	nd := int(math.Round(float64(n) * m.Dashboards))
	ne := min(int(math.Round(float64(n)*m.ETL)), n-nd)
	na := n - nd - ne
	shapes, jobs := 0, 0
	if nd > 0 {
		shapes = m.DashboardShapes
	}
	if ne > 0 {
		jobs = m.ETLJobs
	}
	if shapes+jobs+na > len(ts) {
		return nil, fmt.Errorf("bench replay: the mix needs %d dashboard shapes, %d jobs and %d ad-hoc templates, %d in all; %d templates available (fewer statements, a smaller ad-hoc share, or --families tpch,tpcds)",
			shapes, jobs, na, shapes+jobs+na, len(ts))
	}
	ts = append([]collector.Template(nil), ts...)
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	if len(m.AdhocFamilies) > 0 {
		// The others' first, in the shuffled order: the dashboards' and
		// the jobs' shapes; then the ad-hoc families'.
		slices.SortStableFunc(ts, func(a, b collector.Template) int {
			return cmp.Compare(b2i(slices.Contains(m.AdhocFamilies, a.Family)), b2i(slices.Contains(m.AdhocFamilies, b.Family)))
		})
		others := 0
		for _, t := range ts {
			if !slices.Contains(m.AdhocFamilies, t.Family) {
				others++
			}
		}
		if shapes+jobs > others || na > len(ts)-others {
			return nil, fmt.Errorf("bench replay: the mix needs %d dashboard shapes and %d jobs outside %v (%d templates there) and %d ad-hoc templates of %v (%d there)",
				shapes, jobs, m.AdhocFamilies, others, na, m.AdhocFamilies, len(ts)-others)
		}
		for i := shapes + jobs; i < others; i++ { // unused
			ts[i].Name = ""
		}
		ts = slices.DeleteFunc(ts, func(t collector.Template) bool { return t.Name == "" })
	}
	kinds := make([]string, 0, n)
	for _, kc := range []struct {
		k string
		c int
	}{{kindDashboard, nd}, {kindETL, ne}, {kindAdhoc, na}} {
		for range kc.c {
			kinds = append(kinds, kc.k)
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	type board struct {
		v    int    // the current literals' variant (0: none run yet)
		user string // who ran them last
	}
	boards := make([]board, shapes)
	variants := 0 // variants are numbered across the dashboards: each is new
	nextAdhoc := shapes + jobs
	analysts := max(m.Users/10, 1)
	out := make([]planned, 0, n)
	for _, k := range kinds {
		switch k {
		case kindDashboard:
			i := rng.IntN(shapes)
			b := &boards[i]
			user := "dash-" + strconv.Itoa(rng.IntN(m.Users))
			if b.v == 0 || rng.Float64() < m.Refresh {
				variants++
				*b = board{v: variants, user: user}
				out = append(out, planned{kindDashboard, ts[i], b.v, user})
				continue
			}
			for m.Users > 1 && user == b.user {
				user = "dash-" + strconv.Itoa(rng.IntN(m.Users))
			}
			b.user = user
			out = append(out, planned{kindDashboardRepeat, ts[i], b.v, user})
		case kindETL:
			j := rng.IntN(jobs)
			out = append(out, planned{kindETL, ts[shapes+j], 0, "etl-" + strconv.Itoa(j)})
		case kindAdhoc:
			out = append(out, planned{kindAdhoc, ts[nextAdhoc], 0, "analyst-" + strconv.Itoa(rng.IntN(analysts))})
			nextAdhoc++
		}
	}
	return out, nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
