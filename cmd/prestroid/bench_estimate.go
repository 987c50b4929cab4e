package main

// prestroid bench estimate: what the estimating proxy adds to a query's
// submission on a real Trino, side by side in one run (issue "Cost-aware
// proxy", benchmark): for every TPC-H/TPC-DS workload query, interleaved,
//   - EXPLAIN: the proxy's own EXPLAIN request (same client, same user), direct;
//   - direct:  POST /v1/statement to Trino until the first page;
//   - miss:    the same POST through the estimating proxy, estimate cache
//              missed (a user not seen before: the user is part of the key);
//   - hit:     the same POST through the proxy, estimate cache hit.
// Every query is cancelled right after its first page (only submission is
// timed). Targets: miss − direct ≤ EXPLAIN + 2 ms; hit − direct ≤ 1 ms.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/proxy"
)

func init() {
	registerBench("estimate", "end-to-end added latency of the estimating proxy (EXPLAIN + estimate + forwarding) vs direct, cache miss and hit", benchEstimate)
}

func benchEstimate(args []string) int {
	fs := flag.NewFlagSet("bench estimate", flag.ContinueOnError)
	trino := fs.String("trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	workloads := fs.String("workloads", "../shared/workloads", "directory with tpcds/*.sql and tpch/*.sql")
	scale := fs.String("scale", "tiny", "schema the templates are filled with")
	rounds := fs.Int("rounds", 2, "passes over the workload")
	model := fs.String("model", "", "model bundle directory (default: the embedded model)")
	ortLib := fs.String("ort-lib", "", "ONNX Runtime library (default: the one `make ort` installs)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := runBenchEstimate(*trino, *workloads, *scale, *rounds, *model, *ortLib); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench estimate:", err)
		return 1
	}
	return 0
}

func runBenchEstimate(trino, workloads, scale string, rounds int, model, ortLib string) error {
	ts, err := collector.LoadTemplates(workloads)
	if err != nil {
		return err
	}
	cfg, err := config.Load("")
	if err != nil {
		return err
	}
	cfg.SetUpstreams([]string{trino})
	cfg.Estimator.Model, cfg.Estimator.ORTLib = model, ortLib
	cfg.Routing.EstimateTimeout = config.Duration(time.Minute)
	cfg.Routing.MonitorInterval = config.Duration(-1)
	cfg.FillDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	signer, err := proxy.NewSigner(nil)
	if err != nil {
		return err
	}
	o := proxyOptions(cfg, signer, quiet)
	if err := wireEstimator(cfg, &o, quiet); err != nil {
		return err
	}
	est, ok := o.Estimator.(estimatorAdapter)
	if !ok {
		return fmt.Errorf("no estimator: the model or the ONNX Runtime library could not be loaded (see prestroid serve's log)")
	}
	srv, err := proxy.New(o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go srv.Serve(ln)
	defer srv.Shutdown(context.Background())
	proxyURL := "http://" + ln.Addr().String()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, DisableCompression: true}}
	explain := &plan.ExplainClient{HTTP: client}
	// proxyExplain and proxyDecide are the proxy's own EXPLAIN and decision
	// times for the miss (its Server-Timing header): the overhead beyond
	// EXPLAIN is miss − direct − proxyExplain, free of EXPLAIN's variance.
	type sample struct{ explain, direct, miss, hit, featurize, proxyExplain, proxyDecide time.Duration }
	var samples []sample
	var failed []string
	fmt.Printf("Trino %s, %d templates at %s, %d rounds; per query: EXPLAIN, direct POST, proxied POST (estimate cache miss), proxied POST (hit)\n",
		trino, len(ts), scale, rounds)
	for r := 0; r < rounds; r++ {
		for i, t := range ts {
			it := collector.TemplateVariant(t, scale, 0, 1, 0, nil)
			h := http.Header{}
			h.Set("X-Trino-User", fmt.Sprintf("bench-%d-%d", r, i))
			h.Set("X-Trino-Catalog", it.Catalog)
			h.Set("X-Trino-Schema", it.Schema)
			var s sample
			t0 := time.Now()
			res, err := explain.Explain(context.Background(), trino, it.SQL, h)
			s.explain = time.Since(t0)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: EXPLAIN: %v", t.Name, err))
				continue
			}
			if s.direct, err = submitAndCancel(client, trino, it.SQL, h, nil); err == nil {
				var hdr http.Header
				if s.miss, err = submitAndCancel(client, proxyURL, it.SQL, h, &hdr); err == nil {
					if !strings.HasPrefix(hdr.Get("X-Prestroid-Decision"), "estimated") {
						err = fmt.Errorf("not estimated: %q", hdr.Get("X-Prestroid-Decision"))
					}
					s.proxyExplain = serverTiming(hdr.Get("Server-Timing"), "explain")
					s.proxyDecide = serverTiming(hdr.Get("Server-Timing"), "prestroid")
				}
				if err == nil {
					s.hit, err = submitAndCancel(client, proxyURL, it.SQL, h, &hdr)
				}
			}
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", t.Name, err))
				continue
			}
			// Featurization + inference alone, on the plan the EXPLAIN returned.
			if e, err := est.svc.EstimatePlan(context.Background(), res.PlanJSON); err == nil {
				s.featurize = time.Duration(e.FeaturizeMicros+e.InferMicros) * time.Microsecond
			}
			samples = append(samples, s)
		}
	}
	for _, f := range failed {
		fmt.Println("  skipped", f)
	}
	if len(samples) == 0 {
		return fmt.Errorf("no query could be measured")
	}
	col := func(f func(sample) time.Duration) []time.Duration {
		out := make([]time.Duration, len(samples))
		for i, s := range samples {
			out[i] = f(s)
		}
		return out
	}
	fmt.Printf("%d queries measured\n", len(samples))
	line := func(name string, d []time.Duration) {
		fmt.Printf("  %-40s p50 %9s  p90 %9s  p99 %9s\n", name, fmtMs(pct(d, 50)), fmtMs(pct(d, 90)), fmtMs(pct(d, 99)))
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
	fmt.Printf("  queries within EXPLAIN + 2 ms: %d of %d\n", within, len(over))
	return nil
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
