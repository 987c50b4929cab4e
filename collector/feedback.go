package collector

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"time"
)

// FeedbackOptions configure a FeedbackLog. The collector has no defaults
// of its own: the server passes the feedback settings config filled
// (feedback.rotate_records, feedback.rotate_every), and a zero value here
// means that bound is off.
type FeedbackOptions struct {
	// Dir is where the feedback-<time>.jsonl.gz files go. Required.
	Dir string
	// RotateRecords starts a new file after this many records. Zero (or
	// negative) means no bound on the records in a file.
	RotateRecords int
	// RotateEvery starts a new file after this long. Zero (or negative)
	// means no bound on a file's age.
	RotateEvery time.Duration
	// Logger receives write errors and the dropped-record warnings. Nil
	// means slog.Default().
	Logger *slog.Logger
}

// feedbackQueue is how many values may wait for the writer goroutine
// before Record starts dropping them.
const feedbackQueue = 4096

// FeedbackLog writes values of type T (the proxy's completed queries) as
// records, converted by the function given to NewFeedbackLog, to rotating
// files of Writer's format. Record never blocks: values go through a
// buffered channel to one writer goroutine, which converts and writes
// them, and are dropped (and counted) when it falls behind. The
// conversion runs on the writer goroutine, off the caller's path.
type FeedbackLog[T any] struct {
	o       FeedbackOptions
	convert func(T) *Record
	ch      chan T
	dropped atomic.Int64
	done    chan struct{}
}

// NewFeedbackLog starts the writer goroutine; Close stops it.
func NewFeedbackLog[T any](o FeedbackOptions, convert func(T) *Record) *FeedbackLog[T] {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	f := &FeedbackLog[T]{o: o, convert: convert, ch: make(chan T, feedbackQueue), done: make(chan struct{})}
	go f.run()
	return f
}

// Record queues v for writing, or drops it when the writer is behind.
func (f *FeedbackLog[T]) Record(v T) {
	select {
	case f.ch <- v:
	default:
		if f.dropped.Add(1)%1000 == 1 {
			f.o.Logger.Warn("feedback log falling behind; records dropped", "dropped", f.dropped.Load())
		}
	}
}

// Dropped is the number of values dropped so far.
func (f *FeedbackLog[T]) Dropped() int64 { return f.dropped.Load() }

// Close flushes what is queued and closes the file. Record must not be
// called after Close.
func (f *FeedbackLog[T]) Close() {
	close(f.ch)
	<-f.done
}

func (f *FeedbackLog[T]) run() {
	defer close(f.done)
	var w *Writer
	var opened time.Time
	n := 0
	for v := range f.ch {
		if w == nil || f.full(n, opened) {
			if w != nil {
				w.Close()
			}
			opened = time.Now().UTC()
			path := filepath.Join(f.o.Dir, "feedback-"+opened.Format("20060102T150405.000000000")+".jsonl.gz")
			var err error
			if w, err = OpenWriter(path); err != nil {
				f.o.Logger.Error("feedback log", "error", err)
				w = nil
				continue
			}
			n = 0
		}
		if err := w.Write(f.convert(v)); err != nil {
			f.o.Logger.Error("feedback log", "error", err)
			continue
		}
		n++
	}
	if w != nil {
		w.Close()
	}
}

// full says whether the file opened at opened, holding n records, is
// done: past either bound that is set.
func (f *FeedbackLog[T]) full(n int, opened time.Time) bool {
	return (f.o.RotateRecords > 0 && n >= f.o.RotateRecords) ||
		(f.o.RotateEvery > 0 && time.Since(opened) >= f.o.RotateEvery)
}

func (f *FeedbackLog[T]) String() string { return fmt.Sprintf("feedback log in %s", f.o.Dir) }
