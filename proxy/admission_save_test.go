package proxy

import (
	"bytes"
	"math"
	"testing"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/proxy/protocol"
	"github.com/prestroid/prestroid/proxy/routing"
	"github.com/valyala/fasthttp"
)

// A queued query's saved form carries everything the poll that submits it
// needs, on whichever replica: the request, the decision, the estimate
// with the estimator's Learn bytes (the outcome must still teach it), and
// the verified identity.
func TestSavedQueryKeepsItsEstimateAndIdentity(t *testing.T) {
	sg, err := protocol.NewSigner(bytes.Repeat([]byte("k"), 32))
	if err != nil {
		t.Fatal(err)
	}
	newServer := func() *Server {
		s, err := New(withDefaults(Options{Signer: sg, Admission: &admission.Options{MaxQueries: 1},
			Clusters: []ClusterConfig{{Name: "default", URL: "http://127.0.0.1:1"}}}))

		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.admit.Close() })
		return s
	}
	here, there := newServer(), newServer()
	learn := []byte(`{"x":"x:1","c":1.5,"src":4}`)
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/statement")
	req.Header.SetHost("127.0.0.1:8080")
	req.Header.Set("X-Trino-User", "alice")
	req.SetBodyString("SELECT count(*) FROM tpch.tiny.nation")
	d := &decision{Decision: routing.Decision{Kind: routing.KindRouted, Cluster: "default", Class: "small"}, cluster: here.clusters[0],
		est: estimate.Estimate{Estimated: true, CPUSeconds: 2.5, Source: estimate.SourceModel, Sigma: 0.4, Learn: learn}, estimate: true,
		identity: frontdoor.Identity{User: "alice", Verified: true, Source: "basic"}}

	for _, on := range []*Server{here, there} {
		p := here.saveQuery("q1", &req, d)
		var out fasthttp.Request
		got, err := on.restoreQuery("q1", p, &out)
		if err != nil {
			t.Fatal(err)
		}
		if string(out.Body()) != string(req.Body()) || string(out.Header.Peek("X-Trino-User")) != "alice" {
			t.Errorf("request: body %q, user %q", out.Body(), out.Header.Peek("X-Trino-User"))
		}
		if !got.estimate || got.est.CPUSeconds != 2.5 || got.est.Source != estimate.SourceModel || got.est.Sigma != 0.4 ||
			!bytes.Equal(got.est.Learn, learn) {
			t.Errorf("estimate %+v (estimated %v)", got.est, got.estimate)
		}
		if got.identity != d.identity || got.Class != "small" {
			t.Errorf("identity %+v, class %q", got.identity, got.Class)
		}
	}

	// A number JSON cannot hold in the estimate does not lose the query:
	// it is saved, and runs as decided, without the estimate.
	bad := *d
	bad.est.Sigma = math.Inf(1)
	var out fasthttp.Request
	got, err := there.restoreQuery("q2", here.saveQuery("q2", &req, &bad), &out)
	if err != nil {
		t.Fatal(err)
	}
	if got.estimate || got.Class != "small" || got.identity != d.identity || string(out.Body()) != string(req.Body()) {
		t.Errorf("an unsavable estimate: %+v", got)
	}
}
