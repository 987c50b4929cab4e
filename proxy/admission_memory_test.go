package proxy

import (
	"io"
	"log/slog"
	"testing"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/admission/admissiontest"
	"github.com/prestroid/prestroid/proxy/routing"
)

// TestAdmissionOnPredictedMemory: the proxy charges each query's
// predicted peak memory to the budgets, the class's among them: a second
// query that would put the class's clusters over their memory waits until
// the first one's last page.
func TestAdmissionOnPredictedMemory(t *testing.T) {
	admissiontest.ForEach(t, func(t *testing.T, _ admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		stub, posts := statefulStub(t)
		addr, _ := serveTest(t, Options{
			Clusters:  []ClusterConfig{{Name: "default", URL: stub.URL, Class: "only"}},
			Classes:   []routing.CostClass{{Name: "only"}},
			Estimator: &fixedEstimator{}, MonitorInterval: -1,
			Admission: opts(admission.Options{ClassMaxPeakMemory: map[string]float64{"only": 4 << 30}}),
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))})
		p := addr

		first, _ := call(t, "POST", p+"/v1/statement", "SELECT 1 -- cpu=1 mem=3221225472", "alice")
		if first.Stats.State != "RUNNING" || posts.Load() != 1 {
			t.Fatalf("first query (3 GiB) not submitted: %+v", first)
		}
		light, _ := call(t, "POST", p+"/v1/statement", "SELECT 2 -- cpu=1 mem=536870912", "bob")
		if light.Stats.State != "RUNNING" || posts.Load() != 2 {
			t.Fatalf("a 0.5 GiB query beside 3 GiB under 4 GiB not submitted: %+v", light)
		}
		second, _ := call(t, "POST", p+"/v1/statement", "SELECT 3 -- cpu=1 mem=2147483648", "carol")
		if second.Stats.State != "QUEUED" || posts.Load() != 2 {
			t.Fatalf("a 2 GiB query beside 3.5 GiB under 4 GiB not queued: %+v (posts %d)", second, posts.Load())
		}
		if last, _ := call(t, "GET", first.NextURI, "", "alice"); last.Stats.State != "FINISHED" {
			t.Fatalf("first query's last page: %+v", last)
		}
		admitted, _ := call(t, "GET", second.NextURI, "", "carol")
		if admitted.Stats.State != "RUNNING" || posts.Load() != 3 {
			t.Fatalf("the 2 GiB query not submitted once 3 GiB finished: %+v (posts %d)", admitted, posts.Load())
		}
	})
}
