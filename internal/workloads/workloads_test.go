package workloads

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFind(t *testing.T) {
	empty := t.TempDir()
	full := t.TempDir()
	if err := os.Mkdir(filepath.Join(full, "tpch"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "tpch", "q03.sql"), []byte("SELECT 1\n;\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dirs []string
		want string // "" = an error naming the first non-empty dir
	}{
		{"a directory with query files is found", []string{full}, full},
		{"empty candidates are skipped", []string{"", empty, full}, full},
		{"a directory without query files is refused", []string{empty}, ""},
		{"a missing directory is refused", []string{filepath.Join(empty, "nope")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Find(tc.dirs...)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("Find = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Find = %q, want an error", got)
			}
			for _, part := range []string{"no TPC workload files at", Env, "--workloads", "docs/workloads.md"} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q does not say %q", err, part)
				}
			}
		})
	}
}
