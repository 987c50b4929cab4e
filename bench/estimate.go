package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/plan"
)

// EstimateOptions configure Estimate. The caller runs the estimating proxy
// (wired as `prestroid serve` wires it) and passes its URL and the
// service's featurize+infer path.
type EstimateOptions struct {
	// Trino is the real coordinator's URL; ProxyURL the estimating proxy
	// in front of it.
	Trino, ProxyURL string
	// Workloads is the directory with tpcds/*.sql and tpch/*.sql; Scale
	// the schema the templates are filled with; Rounds the passes over
	// the workload.
	Workloads, Scale string
	Rounds           int
	// Featurize estimates a plan (EXPLAIN JSON) in process and returns
	// the featurize + inference time. Required.
	Featurize func(ctx context.Context, planJSON []byte) (time.Duration, error)
}

// Estimate measures what the estimating proxy adds to a query's
// submission on a real Trino, side by side in one run (issue "Cost-aware
// proxy", benchmark): for every TPC-H/TPC-DS workload query, interleaved,
//   - EXPLAIN: the proxy's own EXPLAIN request (same client, same user), direct;
//   - direct:  POST /v1/statement to Trino until the first page;
//   - miss:    the same POST through the estimating proxy, estimate cache
//     missed (a user not seen before: the user is part of the key);
//   - hit:     the same POST through the proxy, estimate cache hit.
//
// Every query is cancelled right after its first page (only submission is
// timed). Targets: miss − direct ≤ EXPLAIN + 2 ms; hit − direct ≤ 1 ms.
func Estimate(w io.Writer, o EstimateOptions) error {
	ts, err := collector.LoadTemplates(o.Workloads)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Trino %s, %d templates at %s, %d rounds; per query: EXPLAIN, direct POST, proxied POST (estimate cache miss), proxied POST (hit)\n",
		o.Trino, len(ts), o.Scale, o.Rounds)
	samples, failed := measureEstimate(o, ts)
	for _, f := range failed {
		fmt.Fprintln(w, "  skipped", f)
	}
	if len(samples) == 0 {
		return fmt.Errorf("no query could be measured")
	}
	reportEstimate(w, samples)
	return nil
}

// sample is one query's timings. proxyExplain and proxyDecide are the
// proxy's own EXPLAIN and decision times for the miss (its Server-Timing
// header): the overhead beyond EXPLAIN is miss − direct − proxyExplain,
// free of EXPLAIN's variance.
type sample struct{ explain, direct, miss, hit, featurize, proxyExplain, proxyDecide time.Duration }

// measureEstimate runs every template o.Rounds times and returns the
// samples and the queries that could not be measured.
func measureEstimate(o EstimateOptions, ts []collector.Template) (samples []sample, failed []string) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	explain := &plan.ExplainClient{HTTP: client}
	for r := 0; r < o.Rounds; r++ {
		for i, t := range ts {
			it := collector.TemplateVariant(t, o.Scale, 0, 1, 0, nil)
			h := http.Header{}
			h.Set("X-Trino-User", fmt.Sprintf("bench-%d-%d", r, i))
			h.Set("X-Trino-Catalog", it.Catalog)
			h.Set("X-Trino-Schema", it.Schema)
			var s sample
			t0 := time.Now()
			res, err := explain.Explain(context.Background(), o.Trino, it.SQL, h)
			s.explain = time.Since(t0)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: EXPLAIN: %v", t.Name, err))
				continue
			}
			if s.direct, err = submitAndCancel(client, o.Trino, it.SQL, h, nil); err == nil {
				var hdr http.Header
				if s.miss, err = submitAndCancel(client, o.ProxyURL, it.SQL, h, &hdr); err == nil {
					if !strings.HasPrefix(hdr.Get("X-Prestroid-Decision"), "estimated") {
						err = fmt.Errorf("not estimated: %q", hdr.Get("X-Prestroid-Decision"))
					}
					s.proxyExplain = serverTiming(hdr.Get("Server-Timing"), "explain")
					s.proxyDecide = serverTiming(hdr.Get("Server-Timing"), "prestroid")
				}
				if err == nil {
					s.hit, err = submitAndCancel(client, o.ProxyURL, it.SQL, h, &hdr)
				}
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", t.Name, err))
				continue
			}
			// Featurization + inference alone, on the plan the EXPLAIN returned.
			if d, err := o.Featurize(context.Background(), res.PlanJSON); err == nil {
				s.featurize = d
			}
			samples = append(samples, s)
		}
	}
	return samples, failed
}

// reportEstimate prints the percentiles of the samples.
func reportEstimate(w io.Writer, samples []sample) {
	col := func(f func(sample) time.Duration) []time.Duration {
		out := make([]time.Duration, len(samples))
		for i, s := range samples {
			out[i] = f(s)
		}
		return out
	}
	fmt.Fprintf(w, "%d queries measured\n", len(samples))
	line := func(name string, d []time.Duration) {
		fmt.Fprintf(w, "  %-40s p50 %9s  p90 %9s  p99 %9s\n", name, fmtMs(pct(d, 50)), fmtMs(pct(d, 90)), fmtMs(pct(d, 99)))
	}
	line("EXPLAIN (direct)", col(func(s sample) time.Duration { return s.explain }))
	line("POST direct", col(func(s sample) time.Duration { return s.direct }))
	line("POST via proxy, cache miss", col(func(s sample) time.Duration { return s.miss }))
	line("POST via proxy, cache hit", col(func(s sample) time.Duration { return s.hit }))
	line("featurize + infer (in the proxy)", col(func(s sample) time.Duration { return s.featurize }))
	line("EXPLAIN (the proxy's, Server-Timing)", col(func(s sample) time.Duration { return s.proxyExplain }))
	line("decision (the proxy's, Server-Timing)", col(func(s sample) time.Duration { return s.proxyDecide }))
	line("added, miss (miss − direct)", col(func(s sample) time.Duration { return s.miss - s.direct }))
	over := col(func(s sample) time.Duration { return s.miss - s.direct - s.proxyExplain })
	line("added beyond its EXPLAIN (target ≤ 2ms)", over)
	hit := col(func(s sample) time.Duration { return s.hit - s.direct })
	line("added, hit (target ≤ 1ms)", hit)
	within := 0
	for _, d := range over {
		if d <= 2*time.Millisecond {
			within++
		}
	}
	fmt.Fprintf(w, "  queries within EXPLAIN + 2 ms: %d of %d\n", within, len(over))
}

// submitAndCancel POSTs sql, reads the first page, cancels the query
// (DELETE nextUri) and returns the time to the first page. hdr, if set,
// receives the response headers.
func submitAndCancel(c *http.Client, base, sql string, h http.Header, hdr *http.Header) (time.Duration, error) {
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(sql))
	req.Header = h.Clone()
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	var p struct {
		NextURI string
		Error   *struct{ Message string }
	}
	err = json.NewDecoder(resp.Body).Decode(&p)
	resp.Body.Close()
	d := time.Since(t0)
	if hdr != nil {
		*hdr = resp.Header
	}
	if err != nil {
		return 0, err
	}
	if p.Error != nil {
		return 0, fmt.Errorf("query failed: %s", p.Error.Message)
	}
	if p.NextURI != "" {
		del, _ := http.NewRequest("DELETE", p.NextURI, nil)
		del.Header = h.Clone()
		if r, err := c.Do(del); err == nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
	}
	return d, nil
}

// serverTiming returns the dur of metric name in a Server-Timing value.
func serverTiming(v, name string) time.Duration {
	for _, m := range strings.Split(v, ",") {
		parts := strings.Split(strings.TrimSpace(m), ";")
		if parts[0] != name {
			continue
		}
		for _, p := range parts[1:] {
			if ms, ok := strings.CutPrefix(strings.TrimSpace(p), "dur="); ok {
				f, _ := strconv.ParseFloat(ms, 64)
				return time.Duration(f * float64(time.Millisecond))
			}
		}
	}
	return 0
}

func fmtMs(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond))
}
