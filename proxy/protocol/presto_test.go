package protocol

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/prestroid/prestroid/internal/dialect"
)

// PrestoDB's URIs carry the slug as a query parameter
// (/v1/statement/executing/{id}/{token}?slug=…), where Trino's carry it in
// the path; its partial cancel is DELETE /v1/stage/{id}.{stage}.
func TestPrestoPaths(t *testing.T) {
	s, err := NewSigner([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	const id = "20261205_174539_00005_ts93y"
	for _, target := range []string{
		"/v1/statement/queued/" + id + "/1?slug=xsecretslug",
		"/v1/statement/executing/" + id + "/2?slug=xsecretslug",
	} {
		routed := s.RoutedPath("presto", target)
		t.Run("a routed poll names its query: "+target, func(t *testing.T) {
			if got := PolledQueryID(routed); got != id {
				t.Errorf("PolledQueryID = %q", got)
			}
			if got := StatementQueryID(target); got != id {
				t.Errorf("StatementQueryID = %q", got)
			}
		})
		t.Run("the token covers the slug: "+target, func(t *testing.T) {
			tok, tgt, ok := SplitRouted(routed)
			if !ok || tgt != target {
				t.Fatalf("SplitRouted = %q %q %v", tok, tgt, ok)
			}
			if c, err := s.Verify(tok, tgt); err != nil || c != "presto" {
				t.Errorf("Verify = %q %v", c, err)
			}
			if _, err := s.Verify(tok, strings.Replace(tgt, "xsecretslug", "xotherslug", 1)); err == nil {
				t.Error("a token verified for another slug")
			}
		})
		t.Run("logs never show the slug: "+target, func(t *testing.T) {
			if got := RedactPath(routed); strings.Contains(got, "secretslug") || !strings.Contains(got, id) {
				t.Errorf("RedactPath = %q", got)
			}
		})
	}
	t.Run("a query id without a token is still read", func(t *testing.T) {
		if got := StatementQueryID("/v1/statement/executing/" + id + "?slug=x"); got != id {
			t.Errorf("StatementQueryID = %q", got)
		}
	})
	t.Run("a stage path names no statement", func(t *testing.T) {
		if got := StatementQueryID("/v1/stage/" + id + ".0"); got != "" {
			t.Errorf("StatementQueryID = %q", got)
		}
	})
}

func TestPrestoTransactions(t *testing.T) {
	t.Run("a PrestoDB transaction is tagged with its cluster once", func(t *testing.T) {
		var h fasthttp.ResponseHeader
		h.Set("X-Presto-Started-Transaction-Id", "abc")
		TagTransaction(&h, "presto")
		TagTransaction(&h, "presto")
		if got := string(h.Peek("X-Presto-Started-Transaction-Id")); got != "presto~abc" {
			t.Errorf("got %q", got)
		}
		if v := h.Peek("X-Trino-Started-Transaction-Id"); v != nil {
			t.Errorf("a Trino header appeared: %q", v)
		}
	})
	t.Run("a PrestoDB client's id names the cluster, and PrestoDB gets its own id back", func(t *testing.T) {
		var req fasthttp.Request
		req.Header.Set("X-Presto-User", "alice")
		req.Header.Set("X-Presto-Transaction-Id", "presto~abc")
		if c, ok := TransactionCluster(&req.Header); !ok || c != "presto" {
			t.Errorf("cluster %q %v", c, ok)
		}
		StripTransactionCluster(&req)
		if got := string(req.Header.Peek("X-Presto-Transaction-Id")); got != "abc" {
			t.Errorf("forwarded %q", got)
		}
	})
	t.Run("a Trino client's id is read under Trino's name only", func(t *testing.T) {
		var h fasthttp.RequestHeader
		h.Set("X-Trino-User", "alice")
		h.Set("X-Presto-Transaction-Id", "presto~abc")
		if c, ok := TransactionCluster(&h); ok {
			t.Errorf("a legacy header named cluster %q", c)
		}
	})
}

func TestDialect(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers []string
		want    dialect.Engine
	}{
		{"a Trino client", []string{"X-Trino-User", "X-Trino-Source"}, dialect.Trino},
		{"a PrestoDB client", []string{"x-presto-user", "X-Presto-Catalog"}, dialect.Presto},
		{"an old Trino client with a legacy header", []string{"X-Presto-Client-Info", "X-Trino-User"}, dialect.Trino},
		{"a bare request", []string{"Authorization"}, dialect.Unknown},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h fasthttp.RequestHeader
			for _, k := range c.headers {
				h.Set(k, "v")
			}
			if got := Dialect(&h); got != c.want {
				t.Errorf("Dialect = %v, want %v", got, c.want)
			}
		})
	}
}

// A PrestoDB caller's session reaches the estimator under Trino's names,
// every value in order; what Trino's rule drops is dropped under either
// name.
func TestCallerHeadersPresto(t *testing.T) {
	var h fasthttp.RequestHeader
	h.Set("Authorization", "Bearer t")
	h.Set("X-Presto-User", "alice")
	h.Add("X-Presto-Session", "a=1")
	h.Add("X-Presto-Session", "b=2")
	h.Set("X-Presto-Catalog", "tpch")
	h.Set("X-Presto-Transaction-Id", "presto~tx")
	h.Set("Cookie", "c=1")
	got := CallerHeaders(&h)
	want := http.Header{
		"Authorization":   {"Bearer t"},
		"X-Trino-User":    {"alice"},
		"X-Trino-Session": {"a=1", "b=2"},
		"X-Trino-Catalog": {"tpch"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("CallerHeaders = %v\nwant %v", got, want)
	}
	if back := dialect.For(got, dialect.Presto); back.Get("X-Presto-User") != "alice" || len(back.Values("X-Presto-Session")) != 2 {
		t.Errorf("renamed back for PrestoDB: %v", back)
	}
}

// Every value of PrestoDB's multi-valued response headers crosses the
// proxy in order, as Trino's do.
func TestCopyPrestoHeaders(t *testing.T) {
	var up fasthttp.ResponseHeader
	up.Add("X-Presto-Set-Session", "a=1")
	up.Add("X-Presto-Set-Session", "b=2")
	up.Add("X-Presto-Added-Prepare", "q1=SELECT+1")
	up.Add("X-Presto-Added-Prepare", "q2=SELECT+2")
	up.Set("X-Presto-Set-Catalog", "tpch")
	var out fasthttp.ResponseHeader
	CopyResponseHeaders(&out, &up, false)
	for k, want := range map[string][]string{
		"X-Presto-Set-Session":   {"a=1", "b=2"},
		"X-Presto-Added-Prepare": {"q1=SELECT+1", "q2=SELECT+2"},
		"X-Presto-Set-Catalog":   {"tpch"},
	} {
		var got []string
		for _, v := range out.PeekAll(k) {
			got = append(got, string(v))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	var in, req fasthttp.RequestHeader
	in.Set("X-Presto-User", "alice")
	in.Add("X-Presto-Session", "a=1")
	in.Add("X-Presto-Session", "b=2")
	in.Add("X-Presto-Prepared-Statement", "q1=SELECT+1")
	in.Add("X-Presto-Prepared-Statement", "q2=SELECT+2")
	CopyRequestHeaders(&req, &in, false)
	for k, want := range map[string][]string{
		"X-Presto-Session":            {"a=1", "b=2"},
		"X-Presto-Prepared-Statement": {"q1=SELECT+1", "q2=SELECT+2"},
		"X-Presto-User":               {"alice"},
	} {
		var got []string
		for _, v := range req.PeekAll(k) {
			got = append(got, string(v))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("request %s = %q, want %q", k, got, want)
		}
	}
}
