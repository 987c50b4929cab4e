package collector_test

// Integration tests against a real Trino, named by PRESTROID_TRINO_URL
// (skipped when unset; failing, not skipping, when set and Trino
// misbehaves). They take well under a minute on tiny data.

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	workloadfiles "github.com/prestroid/prestroid/internal/workloads"
	"github.com/trinodb/trino-go-client/trino"
)

func trinoURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("PRESTROID_TRINO_URL")
	if u == "" {
		t.Skip("PRESTROID_TRINO_URL not set")
	}
	return strings.TrimRight(u, "/")
}

func openDB(t *testing.T, server string) *sql.DB {
	t.Helper()
	conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(server, "://", "://prestroid-test@", 1)})
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return db
}

func workloads(t *testing.T) []collector.Template {
	t.Helper()
	d, err := workloadfiles.FromEnv("../../shared/workloads", "/work/shared/workloads")
	if err != nil {
		t.Fatal(err)
	}
	ts, err := collector.LoadTemplates(d)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// planFunc is the production wiring in miniature: the serving EXPLAIN client
// and featurizer.
func planFunc() collector.PlanFunc {
	c := &plan.ExplainClient{HTTP: &http.Client{Timeout: time.Minute}}
	return func(ctx context.Context, server string, it *collector.Item, h http.Header) (*collector.Plan, error) {
		res, err := c.Explain(ctx, server, it.SQL, h)
		if err != nil {
			return nil, err
		}
		p := &collector.Plan{JSON: res.PlanJSON, QueryID: res.QueryID}
		plan, err := plan.Parse(res.PlanJSON)
		if err != nil {
			return nil, err
		}
		root, err := featurize.BuildOTP(plan)
		if err != nil {
			return nil, err
		}
		s := featurize.Stats(root)
		p.OTP = &collector.OTPSummary{Nodes: s.Nodes, MaxDepth: s.MaxDepth, Preds: s.Preds, Tables: s.Tables}
		return p, nil
	}
}

// domains loads the committed cache and reads what it lacks at tiny.
func domains(t *testing.T, ctx context.Context, db *sql.DB, ts []collector.Template) *collector.Domains {
	t.Helper()
	dom, err := collector.LoadDomains("../data/domains.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := dom.FetchColumns(ctx, db, "tpcds", "tpch"); err != nil {
		t.Fatal(err)
	}
	for _, tm := range ts {
		if err := dom.Fetch(ctx, db, tm.Catalog, "tiny", tm.Columns(dom.Columns[tm.Catalog])); err != nil {
			t.Fatal(err)
		}
	}
	if err := dom.Fetch(ctx, db, "tpcds", "tiny", collector.GenColumns()); err != nil {
		t.Fatal(err)
	}
	return dom
}

func TestVariantsPlanOnTrino(t *testing.T) {
	server := trinoURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := openDB(t, server)
	ts := workloads(t)
	dom := domains(t, ctx, db, ts)
	items := collector.Generate(collector.GenConfig{
		Seed: 7, Scales: []string{"tiny"}, Variants: 4, SessionShare: 0.5, GenScales: []string{"tiny"}, GenVariants: 2,
	}, ts, dom)
	// A sample: every 29th substituted TPC variant, and the second variant
	// of every generator.
	var sample []collector.Item
	for i, it := range items {
		if it.Workload.Family == "gen" && it.Workload.Variant == 1 || it.Workload.Family != "gen" && it.Workload.Variant > 0 && i%29 == 0 {
			sample = append(sample, it)
		}
	}
	plan := planFunc()
	for _, it := range sample {
		p, err := plan(ctx, server, &it, it.Header("prestroid-test", "prestroid-test"))
		if err != nil {
			t.Errorf("%s variant %d (params %v, session %v) does not plan: %v\n%s",
				it.Workload.Template, it.Workload.Variant, it.Workload.Params, it.Session, err, head(it.SQL, 2000))
			continue
		}
		if p.OTP.Nodes < 3 {
			t.Errorf("%s: O-T-P tree of %d nodes", it.Workload.Template, p.OTP.Nodes)
		}
		t.Logf("%-16s v%d otp nodes %5d depth %3d", it.Workload.Template, it.Workload.Variant, p.OTP.Nodes, p.OTP.MaxDepth)
	}
	if len(sample) < 15 {
		t.Fatalf("sample of %d items only", len(sample))
	}
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

func TestShortCollectionResumesWithoutDuplicates(t *testing.T) {
	server := trinoURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := openDB(t, server)
	ts := workloads(t)
	var keep []collector.Template
	for _, tm := range ts {
		if tm.Name == "tpch/q06" || tm.Name == "tpch/q14" || tm.Name == "tpcds/q96" {
			keep = append(keep, tm)
		}
	}
	dom := domains(t, ctx, db, keep)
	items := collector.Generate(collector.GenConfig{Seed: 3, Scales: []string{"tiny"}, Variants: 2, SessionShare: 1}, keep, dom)
	if len(items) != 6 {
		t.Fatalf("planned %d items, want 6", len(items))
	}
	path := filepath.Join(t.TempDir(), "short.jsonl.gz")
	run := func(items []collector.Item) collector.Summary {
		w, err := collector.OpenWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		r := &collector.Runner{Server: server, DB: db, User: "prestroid-test", Concurrency: 2, Timeout: time.Minute, Writer: w, Plan: planFunc()}
		sum, err := r.Run(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	// First run: four items; the second run gets all six and must do only
	// the two new ones.
	if s := run(items[:4]); s.Done != 4 || s.Skipped != 0 {
		t.Fatalf("first run: %+v", s)
	}
	if s := run(items); s.Done != 2 || s.Skipped != 4 {
		t.Fatalf("resumed run: %+v, want 2 done and 4 skipped", s)
	}
	recs, err := collector.ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range recs {
		if seen[r.Key] {
			t.Fatalf("duplicate record %s", r.Key)
		}
		seen[r.Key] = true
		if r.Status != collector.StatusFinished || r.Stats == nil || r.Stats.CPUMillis <= 0 || r.QueryID == "" {
			b, _ := json.Marshal(r)
			t.Fatalf("record not complete: %s", b)
		}
		if r.Plan == nil || r.Plan.OTP == nil || len(r.Plan.JSON) == 0 {
			t.Fatalf("%s: no plan", r.Key)
		}
		if r.TrinoVersion == "" || r.Stats.PlanningMillis < 0 || r.Stats.ElapsedMillis <= 0 {
			t.Fatalf("%s: missing version or planning time: %+v", r.Key, r.Stats)
		}
		if r.Load == nil || r.Load.Before[0] < 0 || r.Load.After[2] <= 0 {
			t.Fatalf("%s: no load average: %+v", r.Key, r.Load)
		}
		w := r.Warmth
		if w == nil || len(w.Shape) != 16 || w.Node == "" || w.StartedAt.After(r.SubmittedAt) || w.StartedAt.Before(time.Now().Add(-30*24*time.Hour)) {
			t.Fatalf("%s: warmth %+v (submitted %s)", r.Key, w, r.SubmittedAt)
		}
		if w.Node != recs[0].Warmth.Node || !w.StartedAt.Equal(recs[0].Warmth.StartedAt) {
			t.Fatalf("%s: JVM %s@%s, the first record's %s@%s: one Trino, one JVM", r.Key, w.Node, w.StartedAt, recs[0].Warmth.Node, recs[0].Warmth.StartedAt)
		}
	}
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
}

func TestTimeoutCancelsTheQueryOnTrino(t *testing.T) {
	server := trinoURL(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := openDB(t, server)
	path := filepath.Join(t.TempDir(), "timeout.jsonl.gz")
	w, err := collector.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Runs for minutes on one core unless cancelled.
	it := collector.Item{Key: "slow", Catalog: "tpch", Schema: "sf1",
		SQL:      "SELECT count(*) FROM lineitem a CROSS JOIN lineitem b WHERE a.partkey + b.partkey = 7",
		Workload: collector.Workload{Template: "test/slow"}}
	r := &collector.Runner{Server: server, DB: db, User: "prestroid-test", Timeout: 2 * time.Second, Writer: w}
	sum, err := r.Run(ctx, []collector.Item{it})
	if err != nil {
		t.Fatal(err)
	}
	if sum.ByStatus[collector.StatusTimeout] != 1 {
		t.Fatalf("outcomes %v, want one TIMEOUT", sum.ByStatus)
	}
	recs, _ := collector.ReadAll(path)
	if len(recs) != 1 || recs[0].QueryID == "" {
		t.Fatalf("timeout record: %+v", recs)
	}
	// The query must be gone on Trino, not just abandoned by the client.
	deadline := time.Now().Add(15 * time.Second)
	for {
		req, _ := http.NewRequest("GET", server+"/v1/query/"+recs[0].QueryID+"?pruned=true", nil)
		req.Header.Set("X-Trino-User", "prestroid-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var qi struct {
			State     string
			ErrorCode struct{ Name string }
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		json.Unmarshal(b, &qi)
		if qi.State == "FAILED" {
			t.Logf("query %s ended %s (%s)", recs[0].QueryID, qi.State, qi.ErrorCode.Name)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s still %s 15 s after the timeout", recs[0].QueryID, qi.State)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
