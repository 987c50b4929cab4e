package collector

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"
)

func TestFeedbackLogConvertsWritesAndRotates(t *testing.T) {
	dir := t.TempDir()
	type done struct {
		id  string
		cpu int64
	}
	convert := func(d done) *Record {
		return &Record{Source: SourceProxy, Key: "proxy/" + d.id, QueryID: d.id, Status: StatusFinished,
			Stats: &Stats{State: "FINISHED", CPUMillis: d.cpu}}
	}
	f := NewFeedbackLog(FeedbackOptions{Dir: dir, RotateRecords: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, convert)
	for i := 1; i <= 5; i++ {
		f.Record(done{fmt.Sprintf("q%d", i), int64(1000 * i)})
	}
	f.Close()
	if f.Dropped() != 0 {
		t.Errorf("%d dropped", f.Dropped())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "feedback-*.jsonl.gz"))
	if len(files) != 3 {
		t.Fatalf("%d files after 5 records with rotation at 2: %v", len(files), files)
	}
	recs, err := ReadAll(files...)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || recs[0].QueryID != "q1" || recs[0].Stats.CPUMillis != 1000 || recs[4].Key != "proxy/q5" {
		t.Fatalf("records %+v", recs)
	}
}

func TestFeedbackLogRotatesByAge(t *testing.T) {
	dir := t.TempDir()
	f := NewFeedbackLog(FeedbackOptions{Dir: dir, RotateEvery: time.Nanosecond}, func(id string) *Record {
		return &Record{Key: id, Status: StatusFinished}
	})
	f.Record("a")
	time.Sleep(time.Millisecond)
	f.Record("b")
	f.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "feedback-*.jsonl.gz"))
	if len(files) != 2 {
		t.Errorf("%d files, want one per record: %v", len(files), files)
	}
}

func TestFeedbackLogWithoutBoundsKeepsOneFile(t *testing.T) {
	dir := t.TempDir()
	f := NewFeedbackLog(FeedbackOptions{Dir: dir}, func(id string) *Record {
		return &Record{Key: id, Status: StatusFinished}
	})
	for i := 0; i < 5; i++ {
		f.Record(fmt.Sprint(i))
		time.Sleep(time.Millisecond)
	}
	f.Close()
	files, _ := filepath.Glob(filepath.Join(dir, "feedback-*.jsonl.gz"))
	if len(files) != 1 {
		t.Errorf("%d files, want one (zero bounds mean no rotation): %v", len(files), files)
	}
}
