package collector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// Shape is the Warmth.Shape of a query: catalog, schema, session and the
// SQL up to its literals.
func Shape(catalog, schema string, session map[string]string, sql string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", catalog, schema)
	ks := make([]string, 0, len(session))
	for k := range session {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(h, "%s=%s\x00", k, session[k])
	}
	h.Write([]byte(sqllex.Fingerprint(sql)))
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// JVM identifies one run of a Trino server: its node id and start time.
type JVM struct {
	Node      string
	StartedAt time.Time
	// Slack is how far two estimates of the start time of one JVM may be
	// apart: uptime is reported with three significant digits.
	Slack time.Duration
}

// Same reports whether a JVM started at started on node is j.
func (j JVM) Same(node string, started time.Time) bool {
	d := j.StartedAt.Sub(started)
	return node == j.Node && d <= j.Slack && d >= -j.Slack
}

// ServerJVM asks the server which JVM it is (GET /v1/status: nodeId and
// uptime).
func ServerJVM(ctx context.Context, c *http.Client, server string) (JVM, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(server, "/")+"/v1/status", nil)
	if err != nil {
		return JVM{}, err
	}
	now := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return JVM{}, fmt.Errorf("collector: /v1/status: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return JVM{}, fmt.Errorf("collector: /v1/status: HTTP %d", resp.StatusCode)
	}
	var st struct {
		NodeID string `json:"nodeId"`
		Uptime string `json:"uptime"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&st); err != nil {
		return JVM{}, fmt.Errorf("collector: /v1/status: %w", err)
	}
	up := parseDurationMillis(st.Uptime)
	if st.NodeID == "" || up < 0 {
		return JVM{}, fmt.Errorf("collector: /v1/status: no node id or uptime (%q, %q)", st.NodeID, st.Uptime)
	}
	uptime := time.Duration(up) * time.Millisecond
	return JVM{
		Node:      st.NodeID,
		StartedAt: now.Add(-uptime).UTC().Truncate(time.Second),
		Slack:     max(2*time.Second, uptime/100+time.Second),
	}, nil
}

// shapeTracker remembers, per JVM, the shapes run on it: those of the
// record file's earlier records on the same JVM (a resumed run) and those
// this run started.
type shapeTracker struct {
	mu   sync.Mutex
	past []*Warmth // from the record file
	cur  JVM
	seen map[string]bool
}

func newShapeTracker(past []*Warmth) *shapeTracker { return &shapeTracker{past: past} }

// mark records that shape starts on j and reports whether it ran on j
// before, and j as first seen (one start time for all of a JVM's records,
// the record file's when it has some). A JVM other than the last one (a restart) starts from the
// record file's shapes of that JVM.
func (t *shapeTracker) mark(j JVM, shape string) (bool, JVM) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil || !j.Same(t.cur.Node, t.cur.StartedAt) {
		t.cur, t.seen = j, map[string]bool{}
		first := true
		for _, w := range t.past {
			if j.Same(w.Node, w.StartedAt) {
				t.seen[w.Shape] = true
				if first { // the file's start time: one per JVM across resumed runs
					t.cur.StartedAt, first = w.StartedAt, false
				}
			}
		}
	}
	warm := t.seen[shape]
	t.seen[shape] = true
	return warm, t.cur
}

// loadAvg reads the 1-, 5- and 15-minute load averages; ok is false where
// /proc/loadavg is not readable.
func loadAvg() (l [3]float64, ok bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return l, false
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return l, false
	}
	for i := range l {
		if l[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return l, false
		}
	}
	return l, true
}
