package collector

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func sampleRecord(i int) *Record {
	return &Record{
		Key: fmt.Sprintf("k%03d", i), Status: StatusFinished, QueryID: fmt.Sprintf("q%d", i),
		TrinoVersion: "476", Catalog: "tpcds", Schema: "tiny", SQL: "SELECT 1",
		SessionProperties: map[string]string{"task_concurrency": "4"},
		Workload:          &Workload{Family: "tpcds", Template: "tpcds/q03", Variant: i, Scale: "tiny", Seed: 1, Params: map[string]string{"date_dim.d_moy[11]": "3"}},
		Plan:              &Plan{JSON: json.RawMessage(`{"0":{"id":"9","name":"Output","children":[]}}`), OTP: &OTPSummary{Nodes: 3, MaxDepth: 2}},
		Stats:             &Stats{State: "FINISHED", CPUMillis: int64(100 * i), AnalysisMillis: -1},
		SubmittedAt:       time.Date(2026, 12, 2, 12, 0, i, 0, time.UTC),
		FinishedAt:        time.Date(2026, 12, 2, 12, 0, i+1, 0, time.UTC),
	}
}

func TestWriterReaderRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "r.jsonl.gz")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	var want []*Record
	for i := 0; i < 5; i++ {
		r := sampleRecord(i)
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadAll(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, wrote %d", len(got), len(want))
	}
	for i := range want {
		if want[i].Version != RecordVersion || want[i].Source != SourceCollector {
			t.Fatalf("Write did not default version/source: %+v", want[i])
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			g, _ := json.Marshal(got[i])
			w, _ := json.Marshal(want[i])
			t.Fatalf("record %d differs:\n got %s\nwant %s", i, g, w)
		}
	}
}

func TestWriterRefusesDuplicateKeysAcrossReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl.gz")
	w, _ := OpenWriter(path)
	if err := w.Write(sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(sampleRecord(1)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second write of a key: %v, want ErrDuplicate", err)
	}
	w.Close()
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if !w.Has("k001") || w.Len() != 1 {
		t.Fatalf("reopened writer does not know the key (len %d)", w.Len())
	}
	if err := w.Write(sampleRecord(1)); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("write after reopen: %v, want ErrDuplicate", err)
	}
}

func TestKilledWriterLeavesARepairableFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.jsonl.gz")
	w, _ := OpenWriter(path)
	for i := 0; i < 3; i++ {
		if err := w.Write(sampleRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	full, _ := os.ReadFile(path)
	// Simulate a crash in the middle of the fourth member.
	w, _ = OpenWriter(path)
	w.Write(sampleRecord(3))
	w.Close()
	all, _ := os.ReadFile(path)
	part := all[:len(full)+(len(all)-len(full))/2]
	os.WriteFile(path, part, 0o644)

	var n int
	err := ReadRecords(path, func(*Record) error { n++; return nil })
	if !errors.Is(err, ErrTruncated) || n != 3 {
		t.Fatalf("reading a truncated file: %d records, err %v; want 3 and ErrTruncated", n, err)
	}
	w, err = OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	if w.Len() != 3 || w.Has("k003") {
		t.Fatalf("after repair: len %d, has k003 %v", w.Len(), w.Has("k003"))
	}
	if err := w.Write(sampleRecord(3)); err != nil {
		t.Fatal(err)
	}
	w.Close()
	recs, err := ReadAll(path)
	if err != nil || len(recs) != 4 {
		t.Fatalf("after repair and append: %d records, err %v", len(recs), err)
	}
}

func TestParseDurationMillis(t *testing.T) {
	for in, want := range map[string]int64{
		"2.09s": 2090, "157.39ms": 157, "65.75us": 0, "2.50m": 150000, "0.00ns": 0, "": -1, "x": -1, "3q": -1,
	} {
		if got := parseDurationMillis(in); got != want {
			t.Errorf("parseDurationMillis(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestQueryInfoFillsWhatTheFinalPageLacks(t *testing.T) {
	info := func(cpu string) *queryInfo {
		qi := &queryInfo{State: "FINISHED"}
		qi.QueryStats.TotalCPUTime, qi.QueryStats.ElapsedTime, qi.QueryStats.PlanningTime = cpu, "244.00ms", "69.00ms"
		return qi
	}
	t.Run("a final page with the query's CPU keeps its exact figure", func(t *testing.T) {
		st := Stats{State: "FINISHED", CPUMillis: 1234, ElapsedMillis: 250}
		info("1.23s").fill(&st)
		if st.CPUMillis != 1234 || st.ElapsedMillis != 250 || st.PlanningMillis != 69 {
			t.Errorf("%+v", st)
		}
	})
	t.Run("a final page whose statistics were not rolled up takes /v1/query's", func(t *testing.T) {
		st := Stats{State: "FINISHED", CPUMillis: 0, ElapsedMillis: 244}
		info("38.00ms").fill(&st)
		if st.CPUMillis != 38 || st.State != "FINISHED" {
			t.Errorf("%+v", st)
		}
	})
	t.Run("a query that cancelled before its final page takes /v1/query's", func(t *testing.T) {
		st := Stats{State: "RUNNING", CPUMillis: 10, ElapsedMillis: 100}
		qi := info("2.00s")
		qi.State = "FAILED"
		qi.fill(&st)
		if st.CPUMillis != 2000 || st.ElapsedMillis != 244 || st.State != "FAILED" {
			t.Errorf("%+v", st)
		}
	})
}

// The operator summaries of an unpruned /v1/query/{id} (field names and
// duration formats as Trino 476 sends them) sum per operator type.
func TestQueryInfoOperatorCPU(t *testing.T) {
	var qi queryInfo
	body := `{"state":"FINISHED","queryStats":{"totalCpuTime":"570.00ms","operatorSummaries":[
	 {"operatorType":"ScanFilterAndProjectOperator","addInputCpu":"0.00ns","getOutputCpu":"152.56ms","finishCpu":"0.00ns"},
	 {"operatorType":"LookupJoinOperator","addInputCpu":"200.00ms","getOutputCpu":"35.50ms","finishCpu":"76.22us"},
	 {"operatorType":"ScanFilterAndProjectOperator","addInputCpu":"0.00ns","getOutputCpu":"1.20s","finishCpu":"0.00ns"}]}}`
	if err := json.Unmarshal([]byte(body), &qi); err != nil {
		t.Fatal(err)
	}
	st := Stats{State: "FINISHED", CPUMillis: 570}
	qi.fill(&st)
	want := map[string]float64{"ScanFilterAndProjectOperator": 1352.56, "LookupJoinOperator": 235.58}
	if len(st.OperatorCPUMillis) != 2 {
		t.Fatalf("operator CPU %v, want %v", st.OperatorCPUMillis, want)
	}
	for k, v := range want {
		if math.Abs(st.OperatorCPUMillis[k]-v) > 0.011 {
			t.Errorf("%s: %.3f ms, want %.2f", k, st.OperatorCPUMillis[k], v)
		}
	}
}
