package proxy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/proxy/admission"
	"github.com/prestroid/prestroid/proxy/admission/admissiontest"
	"github.com/prestroid/prestroid/proxy/routing"
)

// The console's JSON as a client reads it: the field names are the
// format (README.md, "Web console"), pinned here apart from the console's
// own types.
type (
	consoleDecisions struct {
		Capacity  int `json:"capacity"`
		Decisions []struct {
			QueryID  string `json:"query_id"`
			UIPath   string `json:"ui_path"`
			User     string `json:"user"`
			Cluster  string `json:"cluster"`
			Kind     string `json:"kind"`
			Decision string `json:"decision"`
			Estimate *struct {
				CPUSeconds float64 `json:"cpu_seconds"`
				Source     string  `json:"source"`
				Model      string  `json:"model"`
			} `json:"estimate"`
			State     string   `json:"state"`
			ActualCPU *float64 `json:"actual_cpu_seconds"`
			QError    *float64 `json:"qerror"`
		} `json:"decisions"`
	}
	consoleClusters struct {
		WindowMinutes int  `json:"window_minutes"`
		Monitor       bool `json:"monitor"`
		Clusters      []struct {
			Name    string `json:"name"`
			URL     string `json:"url"`
			Default bool   `json:"default"`
			Healthy bool   `json:"healthy"`
			Routed  int64  `json:"routed"`
		} `json:"clusters"`
	}
	consoleEstimatorView struct {
		Estimator bool `json:"estimator"`
		Model     *struct {
			ID     string    `json:"id"`
			Loaded time.Time `json:"loaded"`
		} `json:"model"`
		Caches []struct {
			HitRate *float64 `json:"hit_rate"`
		} `json:"caches"`
		History *struct {
			Entries int `json:"entries"`
		} `json:"history"`
		Sources []struct {
			Estimates int      `json:"estimates"`
			Finished  int      `json:"finished"`
			QErrorP50 *float64 `json:"qerror_p50"`
		} `json:"sources"`
		QErrorSeries []struct {
			P90 float64 `json:"p90"`
		} `json:"qerror_series"`
		Points []struct {
			Predicted float64 `json:"predicted_cpu_seconds"`
			Actual    float64 `json:"actual_cpu_seconds"`
			QError    float64 `json:"qerror"`
		} `json:"points"`
	}
	consoleQueue struct {
		Enabled  bool               `json:"enabled"`
		Queued   int                `json:"queued"`
		InFlight int                `json:"in_flight"`
		Limits   map[string]float64 `json:"limits"`
		Queries  []consoleQueued    `json:"queries"`
		Error    string             `json:"error"`
	}
	consoleQueued struct {
		ID            string  `json:"id"`
		User          string  `json:"user"`
		CPUSeconds    float64 `json:"cpu_seconds"`
		WaitedSeconds float64 `json:"waited_seconds"`
		Position      int     `json:"position"`
		HeldBy        []struct {
			Budget   string  `json:"budget"`
			Scope    string  `json:"scope"`
			InFlight float64 `json:"in_flight"`
			Limit    float64 `json:"limit"`
			Needs    float64 `json:"needs"`
		} `json:"held_by"`
	}
)

// consoleProxy runs a proxy over upstream with o, serving the admin
// surface on a listener of its own too.
func consoleProxy(t *testing.T, upstream string, o Options) (client, admin string, s *Server) {
	t.Helper()
	o.Clusters = []ClusterConfig{{Name: "default", URL: upstream}}
	o.MonitorInterval = -1
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := New(withDefaults(o))
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	aln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeAdmin(aln)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s.Shutdown(ctx)
	})
	return "http://" + ln.Addr().String(), "http://" + aln.Addr().String(), s
}

// getJSON GETs url with the admin token (when not empty) into v and
// returns the status.
func getJSON(t *testing.T, url, token string, v any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("X-Prestroid-Admin-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == 200 && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

func TestConsoleJSON(t *testing.T) {
	stub, _ := statefulStub(t) // a query's second page is its last: FINISHED, 5 ms of CPU
	loaded := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	var statsCalls atomic.Int64
	client, admin, _ := consoleProxy(t, stub.URL, Options{AdminToken: testAdminToken, Estimator: &fixedEstimator{},
		EstimatorStats: func() estimate.Stats {
			statsCalls.Add(1)
			return estimate.Stats{Model: &estimate.ModelStats{ID: "m-1", Source: "embedded", Loaded: loaded},
				Caches:  []estimate.CacheStats{{Name: "estimate", Hits: 3, Misses: 1}, {Name: "plan"}},
				History: &estimate.HistoryStats{Entries: 7, Observed: 5}}
		}})
	// Two queries finish, one stays running.
	for _, sql := range []string{"SELECT cpu=0.02", "SELECT cpu=0.005"} {
		first, _ := call(t, "POST", client+"/v1/statement", sql, "alice")
		call(t, "GET", first.NextURI, "", "alice")
	}
	running, _ := call(t, "POST", client+"/v1/statement", "SELECT cpu=30", "bob")

	for _, base := range []string{client, admin} {
		t.Run("the JSON needs the admin token on "+base, func(t *testing.T) {
			for _, p := range []string{"clusters", "decisions", "queue", "estimator"} {
				if got := getJSON(t, base+"/prestroid/api/"+p, "", nil); got != 401 {
					t.Errorf("%s without the token: %d, want 401", p, got)
				}
				if got := getJSON(t, base+"/prestroid/api/"+p, "wrong-token-wrong-token", nil); got != 401 {
					t.Errorf("%s with a wrong token: %d, want 401", p, got)
				}
			}
		})
	}
	t.Run("decisions: newest first, with estimates, actual CPU and q-error", func(t *testing.T) {
		var d consoleDecisions
		if got := getJSON(t, admin+"/prestroid/api/decisions", testAdminToken, &d); got != 200 {
			t.Fatalf("status %d", got)
		}
		if d.Capacity != 2000 || len(d.Decisions) != 3 {
			t.Fatalf("capacity %d, %d decisions: %+v", d.Capacity, len(d.Decisions), d.Decisions)
		}
		last := d.Decisions[0]
		if last.QueryID != running.ID || last.User != "bob" || last.Kind != "estimated" || last.Cluster != "default" ||
			last.Estimate == nil || last.Estimate.CPUSeconds != 30 || last.State != "" || last.ActualCPU != nil || last.QError != nil {
			t.Errorf("the running query: %+v", last)
		}
		if last.UIPath != "/ui/query.html?"+running.ID {
			t.Errorf("ui_path %q", last.UIPath)
		}
		first := d.Decisions[2]
		if first.State != "FINISHED" || first.ActualCPU == nil || *first.ActualCPU != 0.005 || first.QError == nil || *first.QError != 4 ||
			first.Decision != "estimated" || first.Estimate.Source != "none" || first.Estimate.Model != "test-model" {
			t.Errorf("the first query: %+v (estimate %+v)", first, first.Estimate)
		}
		var two consoleDecisions
		getJSON(t, client+"/prestroid/api/decisions?limit=2", testAdminToken, &two)
		if len(two.Decisions) != 2 {
			t.Errorf("limit=2: %d decisions", len(two.Decisions))
		}
	})
	t.Run("clusters: health and queries routed in the window", func(t *testing.T) {
		var c consoleClusters
		getJSON(t, admin+"/prestroid/api/clusters?minutes=5", testAdminToken, &c)
		if c.WindowMinutes != 5 || c.Monitor || len(c.Clusters) != 1 {
			t.Fatalf("%+v", c)
		}
		if cl := c.Clusters[0]; cl.Name != "default" || !cl.Default || !cl.Healthy || cl.Routed != 3 || cl.URL != stub.URL {
			t.Errorf("cluster %+v", cl)
		}
	})
	t.Run("estimator: model, caches, history, q-error points by source", func(t *testing.T) {
		var v consoleEstimatorView
		getJSON(t, admin+"/prestroid/api/estimator", testAdminToken, &v)
		if !v.Estimator || v.Model == nil || v.Model.ID != "m-1" || !v.Model.Loaded.Equal(loaded) || v.History == nil || v.History.Entries != 7 {
			t.Errorf("model %+v history %+v", v.Model, v.History)
		}
		if len(v.Caches) != 2 || v.Caches[0].HitRate == nil || *v.Caches[0].HitRate != 0.75 || v.Caches[1].HitRate != nil {
			t.Errorf("caches %+v", v.Caches)
		}
		if len(v.Points) != 2 || v.Points[0].Predicted != 0.02 || v.Points[0].Actual != 0.005 || v.Points[0].QError != 4 ||
			v.Points[1].QError != 1 {
			t.Errorf("points %+v", v.Points)
		}
		if len(v.QErrorSeries) == 0 || v.QErrorSeries[len(v.QErrorSeries)-1].P90 != 4 {
			t.Errorf("series %+v", v.QErrorSeries)
		}
		if len(v.Sources) != 1 || v.Sources[0].Estimates != 3 || v.Sources[0].Finished != 2 || *v.Sources[0].QErrorP50 != 1 {
			t.Errorf("sources %+v", v.Sources)
		}
		if statsCalls.Load() == 0 {
			t.Error("EstimatorStats was not asked")
		}
	})
	t.Run("queue: off without admission budgets", func(t *testing.T) {
		var q consoleQueue
		getJSON(t, admin+"/prestroid/api/queue", testAdminToken, &q)
		if q.Enabled || len(q.Queries) != 0 {
			t.Errorf("%+v", q)
		}
	})
}

// consolePost POSTs body to the console's cancel endpoint.
func consolePost(t *testing.T, url, contentType, body string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("X-Prestroid-Admin-Token", testAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&v)
	return resp.StatusCode, v
}

func TestConsoleQueueAndCancel(t *testing.T) {
	admissiontest.ForEach(t, func(t *testing.T, _ admissiontest.Backend, opts func(admission.Options) *admission.Options) {
		stub, posts := statefulStub(t)
		client, admin, _ := consoleProxy(t, stub.URL, Options{AdminToken: testAdminToken, Estimator: &fixedEstimator{},
			Admission: opts(admission.Options{MaxQueries: 1, UserMaxCPUSeconds: 50})})
		call(t, "POST", client+"/v1/statement", "SELECT cpu=40", "alice") // runs, holds the budget
		waiting, _ := call(t, "POST", client+"/v1/statement", "SELECT cpu=20", "alice")
		behind, _ := call(t, "POST", client+"/v1/statement", "SELECT cpu=1", "alice")
		other, _ := call(t, "POST", client+"/v1/statement", "SELECT cpu=1", "bob")
		for _, p := range []pg{waiting, behind, other} {
			if p.Stats.State != "QUEUED" {
				t.Fatalf("not queued: %+v", p)
			}
		}
		var q consoleQueue
		if got := getJSON(t, admin+"/prestroid/api/queue", testAdminToken, &q); got != 200 {
			t.Fatalf("status %d", got)
		}
		if !q.Enabled || q.Queued != 3 || q.InFlight != 1 || len(q.Queries) != 3 || q.Error != "" ||
			q.Limits["admission.max_queries"] != 1 || q.Limits["admission.user_max_cpu_seconds"] != 50 {
			t.Fatalf("queue %+v", q)
		}
		byID := map[string]consoleQueued{}
		for _, w := range q.Queries {
			byID[w.ID] = w
		}
		holds := func(w consoleQueued) string {
			var s []string
			for _, h := range w.HeldBy {
				s = append(s, fmt.Sprintf("%s/%s/%g/%g/%g", h.Budget, h.Scope, h.InFlight, h.Limit, h.Needs))
			}
			return strings.Join(s, " ")
		}
		if w := byID[waiting.ID]; w.User != "alice" || w.Position != 0 || w.CPUSeconds != 20 ||
			holds(w) != "admission.max_queries/global/1/1/1 admission.user_max_cpu_seconds/user alice/40/50/20" {
			t.Errorf("alice's first waiting query: %+v held by %s", w, holds(w))
		}
		if w := byID[behind.ID]; w.Position != 1 {
			t.Errorf("alice's second waiting query: %+v", w)
		}
		if w := byID[other.ID]; w.User != "bob" || w.Position != 0 || holds(w) != "admission.max_queries/global/1/1/1" || w.WaitedSeconds < 0 {
			t.Errorf("bob's waiting query: %+v held by %s", w, holds(w))
		}

		t.Run("cancel needs JSON and a queued id", func(t *testing.T) {
			if got, _ := consolePost(t, admin+"/prestroid/api/queue/cancel", "application/x-www-form-urlencoded", "id="+other.ID); got != 415 {
				t.Errorf("a form post: %d, want 415", got)
			}
			if got, _ := consolePost(t, admin+"/prestroid/api/queue/cancel", "application/json", `{"id":"../x"}`); got != 400 {
				t.Errorf("a bad id: %d, want 400", got)
			}
			if got, _ := consolePost(t, admin+"/prestroid/api/queue/cancel", "application/json", `{"id":"20260101_000000_00009_nope"}`); got != 404 {
				t.Errorf("an id that is not queued: %d, want 404", got)
			}
			if got := adminCall(t, "POST", admin+"/prestroid/api/queue/cancel", nil); got != 401 {
				t.Errorf("without the token: %d, want 401", got)
			}
			if got := getJSON(t, admin+"/prestroid/api/queue/cancel", testAdminToken, nil); got != 405 {
				t.Errorf("GET: %d, want 405", got)
			}
		})
		t.Run("an operator's cancel removes the query; its client reads USER_CANCELED", func(t *testing.T) {
			got, body := consolePost(t, client+"/prestroid/api/queue/cancel", "application/json", `{"id":"`+other.ID+`"}`)
			if got != 200 || body["canceled"] != true {
				t.Fatalf("cancel: %d %v", got, body)
			}
			gone, _ := call(t, "GET", other.NextURI, "", "bob")
			if gone.Error == nil || gone.Error.ErrorName != "USER_CANCELED" || !strings.Contains(gone.Error.Message, "operator") {
				t.Errorf("the cancelled query's poll: %+v", gone)
			}
			var after consoleQueue
			getJSON(t, admin+"/prestroid/api/queue", testAdminToken, &after)
			if after.Queued != 2 || len(after.Queries) != 2 {
				t.Errorf("after the cancel: %+v", after)
			}
			for _, w := range after.Queries {
				if w.ID == other.ID {
					t.Errorf("the cancelled query is still listed")
				}
			}
			if again, _ := consolePost(t, admin+"/prestroid/api/queue/cancel", "application/json", `{"id":"`+other.ID+`"}`); again != 404 {
				t.Errorf("cancelling it again: %d, want 404", again)
			}
			if posts.Load() != 1 {
				t.Errorf("%d statements reached Trino, want 1 (the cancelled one never does)", posts.Load())
			}
		})
	})
}

func TestConsolePage(t *testing.T) {
	stub, _ := statefulStub(t)
	get := func(t *testing.T, method, url string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, nil)
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp
	}
	t.Run("the page's files need no token and hold no data", func(t *testing.T) {
		client, admin, _ := consoleProxy(t, stub.URL, Options{AdminToken: testAdminToken})
		for _, base := range []string{client, admin} {
			for path, ct := range map[string]string{"/prestroid/": "text/html", "/prestroid/app.js": "javascript",
				"/prestroid/app.css": "text/css", "/prestroid/vendor/chart.umd.min.js": "javascript"} {
				resp := get(t, "GET", base+path)
				if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Type"), ct) || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
					t.Errorf("%s%s: %d %q", base, path, resp.StatusCode, resp.Header.Get("Content-Type"))
				}
			}
			page := get(t, "GET", base+"/prestroid/")
			if csp := page.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("CSP %q", csp)
			}
			for path, want := range map[string]int{"/prestroid/../admin.go": 404, "/prestroid/nope.js": 404, "/prestroid/api/nope": 401} {
				if got := get(t, "GET", base+path).StatusCode; got != want {
					t.Errorf("%s: %d, want %d", path, got, want)
				}
			}
			if resp := get(t, "GET", base+"/prestroid"); resp.StatusCode != 308 || !strings.HasSuffix(resp.Header.Get("Location"), "/prestroid/") {
				t.Errorf("/prestroid: %d %q", resp.StatusCode, resp.Header.Get("Location"))
			}
			if got := get(t, "POST", base+"/prestroid/").StatusCode; got != 405 {
				t.Errorf("POST /prestroid/: %d", got)
			}
		}
		if resp := get(t, "GET", admin+"/"); resp.StatusCode != 302 || !strings.HasSuffix(resp.Header.Get("Location"), "/prestroid/") {
			t.Errorf("the admin listener's /: %d %q", resp.StatusCode, resp.Header.Get("Location"))
		}
	})
	t.Run("with a separate admin listener the client listener does not serve it", func(t *testing.T) {
		client, admin, _ := consoleProxy(t, stub.URL, Options{AdminSeparate: true})
		if got := get(t, "GET", client+"/prestroid/").StatusCode; got != 404 {
			t.Errorf("client listener: %d, want 404", got)
		}
		if got := getJSON(t, admin+"/prestroid/api/decisions", "", nil); got != 200 {
			t.Errorf("admin listener without a token configured: %d, want 200", got)
		}
	})
	t.Run("console.decisions < 0 turns it off", func(t *testing.T) {
		client, admin, _ := consoleProxy(t, stub.URL, Options{ConsoleDecisions: -1})
		for _, u := range []string{client + "/prestroid/", admin + "/prestroid/api/decisions", admin + "/", admin + "/ui/"} {
			if got := get(t, "GET", u).StatusCode; got != 404 {
				t.Errorf("%s: %d, want 404", u, got)
			}
		}
	})
}

func TestTrinoUIThroughTheProxy(t *testing.T) {
	// Two clusters: the UI's page comes from the first, its read of one
	// query from the cluster that ran it.
	ui := func(name string) *stubTrino {
		return newStub(t, func(w http.ResponseWriter, r *http.Request, base string) {
			switch {
			case r.URL.Path == "/v1/statement":
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"20260101_000000_00001_%s","nextUri":"%s/v1/statement/executing/x/y/1","stats":{"state":"RUNNING"}}`, name, base)
			case r.URL.Path == "/ui/query.html" && r.Header.Get("Cookie") == "":
				http.Redirect(w, r, base+"/ui/login.html?"+r.URL.RawQuery, http.StatusSeeOther)
			default:
				fmt.Fprintf(w, "%s %s", name, r.URL.Path)
			}
		})
	}
	first, second := ui("first"), ui("second")
	s, err := New(withDefaults(Options{Clusters: []ClusterConfig{{Name: "first", URL: first.URL, Class: "small"}, {Name: "second", URL: second.URL, Class: "large"}},
		Classes: []routing.CostClass{{Name: "small", MaxCPUSeconds: 1}, {Name: "large"}}, Estimator: &fixedEstimator{},
		MonitorInterval: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))

	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.Serve(ln)
	aln, _ := net.Listen("tcp", "127.0.0.1:0")
	go s.ServeAdmin(aln)
	t.Cleanup(func() { s.Shutdown(context.Background()) })
	client, admin := "http://"+ln.Addr().String(), "http://"+aln.Addr().String()
	call(t, "POST", client+"/v1/statement", "SELECT cpu=100", "alice") // on second

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, base := range []string{client, admin} {
		resp, err := noFollow.Get(base + "/ui/api/query/20260101_000000_00001_second")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "second /ui/api/query/20260101_000000_00001_second" {
			t.Errorf("%s: the UI's read of a query on the second cluster reached %q", base, b)
		}
		resp, err = noFollow.Get(base + "/ui/query.html?20260101_000000_00001_second")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		// The first cluster's UI redirects to its login page: unrouted,
		// so the login cookie (Path=/ui) comes back on the next request.
		if loc := resp.Header.Get("Location"); resp.StatusCode != 303 || loc != base+"/ui/login.html?20260101_000000_00001_second" {
			t.Errorf("%s: the UI's login redirect: %d %q", base, resp.StatusCode, loc)
		}
	}
}
