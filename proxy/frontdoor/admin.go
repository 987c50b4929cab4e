package frontdoor

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/valyala/fasthttp"
)

// AdminTokenHeader carries the admin token beside the caller's own
// Authorization (the estimate endpoints plan as the caller).
const AdminTokenHeader = "X-Prestroid-Admin-Token"

// AdminToken guards the admin endpoints. Only its SHA-256 is kept, and
// tokens are compared in constant time. The zero value (no token
// configured) lets every request through.
type AdminToken struct{ sum []byte }

// NewAdminToken is the guard of token (admin_token); "" guards nothing.
func NewAdminToken(token string) AdminToken {
	if token == "" {
		return AdminToken{}
	}
	h := sha256.Sum256([]byte(token))
	return AdminToken{sum: h[:]}
}

// Authorize reports whether h carries the token, as "Authorization:
// Bearer TOKEN" (what Prometheus' scrape authorization sends) or in
// AdminTokenHeader, and removes it from h either way, so that it never
// reaches a cluster. A Bearer value that is not the token stays: it is
// the caller's own credential.
func (t AdminToken) Authorize(h *fasthttp.RequestHeader) bool {
	if len(t.sum) == 0 {
		h.Del(AdminTokenHeader)
		return true
	}
	ok := false
	if v := h.Peek(AdminTokenHeader); len(v) > 0 {
		ok = t.matches(v)
		h.Del(AdminTokenHeader)
	}
	if auth := h.Peek(fasthttp.HeaderAuthorization); len(auth) > 7 && bytes.EqualFold(auth[:7], []byte("Bearer ")) {
		if t.matches(bytes.TrimSpace(auth[7:])) {
			ok = true
			h.Del(fasthttp.HeaderAuthorization) // the admin token, not the caller's credentials
		}
	}
	return ok
}

func (t AdminToken) matches(v []byte) bool {
	got := sha256.Sum256(v)
	return subtle.ConstantTimeCompare(got[:], t.sum) == 1
}
