package estimator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// BundleStamp summarizes the bundle files' sizes and modification times;
// a change means the bundle was rewritten.
func BundleStamp(dir string) string {
	var b strings.Builder
	for _, f := range BundleFiles {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// WatchBundle reloads the model from dir (with load) when hup delivers a
// signal (SIGHUP) and when the bundle's files change, polled every
// interval (≤ 0: no polling). A change is acted on once two polls agree,
// so a bundle being written is not read half-way. A refused bundle is
// logged and the current model keeps serving; the same files are not
// retried until they change again or a signal asks. WatchBundle returns
// when ctx ends.
func (s *Service) WatchBundle(ctx context.Context, dir string, load func(dir string) (*Model, error), interval time.Duration, hup <-chan os.Signal) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("estimator: bundle watcher stopped", "panic", r)
		}
	}()
	var tick <-chan time.Time
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	loaded := BundleStamp(dir) // the files the current model came from
	pending := ""
	reload := func(why string) {
		stamp := BundleStamp(dir)
		err := s.Reload(func() (*Model, error) { return load(dir) })
		loaded = stamp
		if err != nil {
			s.log.Error("estimator: model reload refused; the previous model keeps serving",
				"dir", dir, "trigger", why, "error", err, "serving", s.modelID())
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("signal")
			pending = ""
		case <-tick:
			stamp := BundleStamp(dir)
			switch {
			case stamp == loaded:
				pending = ""
			case stamp == pending:
				reload("files changed")
				pending = ""
			default:
				pending = stamp
			}
		}
	}
}

func (s *Service) modelID() string {
	if m := s.Model(); m != nil {
		return m.ID()
	}
	return ""
}

// LoadBundleDir reads the bundle in dir and loads it with rt: the loader
// WatchBundle needs.
func LoadBundleDir(rt Runtime, o ModelOptions) func(dir string) (*Model, error) {
	return func(dir string) (*Model, error) {
		b, err := ReadBundle(dir)
		if err != nil {
			return nil, err
		}
		return LoadModel(b, rt, o)
	}
}
