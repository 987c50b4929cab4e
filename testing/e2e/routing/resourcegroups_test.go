package routing

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prestroid/prestroid/testing/e2e"
)

// Resource groups that select on the estimate the proxy sends
// (X-Trino-Resource-Estimate): Trino's file-based resource group manager,
// whose selectors' selectorResourceEstimate ranges (executionTime, cpuTime,
// peakMemory, each {min, max}, both ends inclusive, a range on an estimate
// the query lacks never matching: Trino 476's
// io.trino.plugin.resourcegroups.SelectorResourceEstimate) pick the group.
// The "large" cluster of TestCostRoutingOnTwoRealClusters runs with them
// (trino.sh's TRINO_RESOURCE_GROUPS), and each query's resource_group_id in
// system.runtime.queries must be exactly the group the estimate Trino
// recorded selects (rgSelect, the same first-match rule in Go).

// rgSelector is one selector: ranges on the three estimates (a zero range
// end is open) and the group. Memory in bytes, times in seconds.
type rgSelector struct {
	group                      string
	minMem, minTime            float64
	minCPU, maxCPU             float64
	hasMem, hasTime, hasCPUMax bool
}

// rgSelectors: a memory selector and a time selector first (only a query
// predicted at 64 MB or more, or 10 s or more, matches them: light
// queries fall through to the CPU bands), then half-decade CPU bands from
// 1 ms to 300 s and above, then the catch-all for queries without an
// estimate.
func rgSelectors() []rgSelector {
	s := []rgSelector{
		{group: "global.mem_64mb_up", minMem: 64 << 20, hasMem: true},
		{group: "global.time_10s_up", minTime: 10, hasTime: true},
	}
	bounds := []float64{0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300}
	prev := 0.0
	for i, b := range bounds {
		s = append(s, rgSelector{group: fmt.Sprintf("global.cpu_%02d", i), minCPU: prev, maxCPU: b, hasCPUMax: true})
		prev = b
	}
	return append(s, rgSelector{group: fmt.Sprintf("global.cpu_%02d", len(bounds)), minCPU: prev}, rgSelector{group: "global.other"})
}

// trinoMillis is seconds in the duration syntax of a selector bound.
func trinoMillis(sec float64) string { return fmt.Sprintf("%.0fms", sec*1000) }

// resourceGroupsJSON is the file of rgSelectors: one root group with
// generous limits and a subgroup per selector.
func resourceGroupsJSON(t *testing.T) string {
	t.Helper()
	type group = map[string]any
	var subs []group
	var sels []group
	for _, s := range rgSelectors() {
		name := strings.TrimPrefix(s.group, "global.")
		subs = append(subs, group{"name": name, "softMemoryLimit": "80%", "hardConcurrencyLimit": 50, "maxQueued": 500})
		sel := group{"group": s.group}
		est := group{}
		switch {
		case s.hasMem:
			est["peakMemory"] = group{"min": fmt.Sprintf("%.0fB", s.minMem)}
		case s.hasTime:
			est["executionTime"] = group{"min": trinoMillis(s.minTime)}
		case s.group != "global.other":
			r := group{"min": trinoMillis(s.minCPU)}
			if s.hasCPUMax {
				r["max"] = trinoMillis(s.maxCPU)
			}
			est["cpuTime"] = r
		}
		if len(est) > 0 {
			sel["selectorResourceEstimate"] = est
		}
		sels = append(sels, sel)
	}
	b, err := json.MarshalIndent(group{
		"rootGroups": []group{{"name": "global", "softMemoryLimit": "80%", "hardConcurrencyLimit": 100, "maxQueued": 1000, "subGroups": subs}},
		"selectors":  sels,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "resource-groups.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// recorded is the estimate Trino parsed from a query's
// X-Trino-Resource-Estimate (its query info's session.resourceEstimates):
// seconds and bytes, nil where the header had none.
type recorded struct {
	ExecutionTime   *float64 `json:"executionTime"`
	CPUTime         *float64 `json:"cpuTime"`
	PeakMemoryBytes *float64 `json:"peakMemoryBytes"`
}

func (r recorded) String() string {
	f := func(p *float64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("executionTime=%s cpuTime=%s peakMemoryBytes=%s", f(r.ExecutionTime), f(r.CPUTime), f(r.PeakMemoryBytes))
}

// rgSelect is the group rgSelectors pick for r, as Trino picks it: the
// first selector all of whose ranges hold r's value (inclusive; a range on
// a value r lacks does not match). Trino compares durations in whole
// milliseconds.
func rgSelect(r recorded) string {
	ms := func(p *float64) float64 { return math.Floor(*p*1000 + 1e-6) }
	for _, s := range rgSelectors() {
		switch {
		case s.hasMem:
			if r.PeakMemoryBytes != nil && *r.PeakMemoryBytes >= s.minMem {
				return s.group
			}
		case s.hasTime:
			if r.ExecutionTime != nil && ms(r.ExecutionTime) >= s.minTime*1000 {
				return s.group
			}
		case s.group == "global.other":
			return s.group
		default:
			if r.CPUTime != nil && ms(r.CPUTime) >= math.Round(s.minCPU*1000) && (!s.hasCPUMax || ms(r.CPUTime) <= math.Round(s.maxCPU*1000)) {
				return s.group
			}
		}
	}
	return ""
}

// recordedEstimate reads what Trino at base recorded for query id.
func recordedEstimate(t *testing.T, base, id string) recorded {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/v1/query/"+id, nil)
	req.Header.Set("X-Trino-User", "e2e")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Session struct {
			ResourceEstimates recorded `json:"resourceEstimates"`
		} `json:"session"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatalf("query info %s: %v", id, err)
	}
	return info.Session.ResourceEstimates
}

// resourceGroupOf is the resource group Trino at base put query id in.
func resourceGroupOf(t *testing.T, base, id string) string {
	t.Helper()
	var group string
	if err := e2e.OpenDB(t, base, "").QueryRow("SELECT array_join(resource_group_id, '.') FROM system.runtime.queries WHERE query_id = '" +
		id + "'").Scan(&group); err != nil {
		t.Fatalf("resource group of %s: %v", id, err)
	}
	return group
}

// checkResourceGroup asserts that query id on base is in the group its
// recorded estimate selects, and that the estimate Trino recorded carries
// the targets the proxy's X-Prestroid-Estimate shows (est; "" for a query
// the proxy did not estimate). It returns the group.
func checkResourceGroup(t *testing.T, base, id, est string) string {
	t.Helper()
	r := recordedEstimate(t, base, id)
	group, want := resourceGroupOf(t, base, id), rgSelect(r)
	t.Logf("%s: X-Prestroid-Estimate %q, recorded %s, resource group %s", id, est, r, group)
	if group != want {
		t.Errorf("query %s in resource group %q, want %q (its recorded estimate: %s)", id, group, want, r)
	}
	if (est != "") != (r.CPUTime != nil) || strings.Contains(est, "; mem=") != (r.PeakMemoryBytes != nil) ||
		strings.Contains(est, "; elapsed=") != (r.ExecutionTime != nil) {
		t.Errorf("Trino recorded %s, the proxy estimated %q", r, est)
	}
	return group
}

// queryIDOf is the id of the one query on base whose text holds marker
// (not the estimator's EXPLAIN of it, which runs there too when base is
// the planning cluster).
func queryIDOf(t *testing.T, base, marker string) string {
	t.Helper()
	var id string
	if err := e2e.OpenDB(t, base, "").QueryRow("SELECT query_id FROM system.runtime.queries WHERE query LIKE '%" + marker +
		"%' AND query NOT LIKE '%system.runtime%' AND NOT starts_with(upper(ltrim(query)), 'EXPLAIN')").Scan(&id); err != nil {
		t.Fatalf("query %s on %s: %v", marker, base, err)
	}
	return id
}
