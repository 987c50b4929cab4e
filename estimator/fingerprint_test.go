package estimator

import (
	"testing"
	"unicode/utf8"
)

// FuzzFingerprint: any input is fingerprinted without panicking, and a
// fingerprint is its own fingerprint.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{"SELECT 1", "select 'a''b' -- x\n", `SELECT "q""x" FROM t /* c`, "1e+5.3e-2", "'unterminated", `"open`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fp := Fingerprint(s)
		if !utf8.ValidString(s) {
			return
		}
		if again := Fingerprint(fp); again != fp {
			t.Fatalf("Fingerprint(%q) = %q, refingerprinted %q", s, fp, again)
		}
	})
}
