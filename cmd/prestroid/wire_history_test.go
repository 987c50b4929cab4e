package main

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prestroid/prestroid/config"
	"github.com/prestroid/prestroid/estimator/history"
)

// newHistory picks the store the configuration names (after FillDefaults:
// the admission's Redis unless a file is set). Opening Redis dials
// lazily, so no server is needed here.
func TestNewHistoryPicksTheConfiguredStore(t *testing.T) {
	file := filepath.Join(t.TempDir(), "h.db")
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want string
	}{
		{"the admission's Redis", config.Config{Admission: config.Admission{Redis: "redis://127.0.0.1:1"}}, "*history.Redis"},
		{"a file beside the admission's Redis", config.Config{Admission: config.Admission{Redis: "redis://127.0.0.1:1"},
			Estimator: config.Estimator{History: config.History{Path: file}}}, "*history.Bolt"},
		{"a Redis of its own", config.Config{Estimator: config.Estimator{History: config.History{Redis: "redis://127.0.0.1:1"}}}, "*history.Redis"},
		{"nothing: memory", config.Config{}, "*history.Memory"},
		{"disabled", config.Config{Admission: config.Admission{Redis: "redis://127.0.0.1:1"},
			Estimator: config.Estimator{History: config.History{Disabled: true}}}, "<nil>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.cfg
			c.FillDefaults()
			st, err := newHistory(c.Estimator.History, slog.Default())
			if err != nil {
				t.Fatal(err)
			}
			if st != nil {
				defer st.Close()
			}
			if got := fmt.Sprintf("%T", st); got != tc.want {
				t.Fatalf("store %s; want %s", got, tc.want)
			}
			if _, ok := st.(history.Reporter); ok != (tc.want == "*history.Redis") {
				t.Fatalf("%T reports its health: %v; want only Redis to", st, ok)
			}
		})
	}
}
