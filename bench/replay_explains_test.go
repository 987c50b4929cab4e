package bench

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The replay's EXPLAIN report reads each proxy's
// prestroid_explains_by_reason_total: per 1,000 statements over the run
// and over its last half.
func TestReportExplains(t *testing.T) {
	hot, learn := 30, 40
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "# TYPE prestroid_explains_by_reason_total counter\n"+
			"prestroid_explains_by_reason_total{reason=\"hot\"} %d\nprestroid_explains_by_reason_total{reason=\"learn\"} %d\n"+
			"prestroid_explains_by_reason_total{reason=\"skipped_known\"} 50\nprestroid_explains_total{cluster=\"a\"} 9\n", hot, learn)
	}))
	defer srv.Close()
	st := []ReplaySetting{{Name: "s", ProxyURL: srv.URL}}
	half := []map[string]float64{{"hot": 20, "learn": 40, "skipped_known": 10}}
	var b bytes.Buffer
	reportExplains(&b, st, 200, 100, half)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("report:\n%s", b.String())
	}
	// All 200: 30 hot + 40 learn = 350 per 1,000; the last 100: 10 hot.
	if f := strings.Fields(lines[2]); f[0] != "s" || f[1] != "350" || f[2] != "150" || f[3] != "200" || f[5] != "250" {
		t.Errorf("all: %q", lines[2])
	}
	if f := strings.Fields(lines[4]); f[0] != "s" || f[1] != "100" || f[2] != "100" || f[3] != "0" || f[5] != "400" {
		t.Errorf("last half: %q", lines[4])
	}
}
