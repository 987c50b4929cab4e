package frontdoor

import (
	"bytes"
	"strings"
	"testing"
)

func TestRedactLog(t *testing.T) {
	for _, tc := range []struct{ in, leak string }{
		{`contents: "GET / HTTP/1.1\r\nAuthorization: Basic QWxhZGRpbjpvcGVu\r\n"`, "QWxhZGRpbjpvcGVu"},
		{`authorization: Bearer eyJ.abc.def`, "eyJ.abc.def"},
		{`X-Trino-Extra-Credential: k=v`, "k=v"},
		{`GET /r/default.AAAABBBBCCCC/v1/statement/executing/q/ysecret/1`, "AAAABBBBCCCC"},
		{`GET /v1/statement/executing/q/ysecret/1`, "ysecret"},
		{`GET /v1/spooled/download/handle-secret`, "handle-secret"},
	} {
		if out := RedactLog(tc.in); strings.Contains(out, tc.leak) {
			t.Errorf("RedactLog(%q) = %q keeps %q", tc.in, out, tc.leak)
		}
	}
}

// FuzzBareLFGuard: the header-block guard decides the same however the
// bytes are split across reads, and agrees with a one-pass reference (a
// "\n\n" before the first "\r\n\r\n").
func FuzzBareLFGuard(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\nHost: x\n\n"), 3)
	f.Add([]byte("POST / HTTP/1.1\r\nContent-Length: 4\r\n\r\n\n\n\n\n"), 20)
	f.Add([]byte("GET / HTTP/1.1\r\nA: b\r\n\r"), 22)
	f.Fuzz(func(t *testing.T, b []byte, split int) {
		crlf, lf := bytes.Index(b, []byte("\r\n\r\n")), bytes.Index(b, []byte("\n\n"))
		want := lf >= 0 && (crlf < 0 || lf < crlf)
		whole := (&guardConn{}).scan(b)
		if split < 0 {
			split = -split
		}
		c := &guardConn{}
		k := split % (len(b) + 1)
		parts := c.scan(b[:k]) || (!c.inBody && c.scan(b[k:]))
		// And in small pieces (1 to 4 bytes), as a slow client sends them.
		step := split%4 + 1
		small := false
		c = &guardConn{}
		for i := 0; i < len(b) && !small && !c.inBody; i += step {
			small = c.scan(b[i:min(i+step, len(b))])
		}
		if whole != want || parts != want || small != want {
			t.Fatalf("%q split at %d / in %d-byte pieces: whole %v, parts %v, pieces %v, want %v", b, k, step, whole, parts, small, want)
		}
	})
}
