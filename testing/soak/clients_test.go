package soak

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
	"github.com/trinodb/trino-go-client/trino"
)

// result is what one client made of one statement.
type result struct {
	ok   bool
	rows int
	sum  string // sha256 of the sorted, normalized rows (the client's own rendering)
	kind string // failed: trino (a Trino-shaped error), http (a status the client gave up on), other, timeout
	err  string
}

// How a client's failure looked.
const (
	kindTrino   = "trino"
	kindHTTP    = "http"
	kindOther   = "other"
	kindTimeout = "timeout" // the client's deadline passed: a hang
)

// client runs statements with one real client. Go and Python run one
// statement a call; the CLI runs a batch in one JVM (one start per batch).
type client interface {
	name() string
	batch() int
	run(ctx context.Context, server, user string, sqls []string) []result
}

func digest(lines []string) string {
	h := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(h[:])
}

// goClient is trino-go-client through database/sql (its retries: 429, 502,
// 503, 504 on every request; network errors on polls, dial errors alone on
// the POST).
type goClient struct {
	mu  sync.Mutex
	dbs map[string]*sql.DB // server+user
}

func (c *goClient) name() string { return "go" }
func (c *goClient) batch() int   { return 1 }

func (c *goClient) db(server, user string) *sql.DB {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := server + "|" + user
	if db, ok := c.dbs[k]; ok {
		return db
	}
	db, err := sql.Open("trino", strings.Replace(server, "http://", "http://"+user+"@", 1)+"?source=prestroid-soak-go")
	if err != nil {
		panic(err) // a malformed DSN is the test's bug
	}
	c.dbs[k] = db
	return db
}

func (c *goClient) run(ctx context.Context, server, user string, sqls []string) []result {
	lines, err := e2e.RowsAsStrings(ctx, c.db(server, user), sqls[0])
	if err == nil {
		return []result{{ok: true, rows: len(lines) - 1, sum: digest(lines)}}
	}
	r := result{err: e2e.Tail(err.Error(), 300)}
	var te *trino.ErrTrino
	var qf *trino.ErrQueryFailed
	switch {
	case ctx.Err() != nil:
		r.kind = kindTimeout
	case errors.As(err, &te):
		r.kind, r.err = kindTrino, te.ErrorName+": "+e2e.Tail(te.Message, 300)
	case errors.As(err, &qf) && qf.StatusCode != 0:
		r.kind = kindHTTP
	default:
		r.kind = kindOther
	}
	return []result{r}
}

func (c *goClient) close() {
	for _, db := range c.dbs {
		db.Close()
	}
}

// pyClient is one pyworker.py process (the Python trino client, its
// default retries) taking one statement at a time.
type pyClient struct {
	py, script string
	mu         sync.Mutex
	cmd        *exec.Cmd
	in         io.WriteCloser
	out        chan string
	seq        int
}

func (c *pyClient) name() string { return "python" }
func (c *pyClient) batch() int   { return 1 }

func (c *pyClient) start() error {
	cmd := exec.Command(c.py, c.script)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	out := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			out <- sc.Text()
		}
		close(out)
	}()
	c.cmd, c.in, c.out = cmd, in, out
	return nil
}

func (c *pyClient) stop() {
	if c.cmd != nil {
		c.in.Close()
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		c.cmd = nil
	}
}

func (c *pyClient) run(ctx context.Context, server, user string, sqls []string) []result {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil {
		if err := c.start(); err != nil {
			return []result{{kind: kindOther, err: "starting the python worker: " + err.Error()}}
		}
	}
	c.seq++
	req, _ := json.Marshal(map[string]any{"id": c.seq, "server": server, "user": user, "sql": sqls[0]})
	if _, err := c.in.Write(append(req, '\n')); err != nil {
		c.stop()
		return []result{{kind: kindOther, err: "python worker: " + err.Error()}}
	}
	select {
	case line, ok := <-c.out:
		if !ok {
			c.stop()
			return []result{{kind: kindOther, err: "python worker exited"}}
		}
		var a struct {
			ID          int
			OK          bool
			Rows        int
			Sum         string
			Kind, Error string
		}
		if err := json.Unmarshal([]byte(line), &a); err != nil || a.ID != c.seq {
			c.stop()
			return []result{{kind: kindOther, err: fmt.Sprintf("python worker answered %.200q (%v)", line, err)}}
		}
		return []result{{ok: a.OK, rows: a.Rows, sum: a.Sum, kind: a.Kind, err: e2e.Tail(a.Error, 300)}}
	case <-ctx.Done():
		c.stop() // the next call starts a fresh worker
		return []result{{kind: kindTimeout, err: "no answer from the python client before its deadline"}}
	}
}

// cliClient runs a batch of statements in one Trino CLI JVM with
// --ignore-errors, each between two marker statements so that its rows are
// told apart (a statement whose markers did not both print counts as
// failed: its rows cannot be attributed).
type cliClient struct {
	jar, dir string
	n        int
}

func (c *cliClient) name() string { return "cli" }
func (c *cliClient) batch() int   { return c.n }

var (
	cliQueryFailed = regexp.MustCompile(`(?m)^Query \S+ failed: (.*)$`)
	cliOther       = regexp.MustCompile(`(?m)^(Error running command: .*|Error starting query.*)$`)
)

func (c *cliClient) run(ctx context.Context, server, user string, sqls []string) []result {
	var script strings.Builder
	for i, q := range sqls {
		fmt.Fprintf(&script, "SELECT 'soak-begin %d';\n%s;\nSELECT 'soak-end %d';\n", i, q, i)
	}
	f, err := os.CreateTemp(c.dir, "batch-*.sql")
	fail := func(kind, msg string) []result {
		out := make([]result, len(sqls))
		for i := range out {
			out[i] = result{kind: kind, err: msg}
		}
		return out
	}
	if err != nil {
		return fail(kindOther, err.Error())
	}
	defer os.Remove(f.Name())
	f.WriteString(script.String())
	f.Close()
	cmd := exec.CommandContext(ctx, "java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar", c.jar,
		"--server", server, "--user", user, "--source", "prestroid-soak-cli",
		"--output-format", "TSV", "--ignore-errors", "-f", f.Name())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ctx.Err() != nil {
		return fail(kindTimeout, "the CLI batch passed its deadline")
	}
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return fail(kindOther, err.Error())
	}
	// Sections between the markers; the failures' messages in order.
	sections := map[int][]string{}
	cur := -1
	for _, line := range strings.Split(string(out), "\n") {
		var n int
		if _, err := fmt.Sscanf(line, "soak-begin %d", &n); err == nil && strings.HasPrefix(line, "soak-begin ") {
			cur = n
			sections[n] = []string{}
			continue
		}
		if _, err := fmt.Sscanf(line, "soak-end %d", &n); err == nil && strings.HasPrefix(line, "soak-end ") {
			if n == cur {
				sections[n] = append(sections[n], "\x00end")
			}
			cur = -1
			continue
		}
		if cur >= 0 && line != "" {
			fields := strings.Split(line, "\t")
			for i := range fields {
				fields[i] = e2e.NormField(fields[i])
			}
			sections[cur] = append(sections[cur], strings.Join(fields, "\t"))
		}
	}
	msgs := stderr.String()
	kind, msg := kindOther, e2e.Tail(strings.TrimSpace(msgs), 300)
	if m := cliQueryFailed.FindStringSubmatch(msgs); m != nil {
		kind, msg = kindTrino, e2e.Tail(m[1], 300)
	} else if m := cliOther.FindString(msgs); m != "" {
		kind, msg = kindOther, e2e.Tail(m, 300)
		if strings.Contains(m, "statusCode=") {
			kind = kindHTTP
		}
	}
	failures := len(cliQueryFailed.FindAllString(msgs, -1)) + len(cliOther.FindAllString(msgs, -1))
	res := make([]result, len(sqls))
	for i := range sqls {
		s, ok := sections[i]
		// Failed, or its markers did (its rows are not attributable); or
		// no rows while the CLI reported failures: every catalogue
		// statement returns rows, so that one is the failure. No rows and
		// no failure reported compares (and differs).
		if !ok || len(s) == 0 || s[len(s)-1] != "\x00end" || len(s) == 1 && failures > 0 {
			res[i] = result{kind: kind, err: msg}
			continue
		}
		rows := s[:len(s)-1]
		sort.Strings(rows)
		res[i] = result{ok: true, rows: len(rows), sum: digest(rows)}
	}
	return res
}

// runWith bounds one call of c with timeout per statement.
func runWith(c client, server, user string, sqls []string, timeout time.Duration) []result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout*time.Duration(len(sqls)))
	defer cancel()
	return c.run(ctx, server, user, sqls)
}
