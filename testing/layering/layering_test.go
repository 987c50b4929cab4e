// Package layering checks the import rules the README states, with the go
// tool's own view of the dependency graph (go list -deps): a rule broken
// anywhere in a package's transitive imports fails here, with the package
// that broke it.
package layering

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/prestroid/prestroid"

// rules: for each package pattern (below the module, as go list takes it), the project
// packages none of its transitive imports may be (a prefix matches the
// package and every package below it; one ending in "$" matches that
// package only).
var rules = []struct {
	pkg, why string
	deny     []string
}{
	{"proxy/...", "the proxy declares the interfaces it consumes and never imports the estimator, ONNX or the commands",
		[]string{"/estimator", "/cmd", "/collector", "/training"}},
	{"estimator/...", "the estimator knows nothing of HTTP serving",
		[]string{"/proxy", "/cmd"}},
	{"estimate", "the estimate types are a leaf: every other package may import them",
		[]string{"/"}},
	{"config", "config is a leaf: the packages it configures import it, never the reverse",
		[]string{"/"}},
	{"cache", "cache is a leaf", []string{"/"}},
	{"proxy/protocol", "the protocol pieces need no other part of the proxy", []string{"/proxy/"}},
	{"proxy/frontdoor", "the front door needs only the protocol pieces of the proxy",
		[]string{"/proxy$", "/proxy/routing", "/proxy/admission", "/proxy/console", "/proxy/metrics"}},
	{"proxy/routing", "routing decides from plain values and probes through an interface the core implements: it needs no other part of the proxy",
		[]string{"/proxy"}},
	{"proxy/admission/...", "admission stores know nothing of the proxy's server", []string{"/proxy$", "/proxy/console", "/proxy/routing"}},
	{"proxy/guardrail", "guardrails decide from plain values the core fills: they need no other part of the proxy",
		[]string{"/proxy"}},
	{"proxy/usage", "cost accounting takes plain values the core fills and reads the cluster through the func the core hands it: it needs no other part of the proxy",
		[]string{"/proxy"}},
	{"proxy/health", "the probes decide from a State value the server fills", []string{"/proxy"}},
	{"proxy/metrics", "the metrics read the server through the State interface they declare",
		[]string{"/proxy$", "/proxy/console", "/proxy/frontdoor"}},
	{"proxy/gateway", "the gateway routing endpoint estimates through the func the core hands it: it imports neither the core nor its front door, admission or console",
		[]string{"/proxy$", "/proxy/frontdoor", "/proxy/admission", "/proxy/console", "/proxy/metrics"}},
	{"proxy/console", "the console reads the proxy through the interface it declares: it imports neither the core nor its routing",
		[]string{"/proxy$", "/proxy/routing", "/proxy/frontdoor"}},
}

// deps lists the project packages pattern's packages import, directly or
// not, keyed by the importing package.
func deps(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, pattern).Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list %s: %v\n%s", pattern, err, stderr)
	}
	// -deps prints every package in the graph; keep the pattern's own
	// (those go list names without -deps).
	own, err := exec.Command("go", "list", pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	mine := map[string]bool{}
	for _, p := range strings.Fields(string(own)) {
		mine[p] = true
	}
	m := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !mine[f[0]] {
			continue
		}
		for _, d := range f[1:] {
			if strings.HasPrefix(d, module+"/") {
				m[f[0]] = append(m[f[0]], strings.TrimPrefix(d, module))
			}
		}
	}
	if len(m) == 0 && len(mine) == 0 {
		t.Fatalf("go list %s: no packages", pattern)
	}
	return m
}

func TestImportRules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.pkg, func(t *testing.T) {
			for pkg, ds := range deps(t, module+"/"+r.pkg) {
				for _, d := range ds {
					for _, bad := range r.deny {
						if denied(d, bad) {
							if isTestHelper(d) {
								continue
							}
							t.Errorf("%s imports %s: %s", strings.TrimPrefix(pkg, module), d, r.why)
						}
					}
				}
			}
		})
	}
}

// denied reports whether package d matches the deny entry bad.
func denied(d, bad string) bool {
	if exact, ok := strings.CutSuffix(bad, "$"); ok {
		return d == exact
	}
	return d == bad || strings.HasPrefix(d, bad) && (strings.HasSuffix(bad, "/") || d[len(bad)] == '/')
}

// isTestHelper: internal helpers every layer may use (no product code).
func isTestHelper(p string) bool {
	return strings.HasPrefix(p, "/internal/")
}
