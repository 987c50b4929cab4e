// Package presto tests Prestroid in front of a real PrestoDB 0.296 (the
// harness's, testing/presto): PrestoDB's own CLI, JDBC driver and Python
// client get through the proxy what they get directly; the proxy's own
// answers are read by those clients; one proxy serves Trino and PrestoDB
// clients side by side and refuses a client of the other engine; the
// resource estimate reaches PrestoDB; cost routing works between PrestoDB
// clusters; and PrestoDB's URI shapes survive hostile input. The tests run
// when PRESTROID_PRESTO_URL is set (make test starts PrestoDB and sets it)
// and skip otherwise; once it is set, every failure is a failure.
package presto

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy"
	"github.com/prestroid/prestroid/testing/e2e"
)

// prestoURL returns the real PrestoDB's URL or skips the test.
func prestoURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("PRESTROID_PRESTO_URL")
	if u == "" {
		t.Skip("PRESTROID_PRESTO_URL not set: run `make test`, which starts a real PrestoDB")
	}
	return u
}

// need returns the environment variable name, failing when it is unset
// (PRESTROID_PRESTO_URL is: make test sets them together).
func need(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s must be set when PRESTROID_PRESTO_URL is (make test sets both)", name)
	}
	return v
}

// java is the JVM the PrestoDB client jars run on (Java 17: presto-cli and
// presto-jdbc target it; the harness's own PrestoDB runs on it too).
func java(t testing.TB) string {
	if j := os.Getenv("PRESTROID_PRESTO_JAVA"); j != "" {
		return j
	}
	const j = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
	if _, err := os.Stat(j); err != nil {
		t.Fatalf("java 17 not found at %s (set PRESTROID_PRESTO_JAVA)", j)
	}
	return j
}

// startPresto runs an in-process proxy in front of the real PrestoDB alone
// (cluster "presto", engine detected by the monitor).
func startPresto(t testing.TB) string {
	u, _ := e2e.StartProxy(t, proxy.Options{Clusters: []proxy.ClusterConfig{{Name: "presto", URL: prestoURL(t)}},
		MonitorInterval: time.Second})
	return u
}

// queryID matches PrestoDB's and Trino's query ids (and the proxy's).
var queryID = regexp.MustCompile(`\d{8}_\d{6}_\d{5}_\w{5}`)

func stripIDs(s string) string { return queryID.ReplaceAllString(s, "QUERYID") }

// page is the part of a QueryResults page these tests read.
type page struct {
	ID               string          `json:"id"`
	NextURI          string          `json:"nextUri"`
	PartialCancelURI string          `json:"partialCancelUri"`
	Columns          json.RawMessage `json:"columns"`
	Data             [][]any         `json:"data"`
	Stats            struct {
		State string `json:"state"`
	} `json:"stats"`
	Error *struct {
		Message   string `json:"message"`
		ErrorName string `json:"errorName"`
		ErrorType string `json:"errorType"`
	} `json:"error"`
}

// do sends one protocol request as a PrestoDB client (X-Presto-User e2e
// and the extra headers h) and decodes a 200's body as a page.
func do(t testing.TB, method, url, body string, h map[string]string) (*http.Response, page) {
	t.Helper()
	return e2e.DoAs[page](t, dialect.Presto, method, url, body, h)
}

// run drives one statement to its last page as a PrestoDB client, and
// returns that page, every row, and the X-Presto-* response headers of all
// its pages (each name's values in order).
func run(t testing.TB, base, sql string, h map[string]string) (page, [][]any, http.Header) {
	t.Helper()
	got := http.Header{}
	keep := func(resp *http.Response) {
		for k, vs := range resp.Header {
			if dialect.OfHeader(k) == dialect.Presto {
				got[k] = append(got[k], vs...)
			}
		}
	}
	resp, p := do(t, "POST", base+"/v1/statement", sql, h)
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s: %s", base, resp.Status)
	}
	keep(resp)
	rows := p.Data
	for p.NextURI != "" {
		if !strings.HasPrefix(p.NextURI, base) {
			t.Fatalf("nextUri %s does not point at %s", p.NextURI, base)
		}
		resp, p = do(t, "GET", p.NextURI, "", h)
		if resp.StatusCode != 200 {
			t.Fatalf("GET nextUri: %s", resp.Status)
		}
		keep(resp)
		rows = append(rows, p.Data...)
	}
	return p, rows, got
}

// The corpus every client runs directly and through the proxy: types,
// session state (SET SESSION, USE), prepared statements, transactions,
// errors, a result of many pages.
const (
	typesSQL = `SELECT CAST(1.25 AS DECIMAL(10,2)) d, CAST(12345678901234567890.123 AS DECIMAL(38,3)) big, DATE '2020-02-29' dt, ` +
		`TIMESTAMP '2020-01-02 03:04:05.678' ts, ARRAY[1,2,3] a, MAP(ARRAY['k','l'], ARRAY[1,2]) m, ` +
		`CAST(ROW(1,'x') AS ROW(a INTEGER, b VARCHAR)) r, 'héllo' s, CAST(NULL AS BIGINT) n, true b, 1e0/3 dbl, X'0102' vb, ` +
		`ARRAY[MAP(ARRAY['a'], ARRAY[ROW(1, DATE '2001-01-01')])] nested`
	nationSQL = "SELECT nationkey, name, regionkey, comment FROM nation ORDER BY nationkey"
	// ~60,000 rows: many pages of the protocol.
	bigSQL = "SELECT orderkey, linenumber, partkey, quantity, extendedprice, shipdate, comment FROM lineitem ORDER BY orderkey, linenumber"
	// The sum is of exact decimals: a double's sum depends on the order
	// the parallel partial sums meet, and differs in its last digits from
	// run to run whoever asks.
	joinSQL = "SELECT r.name, count(*), sum(CAST(o.totalprice AS DECIMAL(12,2))) FROM orders o JOIN customer c ON o.custkey = c.custkey " +
		"JOIN nation n ON c.nationkey = n.nationkey JOIN region r ON n.regionkey = r.regionkey GROUP BY r.name ORDER BY r.name"
	missingSQL = "SELECT * FROM no_such_table"
	syntaxSQL  = "SELEC 1"
	divSQL     = "SELECT 1 / 0"
	// slowSQL runs for minutes on the harness's PrestoDB: a query to cancel.
	slowSQL = "SELECT count(*) FROM tpch.sf100.lineitem WHERE comment LIKE '%prestroid%'"
)

// cliScript is the corpus as one presto-cli script: the CLI keeps its
// session (USE, SET SESSION, PREPARE, the transaction) from statement to
// statement, as it does interactively.
var cliScript = []string{
	typesSQL, nationSQL, bigSQL, joinSQL,
	"SET SESSION query_max_run_time = '1h'", "SHOW SESSION LIKE 'query_max_run_time'",
	"USE tpch.sf1", "SELECT count(*) FROM supplier", "USE tpch.tiny", "SELECT count(*) FROM supplier",
	"PREPARE q1 FROM SELECT name FROM nation WHERE nationkey = ?", "EXECUTE q1 USING 3", "DEALLOCATE PREPARE q1",
	"START TRANSACTION", "SELECT count(*) FROM region", "COMMIT",
	"START TRANSACTION", "SELECT count(*) FROM nation", "ROLLBACK",
	missingSQL, syntaxSQL, divSQL,
	"SHOW SCHEMAS FROM tpch", "DESCRIBE lineitem",
}

func TestCLICorpusMatchesDirect(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	cli := need(t, "PRESTROID_PRESTO_CLI")
	proxied := startPresto(t)
	dir := t.TempDir()
	script := dir + "/corpus.sql"
	if err := os.WriteFile(script, []byte(strings.Join(cliScript, ";\n")+";\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	runCLI := func(server string) (string, string) {
		cmd := exec.Command(java(t), "-jar", cli, "--server", server, "--user", "e2e-cli", "--catalog", "tpch", "--schema", "tiny",
			"--output-format", "TSV_HEADER", "--ignore-errors", "-f", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) { // 1: some statement failed, as three must
			t.Fatalf("presto-cli against %s: %v\n%s", server, err, stderr.String())
		}
		return string(out), stripIDs(stderr.String())
	}
	var wantOut, wantErr, gotOut, gotErr string
	e2e.Both(func() { wantOut, wantErr = runCLI(direct) }, func() { gotOut, gotErr = runCLI(proxied) })
	if strings.Count(wantOut, "\n") < 60000 || !strings.Contains(wantOut, "CANADA") || !strings.Contains(wantOut, "10000") {
		t.Fatalf("the direct run did not produce the corpus's results (%d lines):\n%s", strings.Count(wantOut, "\n"), e2e.Tail(wantErr, 2000))
	}
	if gotOut != wantOut {
		t.Errorf("stdout differs through the proxy (%d vs %d bytes):\n%s", len(gotOut), len(wantOut), firstDiff(wantOut, gotOut))
	}
	if gotErr != wantErr {
		t.Errorf("errors differ through the proxy:\ndirect: %s\nproxy:  %s", wantErr, gotErr)
	}
	for _, want := range []string{"no_such_table does not exist", "mismatched input 'SELEC'", "/ by zero"} {
		if !strings.Contains(gotErr, want) {
			t.Errorf("the CLI did not show %q through the proxy: %s", want, gotErr)
		}
	}
	t.Logf("presto-cli: %d statements, %d output lines identical through the proxy", len(cliScript), strings.Count(gotOut, "\n"))
}

// firstDiff shows where two texts part.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return "line " + strconv.Itoa(i+1) + ":\n  direct: " + e2e.Tail(al[i], 300) + "\n  proxy:  " + e2e.Tail(bl[i], 300)
		}
	}
	return "one is a prefix of the other"
}

// jdbcCorpus is the corpus for JdbcCorpus.java (one statement or directive
// a line).
var jdbcCorpus = []string{
	typesSQL, nationSQL, bigSQL, joinSQL,
	"!prepared SELECT name FROM nation WHERE nationkey = ? ||| 3",
	"!prepared SELECT count(*) FROM lineitem WHERE orderkey < ? AND linenumber = ? ||| 100,1",
	"!autocommit false", "SELECT count(*) FROM region", "!commit",
	"SELECT count(*) FROM nation", "!rollback", "!autocommit true",
	"USE tpch.sf1", "SELECT count(*) FROM supplier",
	"SET SESSION query_max_run_time = '1h'", "SHOW SESSION LIKE 'query_max_run_time'",
	missingSQL, syntaxSQL, divSQL,
	"!cancel " + slowSQL,
}

func TestJDBCCorpusMatchesDirect(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	jar := need(t, "PRESTROID_PRESTO_JDBC")
	proxied := startPresto(t)
	runJDBC := func(server string) string {
		url := "jdbc:presto://" + strings.TrimPrefix(server, "http://") + "/tpch/tiny"
		cmd := exec.Command(java(t), "-cp", jar, "JdbcCorpus.java", url, "e2e-jdbc")
		cmd.Stdin = strings.NewReader(strings.Join(jdbcCorpus, "\n") + "\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("JdbcCorpus against %s: %v\n%s", server, err, e2e.Tail(stderr.String(), 3000))
		}
		return stripIDs(string(out))
	}
	var want, got string
	e2e.Both(func() { want = runJDBC(direct) }, func() { got = runJDBC(proxied) })
	if strings.Count(want, "\n") < 60000 || !strings.Contains(want, "CANADA") || !strings.Contains(want, "\ncancelled\n") {
		t.Fatalf("the direct run did not produce the corpus's results:\n%s", e2e.Tail(want, 3000))
	}
	if got != want {
		t.Errorf("JDBC output differs through the proxy:\n%s", firstDiff(want, got))
	}
	for _, want := range []string{"no_such_table does not exist", "mismatched input 'SELEC'", "/ by zero", "\n10000\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("JDBC through the proxy lacks %q", want)
		}
	}
	t.Logf("presto-jdbc: %d statements identical through the proxy", len(jdbcCorpus))
}

// pyCorpus is the corpus for prestoclient.py.
var pyCorpus = []map[string]string{
	{"name": "types", "sql": typesSQL}, {"name": "nation", "sql": nationSQL}, {"name": "big", "sql": bigSQL},
	{"name": "join", "sql": joinSQL},
	{"name": "set", "sql": "SET SESSION query_max_run_time = '1h'"},
	{"name": "show", "sql": "SHOW SESSION LIKE 'query_max_run_time'"},
	{"name": "prepare", "sql": "PREPARE q1 FROM SELECT name FROM nation WHERE nationkey = ?"},
	{"name": "execute", "sql": "EXECUTE q1 USING 3"},
	{"name": "commit", "sql": "SELECT count(*) FROM region", "tx": "commit"},
	{"name": "rollback", "sql": "SELECT count(*) FROM nation", "tx": "rollback"},
	{"name": "missing", "sql": missingSQL}, {"name": "syntax", "sql": syntaxSQL}, {"name": "div", "sql": divSQL},
}

func TestPythonCorpusMatchesDirect(t *testing.T) {
	t.Parallel()
	direct := prestoURL(t)
	py := need(t, "PRESTROID_PYTHON")
	proxied := startPresto(t)
	runPy := func(server string) map[string]json.RawMessage {
		in, _ := json.Marshal(map[string]any{"server": server, "user": "e2e-python", "steps": pyCorpus})
		cmd := exec.Command(py, "prestoclient.py")
		cmd.Stdin = bytes.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("prestoclient.py against %s: %v\n%s", server, err, e2e.Tail(stderr.String(), 3000))
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%v: %s", err, e2e.Tail(string(out), 500))
		}
		return m
	}
	var want, got map[string]json.RawMessage
	e2e.Both(func() { want = runPy(direct) }, func() { got = runPy(proxied) })
	same := 0
	for _, s := range pyCorpus {
		n := s["name"]
		w, g := stripIDs(string(want[n])), stripIDs(string(got[n]))
		if w == "" || w != g {
			t.Errorf("%s: differs through the proxy:\ndirect %s\nproxy  %s", n, e2e.Tail(w, 400), e2e.Tail(g, 400))
			continue
		}
		same++
	}
	for n, want := range map[string]string{"missing": "SYNTAX_ERROR", "syntax": "SYNTAX_ERROR", "div": "DIVISION_BY_ZERO", "execute": "CANADA"} {
		if !strings.Contains(string(got[n]), want) {
			t.Errorf("%s through the proxy: %s, want %s", n, got[n], want)
		}
	}
	t.Logf("prestodb (Python): %d of %d statements identical through the proxy", same, len(pyCorpus))
}
