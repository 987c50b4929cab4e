package training

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/collector"
	"github.com/prestroid/prestroid/estimator/featurize"
)

// The committed small data set: the label-noise runs (real plans and CPU
// times of TPC templates) and the fixed split.
var (
	noiseRecords = filepath.Join("..", "data", "records", "noise-seed1.jsonl.gz")
	splitFile    = filepath.Join("..", "data", "split.json")
	q20Plan      = filepath.Join("..", "estimator", "testdata", "explain", "tpch-q20-sf1.json")
)

func TestLoadQueriesKeepsUsableRecordsPlacedByTheSplit(t *testing.T) {
	qs, st, err := LoadQueries([]string{noiseRecords}, splitFile)
	if err != nil {
		t.Fatal(err)
	}
	if st.Records == 0 || st.Usable != len(qs) || st.Usable == 0 {
		t.Fatalf("records %d, usable %d, queries %d", st.Records, st.Usable, len(qs))
	}
	dropped := 0
	for _, n := range st.Dropped {
		dropped += n
	}
	if st.Usable+dropped != st.Records {
		t.Errorf("usable %d + dropped %v != records %d", st.Usable, st.Dropped, st.Records)
	}
	if len(st.SHA256) != 64 || len(st.Files) != 1 {
		t.Errorf("hash %q, files %v", st.SHA256, st.Files)
	}
	var split collector.Split
	b, _ := os.ReadFile(splitFile)
	if err := json.Unmarshal(b, &split); err != nil {
		t.Fatal(err)
	}
	perSplit := map[string]int{}
	templateSplit := map[string]string{}
	for _, q := range qs {
		perSplit[q.Split]++
		if q.CPUMs <= 0 || q.Root() == nil || q.OTPNodes == 0 || q.PlanNodes == 0 || q.File != filepath.Base(noiseRecords) {
			t.Fatalf("query %s: cpu %d ms, %d O-T-P nodes, %d plan nodes, file %q", q.Key, q.CPUMs, q.OTPNodes, q.PlanNodes, q.File)
		}
		if prev, ok := templateSplit[q.Template]; ok && prev != q.Split {
			t.Errorf("template %s is in both %s and %s", q.Template, prev, q.Split)
		}
		templateSplit[q.Template] = q.Split
	}
	for part, n := range perSplit {
		if st.PerSplit[part] != n {
			t.Errorf("PerSplit[%s] = %d, counted %d", part, st.PerSplit[part], n)
		}
		if part != "train" && part != "val" && part != "test" {
			t.Errorf("split %q", part)
		}
	}
	// Loading twice gives the same queries in the same order, and the same hash.
	qs2, st2, err := LoadQueries([]string{noiseRecords}, splitFile)
	if err != nil {
		t.Fatal(err)
	}
	if st2.SHA256 != st.SHA256 || len(qs2) != len(qs) || qs2[0].Key != qs[0].Key || qs2[len(qs2)-1].Key != qs[len(qs)-1].Key {
		t.Error("a second load differs")
	}
}

func TestLoadQueriesNeedsData(t *testing.T) {
	if _, _, err := LoadQueries(nil, splitFile); err == nil {
		t.Error("no paths: no error")
	}
	if _, _, err := LoadQueries([]string{noiseRecords}, filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing split: no error")
	}
}

// TestLiveRecordsGetFingerprintTemplates: records of live traffic (the
// proxy's feedback log: no workload template) are training data. Each gets
// its SQL fingerprint as template, so statements that differ only in
// literals share a template and a side of the split.
func TestLiveRecordsGetFingerprintTemplates(t *testing.T) {
	plan, err := os.ReadFile(q20Plan)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := collector.NewFeedbackLog(collector.FeedbackOptions{Dir: dir}, func(r *collector.Record) *collector.Record { return r })
	for i, sql := range []string{
		"SELECT s_name FROM supplier WHERE s_nationkey = 3",
		"select s_name\nfrom supplier where s_nationkey = 17 -- another literal",
		"SELECT s_name, s_address FROM supplier",
		"SELECT 1", // failed: dropped
	} {
		r := &collector.Record{Source: collector.SourceProxy, Key: fmt.Sprintf("proxy/q%d", i), QueryID: fmt.Sprintf("q%d", i),
			SQL: sql, Status: collector.StatusFinished, SubmittedAt: time.Now(), FinishedAt: time.Now(),
			Stats: &collector.Stats{State: "FINISHED", CPUMillis: int64(700 * (i + 1))},
			Plan:  &collector.Plan{JSON: json.RawMessage(plan)}}
		if i == 3 {
			r.Status, r.Stats.State = collector.StatusFailed, "FAILED"
		}
		log.Record(r)
	}
	log.Close()
	qs, st, err := LoadQueries([]string{dir}, splitFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 3 || st.Records != 4 || st.Dropped["status "+collector.StatusFailed] != 1 {
		t.Fatalf("%d usable of %d records (dropped %v), want 3 of 4", st.Usable, st.Records, st.Dropped)
	}
	for _, q := range qs {
		if q.Family != "live" || !strings.HasPrefix(q.Template, "live/") || q.OTPNodes == 0 {
			t.Fatalf("live query %+v", q)
		}
	}
	if qs[0].Template != qs[1].Template || qs[0].Split != qs[1].Split {
		t.Errorf("statements that differ in literals: templates %s/%s, splits %s/%s", qs[0].Template, qs[1].Template, qs[0].Split, qs[1].Split)
	}
	if qs[0].Template == qs[2].Template {
		t.Errorf("different statements share template %s", qs[0].Template)
	}
}

// A PrestoDB record whose plan no decoder reads is skipped and counted
// apart; every usable query says its engine.
func TestLoadQueriesSkipsPlansItCannotDecodeAndKeepsTheEngine(t *testing.T) {
	plan, err := os.ReadFile(q20Plan)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "mixed.jsonl.gz")
	w, err := collector.OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []*collector.Record{
		{TrinoVersion: "476", Plan: &collector.Plan{JSON: json.RawMessage(plan)}},
		{Engine: "presto", EngineVersion: "0.296-8661b73", Plan: &collector.Plan{JSON: json.RawMessage(`{"0":{"plan":{}}}`)}},
	} {
		r.Version, r.Source, r.Key, r.Status = collector.RecordVersion, collector.SourceCollector, fmt.Sprint("k", i), collector.StatusFinished
		r.SQL, r.Stats = "SELECT 1", &collector.Stats{State: "FINISHED", CPUMillis: 500}
		r.Workload = &collector.Workload{Family: "tpch", Template: "tpch/q20", Scale: "sf1"}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	qs, st, err := LoadQueries([]string{path}, splitFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || st.Dropped["plan parse error (presto)"] != 1 {
		t.Fatalf("%d usable, dropped %v: want the Trino record kept and the PrestoDB one counted", len(qs), st.Dropped)
	}
	if qs[0].Engine != "trino" {
		t.Errorf("engine %q, want trino", qs[0].Engine)
	}
}

// TestFeaturizeThenTensors runs the Go steps on the committed noise records
// with a made-up tokens.vec (the w2v step needs Python): the files the
// trainer reads are there, with one row per query of each split.
func TestFeaturizeThenTensors(t *testing.T) {
	work := t.TempDir()
	var log strings.Builder
	cfg := DefaultConfig()
	cfg.Data, cfg.Split, cfg.Workdir, cfg.Pf, cfg.Full, cfg.FullChunk, cfg.Log = []string{noiseRecords}, splitFile, work, 4, true, 7, &log
	if err := Run(&cfg, []string{StepFeaturize}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"queries.jsonl", "corpus.txt", "meta.json"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Fatal(err)
		}
	}
	var meta LoadStats
	if err := readJSON(filepath.Join(work, "meta.json"), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Usable == 0 || meta.PerSplit["train"] == 0 || !strings.Contains(log.String(), "featurize: ") {
		t.Fatalf("meta %+v, log %q", meta, log.String())
	}
	writeTokenVectors(t, work, cfg.Pf)
	if err := Tensors(&cfg); err != nil {
		t.Fatal(err)
	}
	var info tensorInfo
	if err := readJSON(filepath.Join(work, "tensors.json"), &info); err != nil {
		t.Fatal(err)
	}
	var tgt Target
	if err := readJSON(filepath.Join(work, "target.json"), &tgt); err != nil {
		t.Fatal(err)
	}
	if info.N != 15 || info.K != 9 || info.C != 3 || info.Pf != 4 || len(info.Global) != 4 || tgt.Max <= tgt.Min {
		t.Fatalf("tensors.json %+v, target %+v", info, tgt)
	}
	for part, n := range meta.PerSplit {
		if info.Counts[part] != n {
			t.Errorf("%s: %d encoded, %d featurized", part, info.Counts[part], n)
		}
		keys, err := os.ReadFile(filepath.Join(work, part+".keys.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(keys), "\n"); got != n {
			t.Errorf("%s.keys.txt: %d keys, want %d", part, got, n)
		}
		if _, err := os.Stat(filepath.Join(work, part+".npz")); err != nil {
			t.Error(err)
		}
		chunks, _ := filepath.Glob(filepath.Join(work, "full_"+part+"_*.npz"))
		if want := (n + cfg.FullChunk - 1) / cfg.FullChunk; len(chunks) != want || info.FullChunks[part] != want {
			t.Errorf("%s: %d full-tree chunks (tensors.json: %d), want %d", part, len(chunks), info.FullChunks[part], want)
		}
	}
}

// writeTokenVectors writes a tokens.vec of dimension dim holding every
// token of corpus.txt, with values that differ per token.
func writeTokenVectors(t *testing.T, work string, dim int) {
	t.Helper()
	f, err := os.Open(filepath.Join(work, "corpus.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var tokens []string
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, tok := range strings.Fields(sc.Text()) {
			if !seen[tok] {
				seen[tok] = true
				tokens = append(tokens, tok)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d\n", len(tokens), dim)
	for i, tok := range tokens {
		b.WriteString(tok)
		for j := 0; j < dim; j++ {
			fmt.Fprintf(&b, " %g", float64((i*7+j*3)%11)/10-0.5)
		}
		b.WriteByte('\n')
	}
	if err := os.WriteFile(filepath.Join(work, "tokens.vec"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTensorsNeedsTheFeaturizedQueries(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Data, cfg.Split, cfg.Workdir, cfg.Log = []string{noiseRecords}, splitFile, t.TempDir(), io.Discard
	if err := Tensors(&cfg); err == nil || !strings.Contains(err.Error(), "featurize") {
		t.Errorf("tensors before featurize: %v", err)
	}
	// A query in queries.jsonl that the records no longer hold.
	if err := os.WriteFile(filepath.Join(cfg.Workdir, "queries.jsonl"), []byte(`{"key":"gone"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.Workdir, "meta.json"), []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Tensors(&cfg); err == nil || !strings.Contains(err.Error(), "gone") {
		t.Errorf("a vanished query: %v", err)
	}
}

func TestRunStopsAtAnUnknownStep(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workdir = t.TempDir()
	err := Run(&cfg, []string{"", "shuffle"})
	var se *StepError
	if !errors.As(err, &se) || se.Step != "shuffle" || !strings.Contains(err.Error(), "unknown step") {
		t.Errorf("err = %v", err)
	}
}

func TestCVNameMustBeAFileNamePart(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Workdir, cfg.CVName = t.TempDir(), "../x"
	if err := CV(&cfg); err == nil || !strings.Contains(err.Error(), "plain file-name part") {
		t.Errorf("err = %v", err)
	}
	cfg.Out = ""
	if err := Train(&cfg); err == nil || !strings.Contains(err.Error(), "--out") {
		t.Errorf("train without --out: %v", err)
	}
}

func TestNetworkArgsCarryEveryNetworkSetting(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NoEstimates, cfg.PlanSkip, cfg.CostAnchor, cfg.ScaleFree, cfg.AnchorSlope, cfg.EMA = true, true, true, true, true, 0.995
	got := strings.Join(networkArgs(&cfg), " ")
	for _, want := range []string{"--epochs 200", "--patience 25", "--device auto", "--threads 2", "--lr 0.0001",
		"--batch 64", "--kernels 128,128,128", "--dense 32,8", "--pool concat", "--ema 0.995", "--lr-plateau 0",
		"--dropout 0.1", "--no-estimates", "--plan-skip", "--cost-anchor", "--scale-free", "--anchor-slope"} {
		if !strings.Contains(got, want) {
			t.Errorf("networkArgs = %q, lacks %q", got, want)
		}
	}
}

func TestEvalPrepareEncodesTheTestSplitWithTheBundle(t *testing.T) {
	bundle := filepath.Join("..", "estimator", "testdata", "bundle-fixture")
	work := t.TempDir()
	var log strings.Builder
	if err := EvalPrepare(&log, bundle, []string{noiseRecords}, splitFile, "", work, ""); err != nil {
		t.Fatal(err)
	}
	var meta LoadStats
	if err := readJSON(filepath.Join(work, "meta.json"), &meta); err != nil {
		t.Fatal(err)
	}
	keys, err := os.ReadFile(filepath.Join(work, "test.keys.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(keys), "\n"); n == 0 || n != meta.PerSplit["test"] {
		t.Errorf("%d test keys, meta says %d", n, meta.PerSplit["test"])
	}
	for _, f := range []string{"queries.jsonl", "test.npz"} {
		if _, err := os.Stat(filepath.Join(work, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(log.String(), "test queries encoded with bundle") {
		t.Errorf("log %q", log.String())
	}
}

func TestEnsembleChecksItsMembersFirst(t *testing.T) {
	for _, tc := range []struct {
		cfg  EnsembleConfig
		want string
	}{
		{EnsembleConfig{Bundles: []string{"a", "b"}}, "--out"},
		{EnsembleConfig{Out: t.TempDir(), Bundles: []string{"a"}}, "two or more"},
		{EnsembleConfig{Out: t.TempDir(), Bundles: []string{"nope-a", "nope-b"}, Python: "/bin/false"}, "member nope-a"},
		{EnsembleConfig{Out: t.TempDir(), Bundles: []string{"a", "b", "c"}, Workdir: "w", Gate: true}, "--gate takes pairs of bundles"},
		{EnsembleConfig{Out: t.TempDir(), Bundles: []string{"a", "b"}, Gate: true}, "--workdir"},
	} {
		if err := Ensemble(&tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// The same statement collected on Trino and on PrestoDB has one collector
// key; both are kept, the PrestoDB one under its engine's key.
func TestLoadQueriesKeepsOneKeyPerEngine(t *testing.T) {
	trinoPlan, err := os.ReadFile(q20Plan)
	if err != nil {
		t.Fatal(err)
	}
	prestoPlan, err := os.ReadFile("../estimator/testdata/explain-presto/extra-distinct-tiny.json")
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for i, r := range []*collector.Record{
		{TrinoVersion: "476", Plan: &collector.Plan{JSON: json.RawMessage(trinoPlan)}},
		{Engine: "presto", EngineVersion: "0.296-8661b73", Plan: &collector.Plan{JSON: json.RawMessage(prestoPlan)}},
		{Engine: "presto", EngineVersion: "0.296-8661b73", Plan: &collector.Plan{JSON: json.RawMessage(prestoPlan)}},
	} {
		r.Version, r.Source, r.Key, r.Status = collector.RecordVersion, collector.SourceCollector, "same", collector.StatusFinished
		r.SQL, r.Stats = "SELECT 1", &collector.Stats{State: "FINISHED", CPUMillis: 500}
		r.Workload = &collector.Workload{Family: "tpch", Template: "tpch/q20", Scale: "tiny"}
		path := filepath.Join(t.TempDir(), fmt.Sprintf("f%d.jsonl.gz", i)) // a file holds a key once
		w, err := collector.OpenWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		w.Close()
		paths = append(paths, path)
	}
	qs, st, err := LoadQueries(paths, splitFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || st.Dropped["duplicate key"] != 1 {
		t.Fatalf("%d usable, dropped %v: want one query per engine and the second PrestoDB record dropped", len(qs), st.Dropped)
	}
	if qs[0].Key != "same" || qs[1].Key != "presto:same" || qs[1].Engine != "presto" {
		t.Errorf("keys %q (%s), %q (%s)", qs[0].Key, qs[0].Engine, qs[1].Key, qs[1].Engine)
	}
	if !slices.Equal(st.Engines, []string{"presto", "trino"}) {
		t.Errorf("engines %v, want [presto trino] (the manifest's training.engines)", st.Engines)
	}
}

// TestFeaturizeWithDynamicFilters: the featurize step's --dynamic-filters
// is recorded in meta.json, its corpus holds the clauses' token, and the
// tensors step, run on its own, builds the same trees (its test tensors
// differ from a workdir featurized without it).
func TestFeaturizeWithDynamicFilters(t *testing.T) {
	npz := map[bool][]byte{}
	for _, df := range []bool{false, true} {
		cfg := DefaultConfig()
		cfg.Data, cfg.Split, cfg.Workdir, cfg.Pf, cfg.Log, cfg.DynamicFilters = []string{noiseRecords}, splitFile, t.TempDir(), 4, io.Discard, df
		if err := Run(&cfg, []string{StepFeaturize}); err != nil {
			t.Fatal(err)
		}
		var meta LoadStats
		if err := readJSON(filepath.Join(cfg.Workdir, "meta.json"), &meta); err != nil {
			t.Fatal(err)
		}
		corpus, err := os.ReadFile(filepath.Join(cfg.Workdir, "corpus.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if got := slices.Equal(meta.TreeFeatures, []string{featurize.TreeFeatureDynamicFilters}); got != df {
			t.Errorf("--dynamic-filters %v: meta.json tree_features %q", df, meta.TreeFeatures)
		}
		if got := strings.Contains(string(corpus), " "+featurize.OpDynamic+"\n"); got != df {
			t.Errorf("--dynamic-filters %v: the corpus holds %s clauses: %v", df, featurize.OpDynamic, got)
		}
		writeTokenVectors(t, cfg.Workdir, cfg.Pf)
		cfg.DynamicFilters = false // the tensors step follows meta.json, not the flag
		if err := Tensors(&cfg); err != nil {
			t.Fatal(err)
		}
		if npz[df], err = os.ReadFile(filepath.Join(cfg.Workdir, "test.npz")); err != nil {
			t.Fatal(err)
		}
	}
	if bytes.Equal(npz[false], npz[true]) {
		t.Error("the test tensors are the same with and without the dynamic filter clauses")
	}
}
