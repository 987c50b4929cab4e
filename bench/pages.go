package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prestroid/prestroid/proxy"
)

// PagesOptions configure Pages; `prestroid bench pages` documents the
// defaults of its flags.
type PagesOptions struct {
	// Trino is the real Trino URL the query runs on, direct and proxied.
	Trino string
	// SQL is the large query; Runs is how many times each path runs it.
	SQL  string
	Runs int
	// Clients are the client kinds: "identity" (no Accept-Encoding) and
	// "gzip".
	Clients []string
	// Proxy, when set, names running proxies in front of Trino to measure
	// instead of the in-process ones: URL, or NAME=URL,NAME=URL,...
	Proxy string
}

// Pages measures the time to the last row of a large result, direct and
// through the proxy, side by side: each run is one query per path, the
// paths of a client kind back to back in an order that rotates from run
// to run, so a ratio compares queries run within seconds of each other.
// The in-process proxies are two, with default settings: one with reading
// ahead off (page_read_ahead_bytes: -1, how pages were relayed before it)
// and one with it on. Two clients: one that does not accept gzip
// (Accept-Encoding absent, as the CLI with compression off and many BI
// drivers) and one that does (Go's transparent gzip, as trino-go-client).
// Each client parses every page's JSON and splits its rows, as a real
// client must.
func Pages(w io.Writer, o PagesOptions) error {
	type path struct{ name, base string }
	paths := []path{{"direct", o.Trino}}
	if o.Proxy != "" {
		for _, p := range strings.Split(o.Proxy, ",") {
			name, url, ok := strings.Cut(p, "=")
			if !ok {
				name, url = "proxy", p
			}
			paths = append(paths, path{name, url})
		}
	} else {
		for _, pp := range []struct {
			name  string
			ahead int
		}{{"no-read-ahead", -1}, {"proxy", 0}} {
			opts := proxy.Defaults()
			opts.Clusters = []proxy.ClusterConfig{{Name: "default", URL: o.Trino}}
			opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			if pp.ahead != 0 {
				opts.PageReadAheadBytes = pp.ahead
			}
			base, stop, err := startProxy(opts)
			if err != nil {
				return err
			}
			defer stop()
			paths = append(paths, path{pp.name, base})
		}
	}
	fmt.Fprintf(w, "large result %q on %s, %d runs per path, paths interleaved (ratios: time to the last row / direct's in the same run)\n", o.SQL, o.Trino, o.Runs)
	res := map[string]map[string][]float64{} // client -> path -> ratios
	for i := 0; i < o.Runs; i++ {
		for _, kind := range o.Clients {
			c := &http.Client{Transport: &http.Transport{DisableCompression: kind != "gzip"}}
			took := make([]time.Duration, len(paths))
			npages := make([]int, len(paths))
			for k := range paths {
				j := (k + i) % len(paths)
				t0 := time.Now()
				rows, pages, err := drain(c, paths[j].base, o.SQL)
				if err != nil {
					return fmt.Errorf("%s client via %s: %w", kind, paths[j].name, err)
				}
				took[j], npages[j] = time.Since(t0), pages
				if i == 0 && j == 0 {
					fmt.Fprintf(w, "    %s client: %d rows\n", kind, rows)
				}
			}
			if res[kind] == nil {
				res[kind] = map[string][]float64{}
			}
			fmt.Fprintf(w, "    run %d %-8s direct %6.0f ms %3d pages", i+1, kind, ms(took[0]), npages[0])
			for j := 1; j < len(paths); j++ {
				r := float64(took[j]) / float64(took[0])
				res[kind][paths[j].name] = append(res[kind][paths[j].name], r)
				fmt.Fprintf(w, "  %s %6.0f ms %3d pages (%.2f)", paths[j].name, ms(took[j]), npages[j], r)
			}
			fmt.Fprintln(w)
		}
	}
	for _, kind := range o.Clients {
		for _, p := range paths[1:] {
			rs := append([]float64(nil), res[kind][p.name]...)
			sort.Float64s(rs)
			fmt.Fprintf(w, "%s client, %s/direct: median %.2f (min %.2f, max %.2f) %v\n", kind, p.name, median(rs), rs[0], rs[len(rs)-1], fmtRatios(res[kind][p.name]))
		}
	}
	return nil
}

func fmtRatios(rs []float64) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%.2f", r)
	}
	return "[" + b.String() + "]"
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func startProxy(o proxy.Options) (string, func(), error) {
	s, err := proxy.New(o)
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

// drain runs sql at base and reads every page to the last, parsing each
// and splitting its rows; it returns the rows and pages read.
func drain(c *http.Client, base, sql string) (rows, pages int, err error) {
	req, _ := http.NewRequest("POST", base+"/v1/statement", strings.NewReader(sql))
	for {
		req.Header.Set("X-Trino-User", "bench")
		resp, err := c.Do(req)
		if err != nil {
			return rows, pages, err
		}
		var p struct {
			NextURI string
			Data    []json.RawMessage
			Error   *struct{ Message string }
		}
		err = json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if err != nil {
			return rows, pages, err
		}
		if p.Error != nil {
			return rows, pages, fmt.Errorf("query failed: %s", p.Error.Message)
		}
		pages++
		rows += len(p.Data)
		if p.NextURI == "" {
			return rows, pages, nil
		}
		req, _ = http.NewRequest("GET", p.NextURI, nil)
	}
}
