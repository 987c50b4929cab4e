// Package bench holds Prestroid's benchmark harnesses: what the proxy adds
// (Proxy), what the estimating proxy adds on a real Trino (Estimate) and
// the training efficiency of sub-trees against full trees (Train).
// `prestroid bench NAME` parses the flags and calls them; results go to
// the writer given, errors are returned.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy"
)

// ProxyOptions configure Proxy; `prestroid bench proxy` documents the
// defaults of its flags.
type ProxyOptions struct {
	// Trino is a real Trino URL for part (a); empty skips it.
	Trino string
	// Queries per path in part (a); Requests per path in part (b).
	Queries, Requests int
	// Concurrency is the number of clients of the throughput runs.
	Concurrency int
}

// Proxy measures what the proxy adds, side by side in one run on
// loopback: (a) whole small queries against a real Trino, direct vs through
// the proxy, interleaved; (b) single protocol requests against a minimal
// stub upstream, which isolates the proxy's own cost.
func Proxy(w io.Writer, o ProxyOptions) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}

	if o.Trino != "" {
		if err := realTrino(w, o, client, quiet); err != nil {
			return err
		}
	}

	stub, stopStub, err := startStub()
	if err != nil {
		return err
	}
	defer stopStub()
	p, stop, err := startBenchProxy(stub, quiet)
	if err != nil {
		return err
	}
	defer stop()
	// A routed nextUri as the proxy hands it out: the poll path.
	var first struct{ NextURI string }
	resp, err := client.Post(p+"/v1/statement", "text/plain", strings.NewReader("SELECT 1"))
	if err != nil {
		return err
	}
	json.NewDecoder(resp.Body).Decode(&first)
	resp.Body.Close()
	directPoll := stub + "/v1/statement/executing/bench/yslug/1"

	fmt.Fprintf(w, "(b) stub upstream (1 KiB QueryResults page), %d sequential requests per path, interleaved\n", o.Requests)
	var d, pr []time.Duration
	for i := 0; i < o.Requests; i++ {
		for _, side := range []struct {
			url string
			out *[]time.Duration
		}{{directPoll, &d}, {first.NextURI, &pr}} {
			t0 := time.Now()
			if err := get(client, side.url); err != nil {
				return err
			}
			*side.out = append(*side.out, time.Since(t0))
		}
	}
	report(w, "direct", d)
	report(w, "proxy ", pr)
	fmt.Fprintf(w, "    added per request: p50 %s, p99 %s (targets: p50 <= 300us, p99 <= 1ms)\n", fmtDur(pct(pr, 50)-pct(d, 50)), fmtDur(pct(pr, 99)-pct(d, 99)))
	rd := throughput(client, directPoll, o.Concurrency, 3*time.Second)
	rp := throughput(client, first.NextURI, o.Concurrency, 3*time.Second)
	fmt.Fprintf(w, "    throughput, %d clients: direct %.0f req/s, proxy %.0f req/s (ratio %.2f)\n", o.Concurrency, rd, rp, rp/rd)
	return nil
}

// realTrino is part (a): "SELECT 1" against the real Trino, direct vs
// through the proxy, interleaved.
func realTrino(w io.Writer, o ProxyOptions, client *http.Client, quiet *slog.Logger) error {
	p, stop, err := startBenchProxy(o.Trino, quiet)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(w, "(a) real Trino %s, query \"SELECT 1\" (POST + polls), %d queries per path, interleaved\n", o.Trino, o.Queries)
	var d, pr []time.Duration
	for i := 0; i < o.Queries; i++ {
		for _, side := range []struct {
			base string
			out  *[]time.Duration
		}{{o.Trino, &d}, {p, &pr}} {
			t0 := time.Now()
			if err := runQuery(client, side.base, "SELECT 1"); err != nil {
				return err
			}
			*side.out = append(*side.out, time.Since(t0))
		}
	}
	report(w, "direct", d)
	report(w, "proxy ", pr)
	fmt.Fprintf(w, "    added per query: p50 %s, p99 %s\n", fmtDur(pct(pr, 50)-pct(d, 50)), fmtDur(pct(pr, 99)-pct(d, 99)))
	return nil
}

func startBenchProxy(upstream string, log *slog.Logger) (string, func(), error) {
	o := proxy.Defaults()
	o.Clusters, o.Logger = []proxy.ClusterConfig{{Name: "default", URL: upstream}}, log
	return startProxy(o)
}

// startStub serves a fixed executing-phase page whose nextUri points back at
// itself, like a coordinator streaming a query that never ends.
func startStub() (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	base := "http://" + ln.Addr().String()
	page := []byte(`{"id":"bench","infoUri":"` + base + `/ui/query.html?bench","nextUri":"` + base +
		`/v1/statement/executing/bench/yslug/1","columns":[{"name":"_col0","type":"integer","typeSignature":{"rawType":"integer","arguments":[]}}],` +
		`"data":[` + strings.TrimSuffix(strings.Repeat(`[1234567],`, 80), ",") + `],` +
		`"stats":{"state":"RUNNING","queued":false,"scheduled":true,"nodes":1,"totalSplits":1,"queuedSplits":0,"runningSplits":1,"completedSplits":0,"cpuTimeMillis":1,"wallTimeMillis":1,"queuedTimeMillis":0,"elapsedTimeMillis":3,"processedRows":80,"processedBytes":0,"peakMemoryBytes":0,"spilledBytes":0},"warnings":[]}`)
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		ctx.SetContentType("application/json")
		ctx.SetBody(page)
	}}
	go srv.Serve(ln)
	return base, func() { srv.Shutdown() }, nil
}

func runQuery(c *http.Client, base, sql string) error {
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(sql))
	req.Header.Set("X-Trino-User", "bench")
	next := ""
	for {
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		var p struct {
			NextURI string
			Error   *struct{ Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if p.Error != nil {
			return fmt.Errorf("query failed: %s", p.Error.Message)
		}
		if p.NextURI == "" {
			return nil
		}
		next = p.NextURI
		req, _ = http.NewRequest("GET", next, nil)
		req.Header.Set("X-Trino-User", "bench")
	}
}

func get(c *http.Client, url string) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return err
}

func throughput(c *http.Client, url string, conc int, d time.Duration) float64 {
	var n atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if get(c, url) == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / d.Seconds()
}

func pct(d []time.Duration, p float64) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p / 100)
	return s[i]
}

func report(w io.Writer, name string, d []time.Duration) {
	fmt.Fprintf(w, "    %s p50 %s  p99 %s\n", name, fmtDur(pct(d, 50)), fmtDur(pct(d, 99)))
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.0fus", float64(d)/float64(time.Microsecond))
}
