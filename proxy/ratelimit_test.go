package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/admission/admissiontest"
	"github.com/prestroid/prestroid/proxy/frontdoor"
	"github.com/prestroid/prestroid/testing/redistest"
)

func TestRateLimits(t *testing.T) {
	admissiontest.ForEach(t, func(t *testing.T, _ admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		stub, posts := statefulStub(t)
		// Budgets off: rate limits apply on their own.
		p, srv := admissionProxy(t, stub.URL, nil, opts(admission.Options{
			Rate:       admission.RateLimits{UserRate: 0.5, UserBurst: 2, GroupRate: 0.5, GroupBurst: 3},
			UserGroups: map[string]string{"alice": "team", "bob": "team", "carol": "team", "dave": "team"}}))
		for i := 0; i < 2; i++ {
			if pg, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice"); resp.StatusCode != 200 || pg.Stats.State != "RUNNING" {
				t.Fatalf("query %d within the burst: status %d %+v", i, resp.StatusCode, pg)
			}
		}
		t.Run("past the user's burst: 503 with Retry-After, nothing sent to Trino", func(t *testing.T) {
			_, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice")
			ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			if resp.StatusCode != 503 || ra < 1 || ra > 2 {
				t.Fatalf("status %d Retry-After %q", resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			if posts.Load() != 2 {
				t.Errorf("a refused query reached Trino (%d posts)", posts.Load())
			}
			if v := testutil.ToFloat64(srv.metrics.RateLimited.WithLabelValues("user")); v != 1 {
				t.Errorf("prestroid_rate_limited_total{scope=user} = %v", v)
			}
		})
		t.Run("the group's bucket holds across its users", func(t *testing.T) {
			if _, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "bob"); resp.StatusCode != 200 {
				t.Fatalf("bob: status %d", resp.StatusCode)
			}
			// alice's two and bob's one took the group's three tokens (the
			// refused query took none).
			_, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "carol")
			if resp.StatusCode != 503 {
				t.Fatalf("carol past the group's burst: status %d", resp.StatusCode)
			}
			if v := testutil.ToFloat64(srv.metrics.RateLimited.WithLabelValues("group")); v != 1 {
				t.Errorf("prestroid_rate_limited_total{scope=group} = %v", v)
			}
		})
		t.Run("a user's bucket refills at the rate", func(t *testing.T) {
			time.Sleep(2100 * time.Millisecond) // one token at 0.5/s
			if _, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice"); resp.StatusCode != 200 {
				t.Fatalf("alice after a refill: status %d", resp.StatusCode)
			}
		})
	})
}

func TestRateLimitsSharedByReplicas(t *testing.T) {
	rs := redistest.Start(t)
	stub, posts := statefulStub(t)
	o := &admission.Options{Rate: admission.RateLimits{UserRate: 0.1, UserBurst: 3}, Redis: &admission.RedisOptions{URL: "redis://" + rs.Addr}}
	p1, _ := admissionProxy(t, stub.URL, nil, o)
	p2, _ := admissionProxy(t, stub.URL, nil, o)
	var codes []string
	for i := 0; i < 6; i++ {
		p := p1
		if i%2 == 1 {
			p = p2
		}
		_, resp := call(t, "POST", p+"/v1/statement", "SELECT 1", "alice")
		codes = append(codes, strconv.Itoa(resp.StatusCode))
	}
	if got := strings.Join(codes, " "); got != "200 200 200 503 503 503" || posts.Load() != 3 {
		t.Fatalf("alternating replicas: %s (posts %d); want one bucket of 3 for both", got, posts.Load())
	}
}

// Under identity: verified the rate limits run before the cluster has
// verified the caller: a forger claiming alice (her name in a Basic header
// with a wrong password, or beside a token the cluster refuses) spends the
// bucket of the credential it sent, and alice, with her own, is not
// refused.
func TestRateLimitsKeyOnTheVerifiedIdentity(t *testing.T) {
	up := newAuthStub(t)
	base, srv := identityProxy(t, Options{Clusters: []ClusterConfig{{Name: "default", URL: up.URL}}, Identity: frontdoor.IdentityVerified,
		Admission: &admission.Options{Rate: admission.RateLimits{UserRate: 0.001, UserBurst: 2, GroupRate: 0.001, GroupBurst: 3},
			UserGroups: map[string]string{"alice": "team"}}})
	alice := map[string]string{"Authorization": basic("alice", "secret"), "X-Trino-User": "alice"}
	if _, resp, body := submit(t, base, alice, "SELECT 1"); resp.StatusCode != 200 {
		t.Fatalf("alice's first query: status %d %s", resp.StatusCode, body)
	}
	for _, forged := range []map[string]string{
		{"Authorization": basic("alice", "guess"), "X-Trino-User": "alice"},
		{"Authorization": "Bearer forged", "X-Trino-User": "alice"},
	} {
		refused := 0
		for range 4 {
			_, resp, _ := submit(t, base, forged, "SELECT 1")
			switch resp.StatusCode {
			case 401: // the cluster refused the credential
			case 503:
				refused++
			default:
				t.Fatalf("forger %q: status %d", forged["Authorization"], resp.StatusCode)
			}
		}
		if refused != 2 {
			t.Errorf("forger %q: %d of 4 refused by its own bucket (burst 2), want 2", forged["Authorization"], refused)
		}
	}
	// alice's bucket (and her group's) is untouched by the forgers: her
	// accepted credential keys her own, burst 2.
	for i := range 2 {
		if _, resp, body := submit(t, base, alice, "SELECT 1"); resp.StatusCode != 200 {
			t.Fatalf("alice's query %d after the forgers: status %d %s", i, resp.StatusCode, body)
		}
	}
	if _, resp, _ := submit(t, base, alice, "SELECT 1"); resp.StatusCode != 503 {
		t.Errorf("alice past her own burst: status %d, want 503", resp.StatusCode)
	}
	if v := testutil.ToFloat64(srv.metrics.RateLimited.WithLabelValues("user")); v != 5 {
		t.Errorf("prestroid_rate_limited_total{scope=user} = %v, want 5", v)
	}
}
