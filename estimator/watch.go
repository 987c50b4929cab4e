package estimator

import (
	"context"
	"os"
	"time"

	"github.com/prestroid/prestroid/estimator/bundle"
)

// WatchBundle reloads the model from dir (with load) when hup delivers a
// signal (SIGHUP) and when the bundle's files change, polled every
// interval (≤ 0: no polling). A change is acted on once two polls agree,
// so a bundle being written is not read half-way. A refused bundle is
// logged and the current model keeps serving; the same files are not
// retried until they change again or a signal asks. WatchBundle returns
// when ctx ends.
func (s *Service) WatchBundle(ctx context.Context, dir string, load func(dir string) (*bundle.Model, error), interval time.Duration, hup <-chan os.Signal) {
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
	loaded := bundle.Stamp(dir) // the files the current model came from
	pending := ""
	reload := func(why string) {
		stamp := bundle.Stamp(dir)
		err := s.Reload(func() (*bundle.Model, error) { return load(dir) })
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
			stamp := bundle.Stamp(dir)
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
