package bundle

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

func TestNoveltySection(t *testing.T) {
	t.Run("the default bundle names the families it was trained on and widens off them", func(t *testing.T) {
		b, err := ReadFS(defaultFS(t, nil), "default")
		if err != nil {
			t.Fatal(err)
		}
		n := b.Manifest.Novelty
		if n == nil || n.Families < 100 || len(n.familiar) != n.Families || !(n.Widen > 1 && n.Widen <= maxWiden) {
			t.Fatalf("novelty %+v: want the training families and a widening above 1", n)
		}
		file := string(readFile(t, defaultFS(t, nil), NoveltyFile))
		first, _, _ := strings.Cut(file, "\n")
		id := parseID(t, first)
		if !n.Familiar(id) {
			t.Errorf("Familiar(%016x) = false: the file's first family", id)
		}
		other := id ^ 1
		if !strings.Contains(file, fmt.Sprintf("%016x", other)) && n.Familiar(other) {
			t.Errorf("Familiar(%016x) = true: a family the file does not hold", other)
		}
	})
	t.Run("a bundle without the section widens nothing", func(t *testing.T) {
		fsys := defaultFS(t, func(m map[string]any) { delete(m, "novelty") })
		delete(fsys.(fstest.MapFS), NoveltyFile)
		b, err := ReadFS(fsys, "old")
		if err != nil || b.Manifest.Novelty != nil {
			t.Fatalf("err %v, novelty %+v: want an older bundle read as before", err, b.Manifest.Novelty)
		}
	})
	for _, c := range []struct {
		name, file, want string
		edit             func(n map[string]any)
		families         string
	}{
		{name: "another file name", file: ManifestFile, want: `novelty.file "seen.txt"`,
			edit: func(n map[string]any) { n["file"] = "seen.txt" }},
		{name: "a narrowing", file: ManifestFile, want: "novelty.widen 0.8",
			edit: func(n map[string]any) { n["widen"] = 0.8 }},
		{name: "a widening beyond 4", file: ManifestFile, want: "novelty.widen 5",
			edit: func(n map[string]any) { n["widen"] = 5.0 }},
		{name: "no quantile", file: ManifestFile, want: "novelty.quantile 0",
			edit: func(n map[string]any) { delete(n, "quantile") }},
		{name: "a ratio of another quantile than the served intervals'", file: ManifestFile, want: "novelty.quantile 0.9: want 0.8",
			edit: func(n map[string]any) { n["quantile"] = 0.9 }},
		{name: "a truncated file", file: NoveltyFile, want: "holds 2 families, the manifest says",
			families: "0123456789abcdef\nfedcba9876543210\n"},
		{name: "a malformed line", file: NoveltyFile, want: `line 2: "xyz" is not 16 hex digits`,
			families: "0123456789abcdef\nxyz\n"},
		{name: "no file", file: NoveltyFile, want: "missing"},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			fsys := defaultFS(t, func(m map[string]any) {
				if c.edit != nil {
					c.edit(m["novelty"].(map[string]any))
				}
			}).(fstest.MapFS)
			switch {
			case c.families != "":
				fsys[NoveltyFile] = &fstest.MapFile{Data: []byte(c.families)}
			case c.name == "no file":
				delete(fsys, NoveltyFile)
			}
			_, err := ReadFS(fsys, "bad")
			var be *BundleError
			if !errors.As(err, &be) || be.File != c.file || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v: want a BundleError on %s saying %q", err, c.file, c.want)
			}
		})
	}
}

func readFile(t *testing.T, fsys fs.FS, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parseID(t *testing.T, s string) uint64 {
	t.Helper()
	n := &Novelty{Families: 1}
	if err := n.readFamilies([]byte(s)); err != nil {
		t.Fatal(err)
	}
	for id := range n.familiar {
		return id
	}
	return 0
}
