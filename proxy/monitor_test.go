package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestGaugeReadsTrinosOpenMetricsLines(t *testing.T) {
	body := []byte("# TYPE trino_execution_name_QueryManager_RunningQueries gauge\n" +
		"trino_execution_name_QueryManager_RunningQueries 7.0\n" +
		"trino_execution_name_QueryManager_RunningQueriesX 99.0\n" +
		"# TYPE trino_execution_name_QueryManager_QueuedQueries gauge\n" +
		"trino_execution_name_QueryManager_QueuedQueries\t2.0E0\n# EOF\n")
	for _, tc := range []struct {
		name string
		want int
		ok   bool
	}{
		{gaugeRunning, 7, true},
		{gaugeQueued, 2, true},
		{"trino_missing", 0, false},
	} {
		got, ok := gauge(body, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("gauge(%s) = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	for _, bad := range []string{"NaN", "-1", "1e12", "x"} {
		if _, ok := gauge([]byte(gaugeQueued+" "+bad+"\n"), gaugeQueued); ok {
			t.Errorf("gauge accepted %q", bad)
		}
	}
}

// TestMonitorTypes: each monitor type reads load from its own endpoint
// (and only it), and a response over monitor_max_bytes leaves the load
// unknown without marking the cluster down.
func TestMonitorTypes(t *testing.T) {
	hugeList := "[" + strings.Repeat(`{"state":"RUNNING"},`, 200000) + `{"state":"QUEUED"}]` // ~4 MB
	var paths = make(chan string, 1000)
	stub := newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
		paths <- r.URL.Path
		switch r.URL.Path {
		case "/v1/info":
			io.WriteString(w, `{"starting":false}`)
		case "/metrics":
			if got := r.URL.Query()["name[]"]; len(got) != 2 {
				t.Errorf("/metrics asked for %v, want the two gauges", got)
			}
			fmt.Fprintf(w, "# TYPE %s gauge\n%s 3.0\n# TYPE %s gauge\n%s 4.0\n# EOF\n", gaugeRunning, gaugeRunning, gaugeQueued, gaugeQueued)
		case "/v1/query":
			io.WriteString(w, hugeList)
		}
	})
	for _, tc := range []struct {
		typ      string
		maxBytes int
		running  int
		queued   int
		loadErr  bool
		path     string
	}{
		{MonitorMetrics, 0, 3, 4, false, "/metrics"},
		{MonitorQueryList, 8 << 20, 200000, 1, false, "/v1/query"},
		{MonitorQueryList, 0, 0, 0, true, "/v1/query"}, // 4 MB over the 1 MiB default
		{MonitorInfo, 0, 0, 0, false, ""},
	} {
		t.Run(fmt.Sprintf("%s with max %d bytes", tc.typ, tc.maxBytes), func(t *testing.T) {
			s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "c", URL: stub.URL}}, MonitorInterval: time.Hour,
				MonitorType: tc.typ, MonitorMaxBytes: tc.maxBytes, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))

			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			for len(paths) > 0 {
				<-paths
			}
			c := s.byName["c"]
			s.checkCluster(c)
			st := c.state.Load()
			if !st.Healthy || st.Running != tc.running || st.Queued != tc.queued || (st.LoadErr != "") != tc.loadErr {
				t.Errorf("state %+v; want healthy, running %d, queued %d, load error %v", st, tc.running, tc.queued, tc.loadErr)
			}
			var got []string
			for len(paths) > 0 {
				if p := <-paths; p != "/v1/info" {
					got = append(got, p)
				}
			}
			if want := tc.path; (want == "" && len(got) != 0) || (want != "" && (len(got) == 0 || got[len(got)-1] != want)) {
				t.Errorf("load read from %v, want %q", got, want)
			}
		})
	}
}
