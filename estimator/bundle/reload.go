package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// BundleStamp summarizes the bundle files' sizes and modification times;
// a change means the bundle was rewritten.
func Stamp(dir string) string {
	var b strings.Builder
	for _, f := range Files {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			fmt.Fprintf(&b, "%s:missing;", f)
			continue
		}
		fmt.Fprintf(&b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
	}
	return b.String()
}

// LoadBundleDir reads the bundle in dir and loads it with rt: the loader
// WatchBundle needs.
func LoadDir(rt Runtime, o ModelOptions) func(dir string) (*Model, error) {
	return func(dir string) (*Model, error) {
		b, err := Read(dir)
		if err != nil {
			return nil, err
		}
		return LoadModel(b, rt, o)
	}
}
