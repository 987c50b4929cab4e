// Package docs checks the documentation: every relative link in README.md
// and docs/*.md must name a file or directory of the repository, and a
// #fragment must name a heading of the target page (GitHub's anchors).
// External links (http, https, mailto) are not followed.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

const root = "../.."

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	fenceRE   = regexp.MustCompile("^\\s*(```|~~~)")
	mdLinkRE  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
)

func TestRelativeLinksResolve(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{filepath.Join(root, "README.md")}, pages...)
	anchors := map[string]map[string]bool{}
	for _, page := range pages {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range links(string(b)) {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			file := page
			if path != "" {
				file = filepath.Join(filepath.Dir(page), path)
			}
			rel, _ := filepath.Rel(root, file)
			if _, err := os.Stat(file); err != nil {
				t.Errorf("%s: broken link %s: %v", name(page), target, err)
				continue
			}
			if frag == "" || !strings.HasSuffix(file, ".md") {
				continue
			}
			if anchors[file] == nil {
				anchors[file] = headings(t, file)
			}
			if !anchors[file][frag] {
				t.Errorf("%s: link %s: no heading with anchor #%s in %s", name(page), target, frag, rel)
			}
		}
	}
}

func name(page string) string {
	rel, _ := filepath.Rel(root, page)
	return filepath.ToSlash(rel)
}

// links returns the targets of the markdown links outside code blocks and
// code spans.
func links(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range linkRE.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

func stripCodeSpans(line string) string {
	parts := strings.Split(line, "`")
	for i := 1; i < len(parts); i += 2 {
		parts[i] = ""
	}
	return strings.Join(parts, "")
}

// headings returns the GitHub anchors of a page's headings: lower case,
// punctuation dropped, spaces to hyphens, repeats numbered -1, -2, ….
func headings(t *testing.T, file string) map[string]bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if fenceRE.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := headingRE.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		a := slug(m[1])
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(h string) string {
	h = mdLinkRE.ReplaceAllString(h, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		"1. Shape":                                     "1-shape",
		"2.1 Getting the plan":                         "21-getting-the-plan",
		"Kubernetes: the Helm chart":                   "kubernetes-the-helm-chart",
		"Prestroid as Trino Gateway's brain":           "prestroid-as-trino-gateways-brain",
		"6. Trino protocol facts that shape the proxy": "6-trino-protocol-facts-that-shape-the-proxy",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
