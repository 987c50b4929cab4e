package routing

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/prestroid/prestroid/internal/dialect"
)

// TestMonitorEngines: the monitor tells a cluster's engine from /v1/info
// when none is configured, keeps it through a failed check, never lets a
// version override a configured engine, and reads a PrestoDB cluster's
// load from /v1/cluster (PrestoDB has no /metrics).
func TestMonitorEngines(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	presto := answer{200, `{"nodeVersion":{"version":"0.296-8661b73"},"coordinator":true,"starting":false}`, nil}
	trino := answer{200, `{"nodeVersion":{"version":"476"},"coordinator":true,"starting":false}`, nil}
	cluster := answer{200, `{"runningQueries":2,"blockedQueries":0,"queuedQueries":5,"activeWorkers":1}`, nil}
	t.Run("a PrestoDB coordinator is detected and its load read from /v1/cluster", func(t *testing.T) {
		f := &fakeProber{answers: map[string]answer{"/v1/info": presto, "/v1/cluster": cluster}}
		var h Health
		m := &Monitor{Type: MonitorMetrics, Log: quiet}
		m.check(Target{Name: "p", Health: &h, Prober: f})
		if h.Engine() != dialect.Presto {
			t.Errorf("engine %v, want presto", h.Engine())
		}
		if st := h.State(); !st.Healthy || st.Running != 2 || st.Queued != 5 || st.LoadErr != "" || st.Version != "0.296-8661b73" {
			t.Errorf("state %+v", st)
		}
		if got := f.asked[len(f.asked)-1]; got != "/v1/cluster" {
			t.Errorf("load read from %q", got)
		}
		h.MarkDown(errors.New("refused"))
		if h.Engine() != dialect.Presto {
			t.Errorf("engine after MarkDown %v, want presto kept", h.Engine())
		}
		f.answers["/v1/info"] = answer{0, "", errors.New("refused")}
		m.check(Target{Name: "p", Health: &h, Prober: f})
		if h.Engine() != dialect.Presto {
			t.Errorf("engine after a failed check %v, want presto kept", h.Engine())
		}
	})
	t.Run("a Trino coordinator is detected", func(t *testing.T) {
		var h Health
		(&Monitor{Type: MonitorInfo, Log: quiet}).check(Target{Name: "t", Health: &h, Prober: &fakeProber{answers: map[string]answer{"/v1/info": trino}}})
		if h.Engine() != dialect.Trino {
			t.Errorf("engine %v, want trino", h.Engine())
		}
	})
	t.Run("a configured engine wins over the version", func(t *testing.T) {
		var h Health
		f := &fakeProber{answers: map[string]answer{"/v1/info": trino, "/v1/cluster": cluster}}
		(&Monitor{Log: quiet}).check(Target{Name: "t", Health: &h, Prober: f, Engine: dialect.Presto})
		if h.Engine() != dialect.Presto || h.State().Running != 2 {
			t.Errorf("engine %v, state %+v; want the configured presto", h.Engine(), h.State())
		}
	})
	t.Run("a version of neither engine tells nothing", func(t *testing.T) {
		var h Health
		(&Monitor{Type: MonitorInfo, Log: quiet}).check(Target{Name: "x", Health: &h, Prober: &fakeProber{answers: map[string]answer{"/v1/info": {200, `{"starting":false}`, nil}}}})
		if h.Engine() != dialect.Unknown {
			t.Errorf("engine %v, want unknown", h.Engine())
		}
	})
	t.Run("a bad /v1/cluster leaves the load unknown", func(t *testing.T) {
		var h Health
		(&Monitor{Log: quiet}).check(Target{Name: "p", Health: &h, Prober: &fakeProber{answers: map[string]answer{"/v1/info": presto, "/v1/cluster": {200, `{}`, nil}}}})
		if st := h.State(); !st.Healthy || st.LoadErr != "bad /v1/cluster answer" {
			t.Errorf("state %+v", st)
		}
	})
}
