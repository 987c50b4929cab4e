// Package workloads finds the TPC-H and TPC-DS query files (trinodb/trino's
// benchmark queries, docs/workloads.md) that the collector, the benchmarks
// and the integration tests read, and says how to point at them when they
// are absent. The files are not in the repository: a checkout finds them at
// ../shared/workloads beside it, anyone else passes their place.
//
// It imports no project package, so collector, estimator test helpers and
// testing/e2e can all use it.
package workloads

import (
	"fmt"
	"os"
	"path/filepath"
)

// Env is the environment variable that tests read the directory from.
const Env = "PRESTROID_WORKLOADS"

// Hint says how to point every command and test at the files.
const Hint = "set " + Env + " (go test), --workloads (prestroid) or WORKLOADS= (make) " +
	"to a copy of trinodb/trino's benchmark queries; see docs/workloads.md"

// Has reports whether dir holds query files: tpch/*.sql or tpcds/*.sql.
func Has(dir string) bool {
	if dir == "" {
		return false
	}
	for _, family := range []string{"tpch", "tpcds"} {
		if m, _ := filepath.Glob(filepath.Join(dir, family, "*.sql")); len(m) > 0 {
			return true
		}
	}
	return false
}

// Missing is the error for a directory without query files: it names the
// directory (absolute, so a relative default reads plainly) and the Hint.
func Missing(dir string) error {
	if dir == "" {
		return fmt.Errorf("no TPC workload directory given: %s", Hint)
	}
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return fmt.Errorf("no TPC workload files at %s: %s", dir, Hint)
}

// Find returns the first of dirs (empty ones skipped) that holds query
// files, or Missing for the first non-empty one when none does. Callers
// pass os.Getenv(Env) first, then their fallbacks.
func Find(dirs ...string) (string, error) {
	first := ""
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if first == "" {
			first = d
		}
		if Has(d) {
			return d, nil
		}
	}
	return "", Missing(first)
}

// FromEnv is Find(os.Getenv(Env), fallbacks...).
func FromEnv(fallbacks ...string) (string, error) {
	return Find(append([]string{os.Getenv(Env)}, fallbacks...)...)
}
