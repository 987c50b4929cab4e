package bench

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/prestroid/prestroid/testing/redistest"
)

func TestReadRESPCommand(t *testing.T) {
	// The third argument holds a CRLF: lengths, not lines, delimit it.
	in := "*3\r\n$7\r\nEVALSHA\r\n$4\r\nabcd\r\n$4\r\na\r\nb\r\nPING\r\n*1\r\n$4\r\nexec\r\n"
	br := bufio.NewReader(strings.NewReader(in))
	raw, head, err := readRESPCommand(br)
	if err != nil || string(raw) != "*3\r\n$7\r\nEVALSHA\r\n$4\r\nabcd\r\n$4\r\na\r\nb\r\n" || strings.Join(head, " ") != "EVALSHA abcd" {
		t.Fatalf("first: %q %q %v", raw, head, err)
	}
	if raw, head, err = readRESPCommand(br); err != nil || string(raw) != "PING\r\n" || head[0] != "PING" {
		t.Fatalf("inline: %q %q %v", raw, head, err)
	}
	if _, head, err = readRESPCommand(br); err != nil || head[0] != "exec" {
		t.Fatalf("third: %q %v", head, err)
	}
	if _, _, err = readRESPCommand(bufio.NewReader(strings.NewReader("*1\r\n:5\r\n"))); err != errRESP {
		t.Errorf("not a bulk string: %v", err)
	}
}

func TestTimingPath(t *testing.T) {
	for st, want := range map[string]string{
		"prestroid;dur=0.091, estimate;desc=history":                           "history",
		"prestroid;dur=0.5, estimate;desc=text":                                "text",
		"prestroid;dur=0.2, estimate-cache;desc=hit":                           "cache",
		"prestroid;dur=268, explain;dur=267, featurize;dur=0.4, infer;dur=0.3": "explain",
		"prestroid;dur=0.01":                                                   "none",
	} {
		if got := timingPath(st); got != want {
			t.Errorf("timingPath(%q) = %q, want %q", st, got, want)
		}
	}
}

// The relay counts what a real client sends a real Redis: each command of
// a pipeline, a transaction as one round trip, our scripts by file name.
func TestRedisRelayCounts(t *testing.T) {
	rs := redistest.Start(t)
	repo, _ := filepath.Abs("..")
	scripts, err := luaScripts(repo)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := startRedisRelay(rs.Addr, scripts)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: relay.Addr(), Protocol: 2, DisableIdentity: true})
	defer c.Close()
	body, err := os.ReadFile(filepath.Join(repo, "proxy", "admission", "lua", "ratelimit.lua"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	before := relay.snapshot()
	sc := redis.NewScript(string(body))
	for range 2 { // EVALSHA, NOSCRIPT, EVAL; then EVALSHA
		if err := sc.Run(ctx, c, []string{"p:"}, "u:alice", 10, 10).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HIncrBy(ctx, "h", "f", 1)
		p.Expire(ctx, "h", 60e9)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d := relay.snapshot().sub(before)
	want := map[string]int64{"EVALSHA ratelimit.lua": 2, "EVAL ratelimit.lua": 1, "MULTI": 1, "HINCRBY": 1, "EXPIRE": 1, "EXEC": 1}
	for k, v := range want {
		if d.ops[k] != v {
			t.Errorf("%s: %d, want %d (all: %v)", k, d.ops[k], v, d.ops)
		}
	}
	// Four batches; one may reach the relay in two reads (a long EVAL),
	// counted twice: round trips are an upper bound.
	if d.trips < 4 || d.trips > 6 || d.in <= int64(len(body)) || d.out == 0 {
		t.Errorf("round trips %d (want 4, at most 6), bytes in %d, out %d", d.trips, d.in, d.out)
	}
}
