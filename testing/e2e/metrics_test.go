package e2e

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestMetricsValue reads series by name and labels from a real exposition
// text, histograms' count and sum included.
func TestMetricsValue(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte(`# HELP q Queries.
# TYPE q counter
q{cluster="a",state="FINISHED"} 3
q{cluster="b",state="FINISHED"} 4
q{cluster="a",state="FAILED"} 1
# TYPE g gauge
g 7
# TYPE h histogram
h_bucket{le="1"} 2
h_bucket{le="+Inf"} 5
h_sum 9.5
h_count 5
`))
	}))
	defer srv.Close()
	m := ScrapeMetrics(t, srv.URL)
	for _, tc := range []struct {
		series string
		want   float64
		ok     bool
	}{
		{`q{cluster="a",state="FINISHED"}`, 3, true},
		{`q{state="FINISHED"}`, 7, true},
		{`q`, 8, true},
		{`q{cluster="c"}`, 0, false},
		{`g`, 7, true},
		{`h_count`, 5, true},
		{`h_sum`, 9.5, true},
		{`missing`, 0, false},
	} {
		if v, ok := m.Value(tc.series); v != tc.want || ok != tc.ok {
			t.Errorf("Value(%s) = %v, %v; want %v, %v", tc.series, v, ok, tc.want, tc.ok)
		}
	}
}
