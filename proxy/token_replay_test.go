package proxy

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/proxy/protocol"
)

// TestReplayedAndTruncatedTokensNeverReachUpstream: a valid route token
// replayed onto another query's path or onto another configured cluster, a
// token signed with another route secret, and truncated tokens all get 403
// and cause no request on either cluster (forged/replayed
// tokens). Controls: the genuine URIs work, and a signer with the proxy's
// own secret issues exactly the token the proxy handed out, so the other
// secret's token fails for its secret alone.
func TestReplayedAndTruncatedTokensNeverReachUpstream(t *testing.T) {
	var n atomic.Int32
	stubs := make([]*stubTrino, 2)
	for i := range stubs {
		stubs[i] = newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodPost {
				n.Add(1) // one query id per POST, so two queries have two paths
			}
			io.WriteString(w, strings.ReplaceAll(queuedPage(base), "_abcde", "_abcd"+string(rune('a'+n.Load()%26))))
		})
	}
	secret := []byte(strings.Repeat("s", 32))
	signer, err := protocol.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serveTest(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: stubs[0].URL}, {Name: "large", URL: stubs[1].URL}},
		Signer: signer, UpstreamTimeout: 2 * time.Second, MonitorInterval: -1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	p := addr

	nextURI := func() string {
		resp := post(t, p, nil)
		defer resp.Body.Close()
		var page struct{ NextURI string }
		json.NewDecoder(resp.Body).Decode(&page)
		if !strings.HasPrefix(page.NextURI, p+"/r/default.") {
			t.Fatalf("nextUri not routed through the proxy to default: %s", page.NextURI)
		}
		return page.NextURI
	}
	a, b := nextURI(), nextURI()
	tokA, targetA, _ := protocol.SplitRouted(strings.TrimPrefix(a, p))
	_, targetB, _ := protocol.SplitRouted(strings.TrimPrefix(b, p))
	if targetA == targetB {
		t.Fatalf("two queries with one path %s", targetA)
	}
	if got := signer.RoutedPath("default", targetA); p+got != a {
		t.Fatalf("the proxy's own secret signs %s, the proxy handed out %s", got, a)
	}
	other, _ := protocol.NewSigner([]byte(strings.Repeat("o", 32)))
	macA := tokA[strings.LastIndexByte(tokA, '.')+1:]

	before := stubs[0].hits.Load() + stubs[1].hits.Load()
	for name, u := range map[string]string{
		"A's token on B's path":          p + "/r/" + tokA + targetB,
		"A's token on A's path, shorter": p + "/r/" + tokA + targetA[:strings.LastIndexByte(targetA, '/')],
		"A's MAC for another cluster":    p + "/r/large." + macA + targetA,
		"another route secret":           p + other.RoutedPath("default", targetA),
		"one character cut from the MAC": p + "/r/" + tokA[:len(tokA)-1] + targetA,
		"half the MAC":                   p + "/r/default." + macA[:len(macA)/2] + targetA,
		"an empty MAC":                   p + "/r/default." + targetA,
		"the cluster name alone":         p + "/r/default" + targetA,
		"the MAC alone":                  p + "/r/" + macA + targetA,
	} {
		for _, m := range []string{"GET", "DELETE", "HEAD"} {
			req, _ := http.NewRequest(m, u, nil)
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(r.Body)
			r.Body.Close()
			if r.StatusCode != http.StatusForbidden {
				t.Errorf("%s: %s %s: status %d, want 403", name, m, u, r.StatusCode)
			}
		}
	}
	if n := stubs[0].hits.Load() + stubs[1].hits.Load() - before; n != 0 {
		t.Errorf("replayed, foreign and truncated tokens caused %d upstream requests", n)
	}
	for _, u := range []string{a, b} {
		r, err := http.Get(u)
		if err != nil || r.StatusCode != 200 {
			t.Fatalf("genuine nextUri %s: %v %v", u, r, err)
		}
		r.Body.Close()
	}
	if stubs[0].hits.Load() != before+2 || stubs[1].hits.Load() != 0 {
		t.Errorf("genuine polls: default %d requests (want %d), large %d (want 0)", stubs[0].hits.Load(), before+2,
			stubs[1].hits.Load())
	}
}
