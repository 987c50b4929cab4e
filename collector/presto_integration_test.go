package collector_test

// Integration test against a real PrestoDB, named by PRESTROID_PRESTO_URL
// (skipped when unset; failing, not skipping, when set and PrestoDB
// misbehaves). A few TPC-H queries at tiny: seconds.

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/dialect"
)

func prestoURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("PRESTROID_PRESTO_URL")
	if u == "" {
		t.Skip("PRESTROID_PRESTO_URL not set")
	}
	return strings.TrimRight(u, "/")
}

// prestoTransport renames the EXPLAIN client's Trino headers for PrestoDB,
// as the collect command wires it.
type prestoTransport struct{}

func (prestoTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	out := req.Clone(req.Context())
	out.Header = dialect.For(out.Header, dialect.Presto)
	return http.DefaultTransport.RoundTrip(out)
}

// prestoPlanFunc keeps PrestoDB's EXPLAIN JSON as it came.
func prestoPlanFunc() collector.PlanFunc {
	c := &plan.ExplainClient{HTTP: &http.Client{Timeout: time.Minute, Transport: prestoTransport{}}}
	return func(ctx context.Context, server string, it *collector.Item, h http.Header) (*collector.Plan, error) {
		if h.Get("X-Presto-User") == "" {
			return nil, &plan.TrinoError{ErrorName: "TEST", Message: "the plan function got no X-Presto-User"}
		}
		res, err := c.Explain(ctx, server, it.SQL, dialect.Canonical(h))
		if err != nil {
			return nil, err
		}
		return &collector.Plan{JSON: res.PlanJSON, QueryID: res.QueryID}, nil
	}
}

func TestShortCollectionOnPresto(t *testing.T) {
	server := prestoURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ts := workloads(t)
	var keep []collector.Template
	for _, tm := range ts {
		if tm.Name == "tpch/q06" || tm.Name == "tpch/q14" {
			keep = append(keep, tm)
		}
	}
	// PrestoDB plans from the committed cache, as the command does.
	dom, err := collector.LoadDomains("../data/domains.json")
	if err != nil {
		t.Fatal(err)
	}
	items := collector.Generate(collector.GenConfig{Seed: 3, Scales: []string{"tiny"}, Variants: 2, SessionShare: 1}, keep, dom)
	if len(items) != 4 {
		t.Fatalf("planned %d items, want 4", len(items))
	}
	path := filepath.Join(t.TempDir(), "presto.jsonl.gz")
	run := func(items []collector.Item) collector.Summary {
		w, err := collector.OpenWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r := &collector.Runner{Server: server, User: "prestroid-test", Timeout: time.Minute, Writer: w, Plan: prestoPlanFunc()}
		sum, err := r.Run(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if s := run(items[:3]); s.Done != 3 || s.Skipped != 0 {
		t.Fatalf("first run: %+v", s)
	}
	if s := run(items); s.Done != 1 || s.Skipped != 3 {
		t.Fatalf("resumed run: %+v, want 1 done and 3 skipped", s)
	}
	recs, err := collector.ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	for _, r := range recs {
		b, _ := json.Marshal(r)
		if r.Status != collector.StatusFinished || r.QueryID == "" || r.Stats == nil || r.Stats.CPUMillis <= 0 || r.ResultRows != 1 {
			t.Fatalf("record not complete: %s", b)
		}
		if r.Engine != "presto" || !strings.HasPrefix(r.EngineVersion, "0.") || r.TrinoVersion != "" {
			t.Fatalf("%s: engine %q version %q trino_version %q", r.Key, r.Engine, r.EngineVersion, r.TrinoVersion)
		}
		// PrestoDB's distributed plan: fragment id → {"plan": root}.
		var frags map[string]struct {
			Plan struct{ Name string } `json:"plan"`
		}
		if r.Plan == nil || json.Unmarshal(r.Plan.JSON, &frags) != nil || frags["0"].Plan.Name == "" {
			t.Fatalf("%s: plan %s", r.Key, head(string(b), 500))
		}
		st := r.Stats
		if st.ElapsedMillis <= 0 || st.AnalysisMillis < 0 || st.PlanningMillis < 0 || st.PlanningCPUMillis != -1 ||
			st.ProcessedRows <= 0 || st.Splits <= 0 || st.Nodes != 1 || st.PhysicalInputBytes < 0 {
			t.Fatalf("%s: stats %+v", r.Key, st)
		}
		if r.Warmth == nil || r.Warmth.Node == "" || r.Load == nil {
			t.Fatalf("%s: warmth %+v, load %+v", r.Key, r.Warmth, r.Load)
		}
		// The session reached PrestoDB (as X-Presto-Session).
		if got := prestoSession(t, server, r.QueryID); !maps.Equal(got, r.SessionProperties) && len(got)+len(r.SessionProperties) > 0 {
			t.Fatalf("%s: PrestoDB ran %s with session %v, want %v", r.Key, r.QueryID, got, r.SessionProperties)
		}
	}
}

// prestoSession is a query's session properties as PrestoDB saw them.
func prestoSession(t *testing.T, server, id string) map[string]string {
	t.Helper()
	req, _ := http.NewRequest("GET", server+"/v1/query/"+id, nil)
	req.Header.Set("X-Presto-User", "prestroid-test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var qi struct {
		Session struct {
			SystemProperties map[string]string `json:"systemProperties"`
		} `json:"session"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&qi); err != nil {
		t.Fatalf("/v1/query/%s: %v", id, err)
	}
	return qi.Session.SystemProperties
}
