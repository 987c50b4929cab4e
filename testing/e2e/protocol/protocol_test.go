// Package protocol tests the client protocol through the proxy against a
// real Trino: errors, session state, cancel, tampered URIs, and a large
// result streamed with bounded memory. See package e2e.
package protocol

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prestroid/prestroid/testing/e2e"
)

func TestErrorsMatchDirect(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	for _, tc := range []struct{ name, sql, errorName string }{
		{"a syntax error", "SELEC 1", "SYNTAX_ERROR"},
		{"an unknown table", "SELECT * FROM tpch.tiny.no_such_table", "TABLE_NOT_FOUND"},
		{"a failure during execution", "SELECT CAST(comment AS integer) FROM tpch.tiny.nation", "INVALID_CAST_ARGUMENT"},
	} {
		t.Run(tc.name+" comes back with the same error fields", func(t *testing.T) {
			want, got := e2e.RunRaw(t, direct, tc.sql), e2e.RunRaw(t, proxied, tc.sql)
			if want.Error == nil || got.Error == nil {
				t.Fatalf("no error: direct %+v proxy %+v", want.Error, got.Error)
			}
			if want.Error.ErrorName != tc.errorName {
				t.Fatalf("direct error %s, expected %s", want.Error.ErrorName, tc.errorName)
			}
			if !reflect.DeepEqual(want.Error, got.Error) || want.Stats.State != got.Stats.State {
				t.Errorf("error differs:\n direct %+v\n  proxy %+v", *want.Error, *got.Error)
			}
			// And the Go client sees the same error text.
			_, errD := e2e.OpenDB(t, direct, "").Exec(tc.sql)
			_, errP := e2e.OpenDB(t, proxied, "").Exec(tc.sql)
			if e2e.StripQueryID(errD) != e2e.StripQueryID(errP) {
				t.Errorf("go client error differs:\n direct %v\n  proxy %v", errD, errP)
			}
		})
	}
}

func TestSessionStateWithTheCLI(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	cli := e2e.RequireEnv(t, "PRESTROID_TRINO_CLI")
	proxied := e2e.StartDefaultProxy(t)
	run := func(server, table string) string {
		script := strings.NewReplacer("TBL", table).Replace(`
USE tpch.tiny;
SELECT count(*) FROM nation;
SET SESSION join_distribution_type = 'BROADCAST';
SHOW SESSION LIKE 'join_distribution_type';
PREPARE q FROM SELECT name FROM nation WHERE nationkey = ?;
EXECUTE q USING 3;
DEALLOCATE PREPARE q;
CREATE TABLE memory.default.TBL (x bigint);
INSERT INTO memory.default.TBL VALUES (1), (2);
START TRANSACTION;
SELECT sum(x) FROM memory.default.TBL;
COMMIT;
DROP TABLE memory.default.TBL;
`)
		out, err := exec.Command("java", "-jar", cli, "--server", server, "--user", "e2e-cli",
			"--output-format", "TSV", "--execute", script).CombinedOutput()
		if err != nil {
			t.Fatalf("cli against %s: %v\n%s", server, err, out)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if l != "" && !strings.Contains(l, "jline") && !strings.Contains(l, "WARNING") {
				lines = append(lines, l)
			}
		}
		return strings.Join(lines, "\n")
	}
	suffix := fmt.Sprintf("%d", rand.Uint32())
	want, got := run(direct, "e2e_cli_d"+suffix), run(proxied, "e2e_cli_p"+suffix)
	if want != got {
		t.Fatalf("CLI session through the proxy differs:\n--- direct\n%s\n--- proxy\n%s", want, got)
	}
	for _, expect := range []string{"25", "BROADCAST", "CANADA", "3"} {
		if !strings.Contains(got, expect) {
			t.Errorf("output lacks %q (USE, SET SESSION, PREPARE/EXECUTE or the transaction did not hold):\n%s", expect, got)
		}
	}
}

func TestSessionStateWithTheGoClient(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	run := func(server, table string) []string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conn, err := e2e.OpenDB(t, server, "").Conn(ctx) // session state lives on one connection
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var out []string
		q := func(query string) {
			var v sql.NullString
			if err := conn.QueryRowContext(ctx, query).Scan(&v); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
			out = append(out, v.String)
		}
		x := func(query string) {
			if _, err := conn.ExecContext(ctx, query); err != nil {
				t.Fatalf("%s: %v", query, err)
			}
		}
		x("USE tpch.tiny")
		q("SELECT count(*) FROM nation")
		x("SET SESSION join_distribution_type = 'BROADCAST'")
		var name, value, def, typ, desc string
		if err := conn.QueryRowContext(ctx, "SHOW SESSION LIKE 'join_distribution_type'").Scan(&name, &value, &def, &typ, &desc); err != nil {
			t.Fatal(err)
		}
		out = append(out, value)
		x("PREPARE q FROM SELECT name FROM nation WHERE nationkey = 3")
		q("EXECUTE q")
		x("DEALLOCATE PREPARE q")
		// The memory connector writes only in autocommit; the transaction
		// reads (its id travels in X-Trino-Transaction-Id on every request).
		x("CREATE TABLE memory.default." + table + " (x bigint)")
		x("INSERT INTO memory.default." + table + " VALUES (1), (2)")
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var sum string
		if err := tx.QueryRowContext(ctx, "SELECT sum(x) FROM memory.default."+table).Scan(&sum); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		out = append(out, sum)
		x("DROP TABLE memory.default." + table)
		return out
	}
	suffix := fmt.Sprintf("%d", rand.Uint32())
	want := []string{"25", "BROADCAST", "CANADA", "3"}
	if got := run(direct, "e2e_go_d"+suffix); !reflect.DeepEqual(got, want) {
		t.Fatalf("direct: %q, want %q", got, want)
	}
	if got := run(proxied, "e2e_go_p"+suffix); !reflect.DeepEqual(got, want) {
		t.Fatalf("through the proxy: %q, want %q", got, want)
	}
}

// queryState looks a query up in system.runtime.queries, directly.
func queryState(t testing.TB, direct, where string) (id, state, errCode string) {
	t.Helper()
	db := e2e.OpenDB(t, direct, "")
	deadline := time.Now().Add(30 * time.Second)
	for {
		row := db.QueryRow("SELECT query_id, state, coalesce(error_code, '') FROM system.runtime.queries WHERE " + where +
			" AND query NOT LIKE '%system.runtime.queries%' ORDER BY created DESC LIMIT 1")
		err := row.Scan(&id, &state, &errCode)
		if err == nil && (state == "FAILED" || state == "FINISHED") {
			return
		}
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("query %s still %q after 30s (err %v)", where, state, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func TestCancelThroughNextURI(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	marker := fmt.Sprintf("cancel_next_%d", rand.Uint32())
	resp, p := e2e.Do(t, "POST", proxied+"/v1/statement", e2e.SlowQuery+" -- "+marker, nil)
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	for p.Stats.State != "RUNNING" && p.NextURI != "" {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
	}
	if p.NextURI == "" {
		t.Fatalf("query ended before it could be cancelled: %+v", p)
	}
	r, _ := e2e.Do(t, "DELETE", p.NextURI, "", nil)
	if r.StatusCode != 204 {
		t.Fatalf("DELETE nextUri: %d", r.StatusCode)
	}
	_, state, code := queryState(t, direct, "query LIKE '%"+marker+"%'")
	if state != "FAILED" || code != "USER_CANCELED" {
		t.Errorf("on Trino the query is %s/%s, want FAILED/USER_CANCELED", state, code)
	}
}

func TestCancelThroughQueryResource(t *testing.T) {
	t.Parallel()
	// The Go client cancels with DELETE /v1/query/{id} when its context ends.
	direct := e2e.TrinoURL(t)
	proxied := e2e.StartDefaultProxy(t)
	marker := fmt.Sprintf("cancel_goclient_%d", rand.Uint32())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		rows, err := e2e.OpenDB(t, proxied, "").QueryContext(ctx, e2e.SlowQuery+" -- "+marker)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
			rows.Close()
		}
		done <- err
	}()
	// Wait until Trino runs it, then cancel the client's context.
	db := e2e.OpenDB(t, direct, "")
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		_ = db.QueryRow("SELECT count(*) FROM system.runtime.queries WHERE state = 'RUNNING' AND query LIKE '%" + marker + "%' AND query NOT LIKE '%system.runtime%'").Scan(&n)
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the query never started running")
		}
		time.Sleep(200 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("query finished despite the cancel")
	}
	_, state, code := queryState(t, direct, "query LIKE '%"+marker+"%'")
	if state != "FAILED" || code != "USER_CANCELED" {
		t.Errorf("on Trino the query is %s/%s, want FAILED/USER_CANCELED", state, code)
	}
}

func TestTamperedNextURIIsRejected(t *testing.T) {
	t.Parallel()
	proxied := e2e.StartDefaultProxy(t)
	resp, p := e2e.Do(t, "POST", proxied+"/v1/statement", "SELECT 1", nil)
	if resp.StatusCode != 200 || p.NextURI == "" {
		t.Fatal(resp.Status)
	}
	bad := p.NextURI[:len(p.NextURI)-1] + "9"
	if r, _ := e2e.Do(t, "GET", bad, "", nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("tampered nextUri: %d, want 403", r.StatusCode)
	}
	// The genuine one still completes the query.
	for p.NextURI != "" {
		_, p = e2e.Do(t, "GET", p.NextURI, "", nil)
	}
	if p.Stats.State != "FINISHED" {
		t.Errorf("query state %s", p.Stats.State)
	}
}

// TestLargeResultStreamsWithBoundedMemory runs the real binary and reads
// its peak RSS after streaming more than a million rows.
func TestLargeResultStreamsWithBoundedMemory(t *testing.T) {
	t.Parallel()
	direct := e2e.TrinoURL(t)
	bin := e2e.RequireEnv(t, "PRESTROID_BIN")
	port := e2e.FreePort(t)
	cmd, base := e2e.ServeBinary(t, bin, port, "--listen", "127.0.0.1:"+port, "--upstream", direct)
	const n = 1_200_000
	rows, err := e2e.OpenDB(t, base, "").Query(fmt.Sprintf("SELECT orderkey, partkey, suppkey, linenumber, quantity, shipdate FROM tpch.sf1.lineitem LIMIT %d", n))
	if err != nil {
		t.Fatal(err)
	}
	count := 0
	for rows.Next() {
		count++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if count != n {
		t.Fatalf("%d rows, want %d", count, n)
	}
	hwm := vmHWM(t, cmd.Process.Pid)
	t.Logf("streamed %d rows through the proxy; proxy peak RSS %d MiB", count, hwm>>20)
	if hwm > 200<<20 {
		t.Errorf("proxy peak RSS %d MiB: memory not bounded", hwm>>20)
	}
}

func vmHWM(t testing.TB, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(l, "VmHWM:")), "%d", &kb)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}
