package protocol

import (
	"errors"
	"strings"
	"testing"
)

func TestRouteTokens(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	target := "/v1/statement/executing/20260101_000000_00001_abcde/y123/4"
	tok := s.Token("small", target)

	t.Run("a token verifies for its own cluster and target", func(t *testing.T) {
		c, err := s.Verify(tok, target)
		if err != nil || c != "small" {
			t.Fatalf("Verify = %q, %v", c, err)
		}
	})
	t.Run("a token does not verify for another target", func(t *testing.T) {
		if _, err := s.Verify(tok, target+"5"); !errors.Is(err, ErrBadToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("renaming the cluster breaks the token", func(t *testing.T) {
		forged := "large" + tok[strings.LastIndexByte(tok, '.'):]
		if _, err := s.Verify(forged, target); !errors.Is(err, ErrBadToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("every single-character change is rejected", func(t *testing.T) {
		const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
		for i := range tok {
			for _, c := range []byte(alphabet) {
				if c == tok[i] {
					continue
				}
				b := []byte(tok)
				b[i] = c
				if _, err := s.Verify(string(b), target); err == nil {
					t.Fatalf("tampered token %q verified", b)
				}
			}
		}
	})
	t.Run("another secret rejects the token", func(t *testing.T) {
		other, _ := NewSigner([]byte(strings.Repeat("x", 32)))
		if _, err := other.Verify(tok, target); !errors.Is(err, ErrBadToken) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("UI paths share one scope per cluster", func(t *testing.T) {
		ui := s.Token("small", "/ui/query.html?x")
		if c, err := s.Verify(ui, "/ui/assets/app.js"); err != nil || c != "small" {
			t.Fatalf("Verify = %q, %v", c, err)
		}
		if _, err := s.Verify(ui, "/v1/statement/queued/x/y/1"); err == nil {
			t.Fatal("a UI token verified for a statement path")
		}
	})
	t.Run("routed paths split back into token and target", func(t *testing.T) {
		tk, tg, ok := SplitRouted(s.RoutedPath("small", target))
		if !ok || tk != tok || tg != target {
			t.Fatalf("SplitRouted = %q %q %v", tk, tg, ok)
		}
		for _, bad := range []string{"/r/", "/r//v1", "/v1/statement", "/r/abc"} {
			if _, _, ok := SplitRouted(bad); ok {
				t.Errorf("SplitRouted(%q) ok", bad)
			}
		}
	})
}

// FuzzRouteToken: no input verifies unless it is exactly a token the signer
// issued for that target, and nothing panics.
func FuzzRouteToken(f *testing.F) {
	s, _ := NewSigner([]byte(strings.Repeat("k", 32)))
	f.Add(s.Token("default", "/v1/statement/queued/a/b/1"), "/v1/statement/queued/a/b/1")
	f.Add("default.", "/v1")
	f.Add(".AAAAAAAAAAAAAAAAAAAAAA", "/ui/")
	f.Add("a.b.c", "")
	f.Fuzz(func(t *testing.T, token, target string) {
		c, err := s.Verify(token, target)
		if err != nil {
			return
		}
		if s.Token(c, target) != token {
			t.Fatalf("token %q verified for %q but is not the issued one", token, target)
		}
		if _, tg, ok := SplitRouted(routePrefix + token + "/" + strings.TrimPrefix(target, "/")); ok && tg == "" {
			t.Fatal("empty target")
		}
	})
}
