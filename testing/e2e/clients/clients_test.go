// Package clients runs every workload query with each real client (the Go
// client, the Trino CLI, the Python client) directly and through the proxy
// and compares complete result sets. See package e2e.
package clients

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

// The workloads at tiny, run by each real client directly and through the
// proxy: complete result sets must be equal. A query whose result differs
// between two direct runs (ties under ORDER BY ... LIMIT) cannot be judged
// and is reported, not failed; all others must match exactly.
//
// The three tests run one after the other, not in parallel: each keeps
// Trino's two cores busy on its own (direct and proxied runs at once), and
// three at once measured slower in total than one at a time (contention,
// not work: make test runs this package beside the others instead).

// workloads returns every workload query at tiny, reading copies of the TPC
// tables in Trino's memory catalog: the clients are under test, not the
// connectors' data generation (see e2e.MemoryCopies for the measurement).
func workloads(t *testing.T, direct string) []e2e.Workload {
	return e2e.LoadWorkloads(t, e2e.MemoryCopies(t, direct, "tiny"), "0.01")
}

func TestGoClientWorkloadsMatchDirect(t *testing.T) {
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	dbDirect, dbProxy := e2e.OpenDB(t, direct, ""), e2e.OpenDB(t, proxied, "")
	// Trino's CPU is shared with the packages make test runs beside this
	// one: the budget leaves the package room within go test's -timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	compared := 0
	for _, w := range workloads(t, direct) {
		// Both paths at once: the suite's time is bounded by Trino's CPU.
		var want, got []string
		var errD, errP error
		e2e.Both(func() { want, errD = e2e.RowsAsStrings(ctx, dbDirect, w.SQL) },
			func() { got, errP = e2e.RowsAsStrings(ctx, dbProxy, w.SQL) })
		if ctx.Err() != nil {
			t.Fatalf("out of time after %d queries: %v", compared, ctx.Err())
		}
		if errD != nil || errP != nil {
			if e2e.StripQueryID(errD) != e2e.StripQueryID(errP) {
				t.Errorf("%s: errors differ: direct %v, proxy %v", w.Name, errD, errP)
			} else {
				t.Logf("%s: fails the same way directly and through the proxy: %v", w.Name, errD)
			}
			continue
		}
		if !reflect.DeepEqual(want, got) {
			// As in compareWorkloads: rerun both ways; a run-to-run varying
			// query matches on some run, a result-changing proxy never.
			matched, varies := false, false
			for i := 0; i < 2 && !matched; i++ {
				var d2, p2 []string
				e2e.Both(func() { d2, _ = e2e.RowsAsStrings(ctx, dbDirect, w.SQL) }, func() { p2, _ = e2e.RowsAsStrings(ctx, dbProxy, w.SQL) })
				varies = varies || !reflect.DeepEqual(d2, want)
				matched = reflect.DeepEqual(p2, want) || reflect.DeepEqual(p2, d2) || reflect.DeepEqual(got, d2)
			}
			switch {
			case matched:
				t.Logf("%s: varies from run to run; the proxy's result matched a direct one", w.Name)
			case varies:
				t.Logf("%s: nondeterministic directly (ties or double sums); not compared", w.Name)
				continue
			default:
				t.Errorf("%s: proxy result differs from direct (%d vs %d rows)", w.Name, len(got)-1, len(want)-1)
				continue
			}
		}
		compared++
	}
	t.Logf("go client: %d workload queries identical through the proxy", compared)
	if compared < 90 {
		t.Errorf("only %d queries compared; expected the whole workload set", compared)
	}
}

func TestCLIWorkloadsMatchDirect(t *testing.T) {
	direct := e2e.TrinoURL(t)
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	proxied := e2e.StartDefaultProxy(t)
	dir := t.TempDir()
	run := func(server string, ws []e2e.Workload) (map[string][]string, error) {
		var script strings.Builder
		for _, w := range ws {
			fmt.Fprintf(&script, "SELECT 'prestroid-boundary %s';\n%s;\n", w.Name, w.SQL)
		}
		f, err := os.CreateTemp(dir, "workloads-*.sql")
		if err != nil {
			return nil, err
		}
		f.WriteString(script.String())
		f.Close()
		cmd := exec.Command("java", "-jar", cli, "--server", server, "--user", "e2e-cli",
			"--output-format", "TSV", "--ignore-errors", "-f", f.Name())
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
			// With --ignore-errors the CLI runs every statement and exits 1
			// when any failed (some TPC-DS queries divide by zero at tiny,
			// on both paths); anything else is a real failure.
			return nil, fmt.Errorf("trino cli against %s: %v\n%s", server, err, stderr.String())
		}
		res := splitSections(string(out))
		if len(res) != len(ws) {
			return nil, fmt.Errorf("trino cli against %s: %d sections for %d queries", server, len(res), len(ws))
		}
		return res, nil
	}
	compareWorkloads(t, "trino cli", workloads(t, direct), func(server string, ws []e2e.Workload) (map[string]string, error) {
		res, err := run(server, ws)
		out := map[string]string{}
		for k, v := range res {
			out[k] = strings.Join(v, "\n")
		}
		return out, err
	}, direct, proxied)
}

// compareWorkloads runs ws through run against direct and proxied at once
// and compares per query; a mismatch is rerun directly to tell a proxy
// difference from a query whose result varies run to run.
func compareWorkloads(t *testing.T, client string, ws []e2e.Workload, run func(server string, ws []e2e.Workload) (map[string]string, error), direct, proxied string) {
	t.Helper()
	var want, got map[string]string
	var errD, errP error
	e2e.Both(func() { want, errD = run(direct, ws) }, func() { got, errP = run(proxied, ws) })
	if errD != nil || errP != nil {
		t.Fatal(errD, errP)
	}
	var differ []e2e.Workload
	for _, w := range ws {
		if want[w.Name] != got[w.Name] {
			differ = append(differ, w)
		}
	}
	if len(differ) > 0 {
		// Rerun the differing queries both ways, twice: a query whose
		// result varies from run to run (ties, double sums compared for
		// equality as in tpch q15) matches on some run; a proxy that
		// changed results would never produce the direct answer.
		seenD := map[string]map[string]bool{}
		seenP := map[string]map[string]bool{}
		for _, w := range differ {
			seenD[w.Name] = map[string]bool{want[w.Name]: true}
			seenP[w.Name] = map[string]bool{got[w.Name]: true}
		}
		for i := 0; i < 2; i++ {
			var againD, againP map[string]string
			var errD, errP error
			e2e.Both(func() { againD, errD = run(direct, differ) }, func() { againP, errP = run(proxied, differ) })
			if errD != nil || errP != nil {
				t.Fatal(errD, errP)
			}
			for _, w := range differ {
				seenD[w.Name][againD[w.Name]] = true
				seenP[w.Name][againP[w.Name]] = true
			}
		}
		for _, w := range differ {
			matched := false
			for r := range seenP[w.Name] {
				matched = matched || seenD[w.Name][r]
			}
			switch {
			case matched:
				t.Logf("%s: %s varies from run to run (%d direct results); the proxy's matched a direct one", client, w.Name, len(seenD[w.Name]))
			case len(seenD[w.Name]) > 1:
				t.Logf("%s: %s varies between direct runs (ties or double sums); not compared", client, w.Name)
			default:
				t.Errorf("%s: %s through the proxy differs from direct:\n got %.300q\nwant %.300q", client, w.Name, got[w.Name], want[w.Name])
			}
		}
	}
	t.Logf("%s: %d/%d workload results identical through the proxy", client, len(ws)-len(differ), len(ws))
	if len(ws)-len(differ) < len(ws)*9/10 {
		t.Errorf("%s: fewer than 90%% of the workload compared", client)
	}
}

// splitSections splits CLI output at the boundary rows into sorted lines.
func splitSections(out string) map[string][]string {
	sections := map[string][]string{}
	cur := ""
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "prestroid-boundary ") {
			cur = strings.TrimPrefix(line, "prestroid-boundary ")
			sections[cur] = []string{}
			continue
		}
		if cur != "" && line != "" {
			fields := strings.Split(line, "\t")
			for i := range fields {
				fields[i] = e2e.NormField(fields[i])
			}
			sections[cur] = append(sections[cur], strings.Join(fields, "\t"))
		}
	}
	for k := range sections {
		sort.Strings(sections[k])
	}
	return sections
}

func TestPythonClientWorkloadsMatchDirect(t *testing.T) {
	direct := e2e.TrinoURL(t)
	py := e2e.RequireEnv(t, "PRESTROID_PYTHON")
	proxied := e2e.StartDefaultProxy(t)
	compareWorkloads(t, "python client", workloads(t, direct), func(server string, ws []e2e.Workload) (map[string]string, error) {
		spec, _ := json.Marshal(map[string]any{"server": server, "queries": ws2json(ws)})
		cmd := exec.Command(py, "pyclient.py")
		cmd.Stdin = bytes.NewReader(spec)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("python client against %s: %v\n%s", server, err, stderr.String())
		}
		var res map[string]json.RawMessage
		if err := json.Unmarshal(out, &res); err != nil {
			return nil, err
		}
		if len(res) != len(ws) {
			return nil, fmt.Errorf("python client returned %d results for %d queries", len(res), len(ws))
		}
		m := map[string]string{}
		for k, v := range res {
			m[k] = string(v)
		}
		return m, nil
	}, direct, proxied)
}

func ws2json(ws []e2e.Workload) []map[string]string {
	out := make([]map[string]string, len(ws))
	for i, w := range ws {
		out[i] = map[string]string{"name": w.Name, "sql": w.SQL}
	}
	return out
}
