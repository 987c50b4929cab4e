package bench

import (
	"encoding/json"
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
)

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// ProxyURL is the estimating proxy (with its history on, cold), in
	// front of a real Trino.
	ProxyURL string
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
}

// replayRun is one statement of the replay as the proxy placed it and
// Trino ran it.
type replayRun struct {
	kind               string // new, exact, literals
	source             string
	est, model, actual float64 // CPU seconds; model 0 when the model did not run
	decide             time.Duration
	explained          bool
}

// Replay runs a recurring workload through the estimating proxy from a
// cold history, in order, with feedback on (issue 17's evaluation), and
// reports per estimate source and overall: the decision time (p50/p99),
// the q-error (median, p95) over the run and over its last half, against
// the plain model's own number on the queries where the model ran, and the
// share of queries placed without an EXPLAIN.
func Replay(w io.Writer, o ReplayOptions) error {
	all, err := collector.LoadTemplates(o.Workloads)
	if err != nil {
		return err
	}
	var ts []collector.Template
	for _, t := range all {
		if len(o.Families) == 0 || slices.Contains(o.Families, t.Family) {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return fmt.Errorf("bench replay: no templates of %v in %s", o.Families, o.Workloads)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 17))
	rng.Shuffle(len(ts), func(i, j int) { ts[i], ts[j] = ts[j], ts[i] })
	type stmt struct {
		t collector.Template
		v int
	}
	var seen []stmt
	variants := map[string]int{}
	next := 0
	client := &http.Client{Timeout: 10 * time.Minute}
	var runs []replayRun
	fmt.Fprintf(w, "replay: %d statements through %s from a cold history, %.0f%% new templates (%d available), seed %d\n",
		o.N, o.ProxyURL, 100*o.New, len(ts), o.Seed)
	for i := 0; i < o.N; i++ {
		var s stmt
		kind := "new"
		switch {
		case next < len(ts) && (len(seen) == 0 || rng.Float64() < o.New):
			s = stmt{ts[next], 0}
			next++
		case rng.IntN(2) == 0:
			s, kind = seen[rng.IntN(len(seen))], "exact"
		default:
			t := seen[rng.IntN(len(seen))].t
			variants[t.Name]++
			s, kind = stmt{t, variants[t.Name]}, "literals"
		}
		seen = append(seen, s)
		it := collector.TemplateVariant(s.t, o.Scale, s.v, int64(o.Seed), 0, o.Domains)
		r, err := replayOne(client, o.ProxyURL, it)
		if err != nil {
			fmt.Fprintf(w, "  skipped %s v%d: %v\n", s.t.Name, s.v, err)
			continue
		}
		r.kind = kind
		runs = append(runs, r)
	}
	reportReplay(w, runs)
	return nil
}

// replayOne runs one statement to its end through the proxy.
func replayOne(c *http.Client, base string, it collector.Item) (replayRun, error) {
	var r replayRun
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(it.SQL))
	req.Header.Set("X-Trino-User", "bench-replay")
	req.Header.Set("X-Trino-Catalog", it.Catalog)
	req.Header.Set("X-Trino-Schema", it.Schema)
	for k, v := range it.Session {
		req.Header.Add("X-Trino-Session", k+"="+v)
	}
	type page struct {
		NextURI string `json:"nextUri"`
		Error   *struct{ Message string }
		Stats   struct {
			State         string `json:"state"`
			CPUTimeMillis int64  `json:"cpuTimeMillis"`
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
	r.model = estimateField(est, "model")
	r.decide = serverTiming(h.Get("Server-Timing"), "prestroid")
	r.explained = serverTiming(h.Get("Server-Timing"), "explain") > 0
	for p.NextURI != "" {
		g, _ := http.NewRequest("GET", p.NextURI, nil)
		g.Header.Set("X-Trino-User", "bench-replay")
		if p, _, err = do(g); err != nil {
			return r, err
		}
	}
	if p.Error != nil || p.Stats.State != "FINISHED" {
		return r, fmt.Errorf("state %s %v", p.Stats.State, p.Error)
	}
	if r.source == "" {
		return r, fmt.Errorf("not estimated: %s", h.Get("X-Prestroid-Decision"))
	}
	r.actual = math.Max(float64(p.Stats.CPUTimeMillis)/1000, 0.001)
	return r, nil
}

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

func reportReplay(w io.Writer, runs []replayRun) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no statement completed")
		return
	}
	half := len(runs) / 2
	type group struct {
		name string
		keep func(i int, r replayRun) bool
	}
	groups := []group{{"all", func(int, replayRun) bool { return true }},
		{"last half", func(i int, _ replayRun) bool { return i >= half }}}
	for _, src := range []string{"cheap", "history", "model+residual", "model", "optimizer"} {
		groups = append(groups, group{src, func(_ int, r replayRun) bool { return r.source == src }})
	}
	for _, k := range []string{"new", "exact", "literals"} {
		groups = append(groups, group{"kind " + k, func(_ int, r replayRun) bool { return r.kind == k }})
	}
	fmt.Fprintf(w, "%-16s %5s %9s %9s %8s %8s %10s %10s %9s\n", "", "n", "dec p50", "dec p99", "q p50", "q p95", "model q50", "model q95", "explained")
	for _, g := range groups {
		var dec, q, mq []float64
		explained := 0
		for i, r := range runs {
			if !g.keep(i, r) {
				continue
			}
			dec = append(dec, float64(r.decide)/float64(time.Millisecond))
			q = append(q, qerr(r.est, r.actual))
			if r.model > 0 {
				mq = append(mq, qerr(r.model, r.actual))
			}
			if r.explained {
				explained++
			}
		}
		if len(q) == 0 {
			continue
		}
		fmt.Fprintf(w, "%-16s %5d %7.2fms %7.2fms %8.2f %8.2f %10.2f %10.2f %8.0f%%\n", g.name, len(q),
			quantile(dec, 0.5), quantile(dec, 0.99), quantile(q, 0.5), quantile(q, 0.95),
			quantile(mq, 0.5), quantile(mq, 0.95), 100*float64(explained)/float64(len(q)))
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
}
