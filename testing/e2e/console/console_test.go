// Package console tests the web console in a real browser:
// headless Chromium, driven with chromedp, reads the console of the real
// binary (estimator, admission, admin listener and token) in front of the
// harness's real Trino after a few queries, cancels a queued query with
// its button, and follows a query's link into Trino's own web UI. A
// screenshot of the page is kept (its path is logged). See package e2e.
package console

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/prestroid/prestroid/testing/e2e"
)

const adminToken = "console-e2e-admin-token-0123456789"

// chromium is the browser: $PRESTROID_CHROMIUM (make test sets it with
// scripts/install-chromium.sh), else chromium on PATH, else the test
// skips and says so.
func chromium(t *testing.T) string {
	if p := os.Getenv("PRESTROID_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium: set PRESTROID_CHROMIUM or run scripts/install-chromium.sh (make test does)")
	return ""
}

// serve starts the binary with the console on an admin listener behind a
// token, two clusters (both the harness's Trino, one per class) and an
// admission budget of one query; it returns the client and admin URLs.
func serve(t *testing.T, bin, trino string) (client, admin string) {
	t.Helper()
	port, adminPort := e2e.FreePort(t), e2e.FreePort(t)
	cfg := fmt.Sprintf(`listen: 127.0.0.1:%s
admin_listen: 127.0.0.1:%s
admin_token: %s
route_secret: %s
clusters:
  - {name: small, url: %q, class: small}
  - {name: large, url: %q, class: large}
routing:
  classes:
    - {name: small, max_cpu_seconds: 0.5}
    - {name: large}
  monitor_interval: 1s
  estimate_timeout: 60s
admission:
  max_queries: 1
`, port, adminPort, adminToken, strings.Repeat("k", 40), trino, trino)
	path := filepath.Join(t.TempDir(), "prestroid.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	_, client = e2e.ServeBinary(t, bin, port, "--config", path)
	admin = "http://127.0.0.1:" + adminPort
	e2e.WaitHTTP(t, admin+"/prestroid/")
	return client, admin
}

// queries finish before the browser looks: their estimates, classes and
// actual CPU times are what the decisions table and the plots show.
var queries = []string{
	"SELECT orderpriority, count(*) FROM tpch.tiny.orders GROUP BY orderpriority",
	"SELECT sum(extendedprice * discount) FROM tpch.tiny.lineitem WHERE quantity < 24",
	"SELECT n.name, count(*) FROM tpch.tiny.customer c JOIN tpch.tiny.nation n ON c.nationkey = n.nationkey GROUP BY n.name",
	"SELECT count(*) FROM tpch.sf1.orders WHERE orderstatus = 'F'",
	"SELECT returnflag, sum(quantity) FROM tpch.tiny.lineitem GROUP BY returnflag",
}

// holdSQL keeps the one admission slot: the proxy admits it and Trino
// answers its POST, but its client never polls, so Trino never dispatches
// it (no CPU) and the slot stays taken until the test cancels it.
const holdSQL = "SELECT count(*) FROM tpch.tiny.nation /* console-e2e hold */"

func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	trino := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	if os.Getenv("PRESTROID_ORT_LIB") == "" {
		t.Skip("PRESTROID_ORT_LIB not set (make test installs ONNX Runtime with `make ort` and sets it)")
	}
	browser := chromium(t)
	start := time.Now()
	client, admin := serve(t, bin, trino)

	var ids []string
	for _, q := range queries {
		p := e2e.RunRaw(t, client, q)
		if p.Error != nil || p.Stats.State != "FINISHED" {
			t.Fatalf("%s: %s %+v", q, p.Stats.State, p.Error)
		}
		ids = append(ids, p.ID)
	}
	t.Logf("%d queries ran through the proxy (%s since the test started)", len(ids), time.Since(start).Round(time.Millisecond))

	// The slot holder, then a query that must wait, run by a real client.
	resp, hold := e2e.Do(t, "POST", client+"/v1/statement", holdSQL, nil)
	if resp.StatusCode != 200 || hold.ID == "" || hold.NextURI == "" || strings.Contains(hold.NextURI, "prestroid~local") {
		t.Fatalf("the holding query was not admitted: %s %+v", resp.Status, hold)
	}
	t.Cleanup(func() { e2e.Do(t, "DELETE", hold.NextURI, "", nil) })
	db, err := sql.Open("trino", strings.Replace(client, "http://", "http://bob@", 1)+"?source=console-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	waitErr := make(chan error, 1)
	go func() {
		var n int
		waitErr <- db.QueryRow("SELECT count(*) FROM tpch.tiny.region /* console-e2e queued */").Scan(&n)
	}()
	queuedID := waitQueued(t, admin, "bob")
	t.Logf("bob's query waits in the proxy's queue (%s)", time.Since(start).Round(time.Millisecond))

	ctx, cancel := browserContext(t, browser)
	defer cancel()
	var pageErrs pageErrors
	if err := chromedp.Listen(ctx, pageErrs.listen); err != nil {
		t.Fatalf("starting Chromium (%s): %v", browser, err)
	}

	// The page loads without the token (it holds no data) and asks for it.
	do(t, ctx, "open the console", chromedp.Navigate(admin+"/prestroid/"), chromedp.WaitVisible(chromedp.ID("login")))
	loginShown := eval[bool](t, ctx, `!document.getElementById('login').hidden && document.getElementById('main').hidden`)
	do(t, ctx, "log in with the admin token",
		chromedp.SendKeys(chromedp.ID("token"), adminToken),
		chromedp.Click(chromedp.CSS(`#login-form button[type=submit]`)),
		chromedp.WaitVisible(chromedp.ID("main")),
	)
	t.Logf("logged in to the console in Chromium (%s)", time.Since(start).Round(time.Millisecond))
	pageErrs.take() // the page's reads before the token was entered were refused (401), as they should be
	if !loginShown {
		t.Error("the page did not ask for the admin token first")
	}

	t.Run("the decisions table shows the queries with estimates and actual CPU", func(t *testing.T) {
		rows := waitRows(t, ctx, "decisions", ids)
		for _, id := range ids {
			r := rows[id]
			if r == nil {
				t.Errorf("query %s not in the decisions table", id)
				continue
			}
			if !strings.Contains(r["estimate"], "[") || r["source"] == "–" || r["actual"] == "–" || r["state"] != "FINISHED" {
				t.Errorf("query %s: %v", id, r)
			}
			if r["class"] != "small" && r["class"] != "large" || r["class"] != r["cluster"] {
				t.Errorf("query %s placed in class %q on %q", id, r["class"], r["cluster"])
			}
			if !strings.HasPrefix(r["href"], admin+"/ui/query.html?"+id) {
				t.Errorf("query %s links to %q", id, r["href"])
			}
		}
		withQError := 0
		for _, id := range ids {
			if r := rows[id]; r != nil && r["qerror"] != "–" {
				withQError++
			}
		}
		if withQError < len(ids)-1 { // a query may take 0 ms of CPU: no q-error then
			t.Errorf("%d of %d finished queries have a q-error", withQError, len(ids))
		}
	})

	t.Run("the plots render", func(t *testing.T) {
		plots := eval[map[string]struct{ Points, Painted, Width int }](t, ctx, `(() => {
			const out = {};
			for (const id of ['qerror-plot', 'scatter-plot']) {
				const c = document.getElementById(id), ch = Chart.getChart(c);
				const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
				let painted = 0;
				for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
				// The q-error plot's first dataset holds every query; the
				// scatter has one dataset per estimate source, then the
				// predicted = actual line.
				const ds = !ch ? [] : id === 'qerror-plot' ? [ch.data.datasets[0]] : ch.data.datasets.filter((x) => x.label !== 'predicted = actual');
				out[id] = {Points: ds.reduce((n, x) => n + x.data.length, 0), Painted: painted, Width: c.width};
			}
			return out;
		})()`)
		for id, p := range plots {
			if p.Points < 3 || p.Painted < 2000 || p.Width < 200 {
				t.Errorf("%s: %+v (want ≥ 3 points drawn on a canvas)", id, p)
			}
		}
	})

	t.Run("the usage view charts each user's CPU as api/usage sums it", func(t *testing.T) {
		type view struct {
			Labels  []string
			CPU     []float64
			Painted int
			Queries string
		}
		var v view
		deadline := time.Now().Add(15 * time.Second)
		for {
			v = eval[view](t, ctx, `(() => {
				const c = document.getElementById('usage-plot'), ch = Chart.getChart(c);
				const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
				let painted = 0;
				for (let i = 3; i < d.length; i += 4) if (d[i] > 0) painted++;
				const tr = document.querySelector('#usage-table tbody tr[data-key="e2e"]');
				return {Labels: ch ? ch.data.labels : [], CPU: ch ? ch.data.datasets[0].data : [], Painted: painted,
					Queries: tr ? tr.querySelectorAll('td')[1].innerText : ''};
			})()`)
			if v.Queries != "" || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		var rep struct {
			Rows []struct {
				Key        string
				Queries    int64
				CPUSeconds float64 `json:"cpu_seconds"`
			}
		}
		getJSON(t, admin+"/prestroid/api/usage?by=user&window=1h", &rep)
		found := false
		for _, r := range rep.Rows {
			if r.Key != "e2e" {
				continue
			}
			found = true
			if r.Queries < int64(len(ids)) || v.Queries != fmt.Sprint(r.Queries) {
				t.Errorf("user e2e: %d queries in api/usage, %q on the page; ran %d", r.Queries, v.Queries, len(ids))
			}
			for i, l := range v.Labels {
				if l == "e2e" && (i >= len(v.CPU) || v.CPU[i] != r.CPUSeconds) {
					t.Errorf("user e2e's bar: %v of %v, want %v CPU seconds", v.CPU, v.Labels, r.CPUSeconds)
				}
			}
		}
		if !found || v.Painted < 2000 || !slices.Contains(v.Labels, "e2e") {
			t.Errorf("usage view %+v, api/usage %+v: want user e2e's bar drawn", v, rep)
		}
	})

	t.Run("the estimator view names the model this process loaded", func(t *testing.T) {
		model := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('#model dt')].map((dt) => [dt.innerText, dt.nextElementSibling.innerText]))`)
		var v struct {
			Model *struct {
				ID     string
				Loaded time.Time
			}
		}
		getJSON(t, admin+"/prestroid/api/estimator", &v)
		if v.Model == nil || v.Model.ID == "" || model["model"] != v.Model.ID || v.Model.Loaded.Before(start) || v.Model.Loaded.After(time.Now()) {
			t.Errorf("model on the page %v, in the JSON %+v (the test started at %s)", model, v.Model, start)
		}
	})

	t.Run("the queue view shows the waiting query and what holds it", func(t *testing.T) {
		row := waitQueueRow(t, ctx, queuedID, true)
		if row["user"] != "bob" || !strings.Contains(row["held"], "admission.max_queries") || !strings.Contains(row["held"], "1 of 1") {
			t.Errorf("queue row %v", row)
		}
	})

	shot := screenshot(t, ctx)
	t.Logf("screenshot: %s", shot)
	if errs := pageErrs.take(); len(errs) > 0 {
		t.Errorf("the console logged errors: %s", strings.Join(errs, "; "))
	}

	t.Run("its cancel button removes the waiting query; the client reads why", func(t *testing.T) {
		sel := fmt.Sprintf(`#queue-table button.cancel[data-id=%q]`, queuedID)
		do(t, ctx, "click cancel twice", chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS(sel+".confirm")),
			chromedp.Click(chromedp.CSS(sel)))
		waitQueueRow(t, ctx, queuedID, false)
		select {
		case err := <-waitErr:
			if err == nil || !strings.Contains(err.Error(), "canceled by an operator") {
				t.Errorf("the waiting client's query ended with %v, want it canceled by an operator", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("the waiting client did not hear of the cancel within 20 s")
		}
		var q struct{ Queued int }
		getJSON(t, admin+"/prestroid/api/queue", &q)
		if q.Queued != 0 {
			t.Errorf("%d still queued", q.Queued)
		}
		if n := e2e.SeenByTrino(t, trino, "console-e2e queued"); n != 0 {
			t.Errorf("the cancelled query reached Trino %d times", n)
		}
	})

	t.Run("a query's link opens it in Trino's web UI", func(t *testing.T) {
		do(t, ctx, "follow the link and log in to Trino's UI",
			chromedp.Navigate(admin+"/ui/query.html?"+ids[0]),
			chromedp.WaitVisible(chromedp.ID("username")),
			chromedp.SendKeys(chromedp.ID("username"), "e2e"),
			chromedp.Submit(chromedp.ID("login")),
			chromedp.WaitVisible(chromedp.ID("query-detail")),
			chromedp.Poll[chromedp.Void](fmt.Sprintf(`document.getElementById('query-detail').innerText.includes(%q)`, ids[0]),
				chromedp.WithPollingTimeout(30*time.Second)),
		)
		text := eval[string](t, ctx, `document.getElementById('query-detail').innerText`)
		if !strings.Contains(text, "FINISHED") {
			t.Errorf("Trino's query page: %q", e2e.Tail(text, 300))
		}
	})
}

// browserContext starts headless Chromium with a profile of its own.
func browserContext(t *testing.T, exe string) (context.Context, context.CancelFunc) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox, // root in CI containers; the page is our own
		chromedp.WindowSize(1440, 1000),
		chromedp.Flag("disable-gpu", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	return ctx, func() { tcancel(); cancel(); acancel() }
}

// do runs the browser steps, failing the test on the first error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression in the page into a T.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", e2e.Tail(expr, 80), err)
	}
	return v
}

// rowsJS reads a table's rows by their data attribute into cell texts by
// class (and the query link's href).
const rowsJS = `(() => {
	const out = {};
	for (const tr of document.querySelectorAll('#%s-table tbody tr[data-%s]')) {
		const r = {};
		const cells = tr.querySelectorAll('td');
		const names = %s;
		cells.forEach((td, i) => { if (names[i]) r[names[i]] = td.innerText.trim(); });
		const a = tr.querySelector('a');
		if (a) r.href = a.href;
		out[tr.dataset.%s] = r;
	}
	return out;
})()`

var decisionCols = `['time','query','user','estimate','source','class','cluster','decision','actual','qerror','state']`

// waitRows waits until the decisions table lists every id (the page
// refreshes every 5 s) and returns the rows.
func waitRows(t *testing.T, ctx context.Context, table string, ids []string) map[string]map[string]string {
	t.Helper()
	var rows map[string]map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows = eval[map[string]map[string]string](t, ctx, fmt.Sprintf(rowsJS, table, "query-id", decisionCols, "queryId"))
		missing := 0
		for _, id := range ids {
			if r := rows[id]; r == nil || r["state"] != "FINISHED" {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return rows
		}
		time.Sleep(time.Second)
	}
}

// waitQueueRow waits until the queue table lists id (present) or no
// longer does, and returns its row.
func waitQueueRow(t *testing.T, ctx context.Context, id string, present bool) map[string]string {
	t.Helper()
	var rows map[string]map[string]string
	deadline := time.Now().Add(30 * time.Second)
	for {
		rows = eval[map[string]map[string]string](t, ctx, fmt.Sprintf(rowsJS, "queue", "id",
			`['query','user','group','waiting','estimate','held','action']`, "id"))
		if _, ok := rows[id]; ok == present {
			return rows[id]
		}
		if time.Now().After(deadline) {
			t.Fatalf("queued query %s present=%v never seen; rows %v", id, present, rows)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitQueued waits for user's query to wait in the proxy's queue (read
// from the console's JSON, as a script would) and returns its id.
func waitQueued(t *testing.T, admin, user string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var q struct {
			Queries []struct{ ID, User string }
		}
		getJSON(t, admin+"/prestroid/api/queue", &q)
		for _, w := range q.Queries {
			if w.User == user {
				return w.ID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no query of %s waits: %+v", user, q)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// screenshot saves the whole page as a PNG under out/console/ at the
// repository's root (a test artefact; out/ is ignored by git).
func screenshot(t *testing.T, ctx context.Context) string {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := filepath.Join(e2e.RepoRoot(t), "out", "console")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "console.png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// pageErrors collects what the page reports as errors: uncaught
// exceptions, console.error, and the browser's own error log entries
// (a resource that failed to load, a Content-Security-Policy violation).
type pageErrors struct {
	mu   sync.Mutex
	errs []string
}

func (p *pageErrors) listen(ev any) {
	var msg string
	switch e := ev.(type) {
	case *runtime.EventExceptionThrown:
		msg = "exception: " + e.ExceptionDetails.Text
		if ex := e.ExceptionDetails.Exception; ex != nil {
			msg += " " + ex.Description
		}
	case *runtime.EventConsoleAPICalled:
		if e.Type == runtime.ConsoleAPICalledTypeError {
			var parts []string
			for _, a := range e.Args {
				parts = append(parts, string(a.Value))
			}
			msg = "console.error: " + strings.Join(parts, " ")
		}
	case *cdplog.EventEntryAdded:
		if e.Entry.Level == cdplog.EntryLevelError {
			msg = "log: " + e.Entry.Text + " " + e.Entry.URL
		}
	}
	if msg != "" {
		p.mu.Lock()
		p.errs = append(p.errs, msg)
		p.mu.Unlock()
	}
}

func (p *pageErrors) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	errs := p.errs
	p.errs = nil
	return errs
}
