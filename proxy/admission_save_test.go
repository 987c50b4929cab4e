package proxy

import (
	"bytes"
	"math"
	"testing"

	"github.com/valyala/fasthttp"
)

// A queued query's saved form must survive what the estimator puts in an
// estimate: its Learn value marks unknown numbers with NaN, which JSON
// cannot hold (the replicas e2e test lost queued queries to that).
func TestSavedQueryKeepsItsEstimateAndIdentity(t *testing.T) {
	sg, err := NewSigner(bytes.Repeat([]byte("k"), 32))
	if err != nil {
		t.Fatal(err)
	}
	newServer := func() *Server {
		s, err := New(Options{Signer: sg, Admission: &AdmissionOptions{MaxQueries: 1},
			Clusters: []ClusterConfig{{Name: "default", URL: "http://127.0.0.1:1"}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.admit.Close() })
		return s
	}
	here, there := newServer(), newServer()
	type basis struct{ LnModel, LnCost float64 }
	learn := &basis{LnModel: math.NaN(), LnCost: 1.5}
	var req fasthttp.Request
	req.Header.SetMethod("POST")
	req.SetRequestURI("/v1/statement")
	req.Header.SetHost("127.0.0.1:8080")
	req.Header.Set("X-Trino-User", "alice")
	req.SetBodyString("SELECT count(*) FROM tpch.tiny.nation")
	d := &decision{Decision: Decision{Kind: KindRouted, Cluster: "default", Class: "small"}, cluster: here.clusters[0],
		est: Estimate{Estimated: true, CPUSeconds: 2.5, Source: SourceModel, Sigma: 0.4, Learn: learn}, estimate: true,
		identity: Identity{User: "alice", Verified: true, Source: "basic"}}

	for _, c := range []struct {
		name      string
		restoreOn *Server
		wantLearn bool
	}{
		{"restored by the replica that queued it: the estimator's value comes back", here, true},
		{"restored by another replica: the estimate and identity, without the estimator's value", there, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := here.saveQuery("q-"+c.name, &req, d)
			var out fasthttp.Request
			got, err := c.restoreOn.restoreQuery("q-"+c.name, p, &out)
			if err != nil {
				t.Fatal(err)
			}
			if string(out.Body()) != string(req.Body()) || string(out.Header.Peek("X-Trino-User")) != "alice" {
				t.Errorf("request: body %q, user %q", out.Body(), out.Header.Peek("X-Trino-User"))
			}
			if !got.estimate || got.est.CPUSeconds != 2.5 || got.est.Source != SourceModel || got.est.Sigma != 0.4 {
				t.Errorf("estimate %+v (estimated %v)", got.est, got.estimate)
			}
			if got.identity != d.identity || got.Class != "small" {
				t.Errorf("identity %+v, class %q", got.identity, got.Class)
			}
			if (got.est.Learn == learn) != c.wantLearn {
				t.Errorf("Learn = %v, want it back: %v", got.est.Learn, c.wantLearn)
			}
		})
	}
}

func TestLearnKeepIsBounded(t *testing.T) {
	k := newLearnKeep(2)
	k.put("a", 1)
	k.put("b", 2)
	k.put("c", 3)
	if v := k.take("a"); v != nil {
		t.Errorf("the oldest entry survived past the bound: %v", v)
	}
	if v := k.take("c"); v != 3 {
		t.Errorf("take(c) = %v", v)
	}
	if v := k.take("c"); v != nil {
		t.Errorf("taken twice: %v", v)
	}
	if len(k.order) > 2 {
		t.Errorf("order holds %d ids, bound 2", len(k.order))
	}
}
