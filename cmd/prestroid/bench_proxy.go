package main

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
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/proxy"
)

func init() {
	registerBench("proxy", "added latency and throughput of the proxy, direct vs proxied", benchProxy)
}

// benchProxy measures what the proxy adds, side by side in one run on
// loopback: (a) whole small queries against a real Trino, direct vs through
// the proxy, interleaved; (b) single protocol requests against a minimal
// stub upstream, which isolates the proxy's own cost.
func benchProxy(args []string) int {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	trino := fs.String("trino", "", "real Trino URL for part (a); empty skips it")
	queries := fs.Int("queries", 200, "queries per path in part (a)")
	requests := fs.Int("requests", 20000, "requests per path in part (b)")
	conc := fs.Int("concurrency", 8, "concurrent clients for the throughput runs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}}

	if *trino != "" {
		p, stop, err := startBenchProxy(*trino, quiet)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		fmt.Printf("(a) real Trino %s, query \"SELECT 1\" (POST + polls), %d queries per path, interleaved\n", *trino, *queries)
		var d, pr []time.Duration
		for i := 0; i < *queries; i++ {
			for _, side := range []struct {
				base string
				out  *[]time.Duration
			}{{*trino, &d}, {p, &pr}} {
				t0 := time.Now()
				if err := runQuery(client, side.base, "SELECT 1"); err != nil {
					fmt.Fprintln(os.Stderr, "bench:", err)
					return 1
				}
				*side.out = append(*side.out, time.Since(t0))
			}
		}
		report("direct", d)
		report("proxy ", pr)
		fmt.Printf("    added per query: p50 %s, p99 %s\n", fmtDur(pct(pr, 50)-pct(d, 50)), fmtDur(pct(pr, 99)-pct(d, 99)))
		stop()
	}

	stub, stopStub, err := startStub()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer stopStub()
	p, stop, err := startBenchProxy(stub, quiet)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer stop()
	// A routed nextUri as the proxy hands it out: the poll path.
	var first struct{ NextURI string }
	resp, err := client.Post(p+"/v1/statement", "text/plain", strings.NewReader("SELECT 1"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	json.NewDecoder(resp.Body).Decode(&first)
	resp.Body.Close()
	directPoll := stub + "/v1/statement/executing/bench/yslug/1"

	fmt.Printf("(b) stub upstream (1 KiB QueryResults page), %d sequential requests per path, interleaved\n", *requests)
	var d, pr []time.Duration
	for i := 0; i < *requests; i++ {
		for _, side := range []struct {
			url string
			out *[]time.Duration
		}{{directPoll, &d}, {first.NextURI, &pr}} {
			t0 := time.Now()
			if err := get(client, side.url); err != nil {
				fmt.Fprintln(os.Stderr, "bench:", err)
				return 1
			}
			*side.out = append(*side.out, time.Since(t0))
		}
	}
	report("direct", d)
	report("proxy ", pr)
	fmt.Printf("    added per request: p50 %s, p99 %s (targets: p50 <= 300us, p99 <= 1ms)\n", fmtDur(pct(pr, 50)-pct(d, 50)), fmtDur(pct(pr, 99)-pct(d, 99)))
	rd := throughput(client, directPoll, *conc, 3*time.Second)
	rp := throughput(client, first.NextURI, *conc, 3*time.Second)
	fmt.Printf("    throughput, %d clients: direct %.0f req/s, proxy %.0f req/s (ratio %.2f)\n", *conc, rd, rp, rp/rd)
	return 0
}

func startBenchProxy(upstream string, log *slog.Logger) (string, func(), error) {
	s, err := proxy.New(proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "default", URL: upstream}}, Logger: log})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go s.Serve(ln)
	return "http://" + ln.Addr().String(), func() { s.Shutdown(context.Background()) }, nil
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

func report(name string, d []time.Duration) {
	fmt.Printf("    %s p50 %s  p99 %s\n", name, fmtDur(pct(d, 50)), fmtDur(pct(d, 99)))
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.0fus", float64(d)/float64(time.Microsecond))
}
