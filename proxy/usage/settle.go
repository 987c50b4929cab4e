package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Settling: the last page of a query that failed leaves while its tasks
// are still being aborted, and its statistics miss the CPU those tasks
// spend until they stop (a quarter of a second of a 1.5 s query in the
// end-to-end test); a page that was not rolled up misses all of it.
// Trino's own final account of the query (GET /v1/query/{id}, once its
// finalQueryInfo is set) has it. So such a query is accounted a moment
// later, with the figures of that final account, when a Fetcher is
// configured and answers; otherwise (no Fetcher, an error, a cluster
// that requires credentials the proxy does not have, too many queries
// settling at once) as its last page read.

// Fetcher fetches a query's info document (GET /v1/query/{id}) from the
// cluster that ran it. The proxy implements it.
type Fetcher func(ctx context.Context, cluster, queryID string) ([]byte, error)

// maxSettling bounds the queries settling at once; settleTries and
// settleFirst how long one is waited for (1+2+4+8 s after the first
// try at settleFirst).
const (
	maxSettling = 64
	settleFirst = 500 * time.Millisecond
	settleTries = 5
)

// errNotFinal: the query's final info is not there yet.
var errNotFinal = errors.New("usage: the query's info is not final yet")

// needsSettling reports whether q's last page may have missed CPU (an
// Untracked query is settled for its identity as well).
func needsSettling(q *Query) bool { return q.State != "FINISHED" || !q.RolledUp }

// settle replaces q's actual figures with Trino's final account of it,
// trying a few times; it reports whether it did.
func (r *Recorder) settle(q *Query) bool {
	wait := settleFirst
	for range settleTries {
		select {
		case <-time.After(wait):
		case <-r.closing: // shutting down: as it reads
			return false
		}
		wait = max(2*wait, time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b, err := r.o.Fetch(ctx, q.Cluster, q.QueryID)
		cancel()
		if err != nil {
			r.log.Debug("usage: fetching the query's final info failed", "query", q.QueryID, "error", err)
			return false
		}
		f, err := parseQueryInfo(b)
		if errors.Is(err, errNotFinal) {
			continue
		}
		if err != nil {
			r.log.Debug("usage: reading the query's final info failed", "query", q.QueryID, "error", err)
			return false
		}
		q.CPUSeconds, q.WallSeconds, q.ElapsedSeconds, q.PeakMemoryBytes, q.RolledUp = f.cpu, f.wall, f.elapsed, f.peak, true
		if q.Untracked {
			q.User, q.Source = f.user, f.source
			q.Group = f.user
			if r.o.GroupOf != nil {
				q.Group = r.o.GroupOf(f.user)
			}
		}
		return true
	}
	return false
}

type final struct {
	cpu, wall, elapsed float64
	peak               int64
	user, source       string
}

// parseQueryInfo reads the figures of a final query info document
// (Trino's and PrestoDB's QueryInfo: airlift Durations such as "1.23s"
// and DataSizes such as "7295196B").
func parseQueryInfo(b []byte) (final, error) {
	var info struct {
		FinalQueryInfo bool `json:"finalQueryInfo"`
		Session        struct {
			User   string `json:"user"`
			Source string `json:"source"`
		} `json:"session"`
		QueryStats struct {
			TotalCPUTime              string `json:"totalCpuTime"`
			TotalScheduledTime        string `json:"totalScheduledTime"`
			ElapsedTime               string `json:"elapsedTime"`
			PeakUserMemoryReservation string `json:"peakUserMemoryReservation"`
		} `json:"queryStats"`
	}
	if err := json.Unmarshal(b, &info); err != nil {
		return final{}, fmt.Errorf("usage: query info: %w", err)
	}
	if !info.FinalQueryInfo {
		return final{}, errNotFinal
	}
	st := &info.QueryStats
	f := final{user: info.Session.User, source: info.Session.Source}
	var err error
	if f.cpu, err = parseDuration(st.TotalCPUTime); err != nil {
		return f, err
	}
	if f.wall, err = parseDuration(st.TotalScheduledTime); err != nil {
		return f, err
	}
	if f.elapsed, err = parseDuration(st.ElapsedTime); err != nil {
		return f, err
	}
	peak, err := parseDataSize(st.PeakUserMemoryReservation)
	f.peak = int64(peak)
	return f, err
}

// splitUnit splits "1.23ms" into 1.23 and "ms".
func splitUnit(s string) (float64, string, error) {
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, "", fmt.Errorf("usage: %q: want a number and a unit", s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil {
		return 0, "", fmt.Errorf("usage: %q: %w", s, err)
	}
	return v, s[i:], nil
}

// parseDuration reads an airlift Duration ("245.12ms", "1.23s", "2.05m")
// in seconds.
func parseDuration(s string) (float64, error) {
	v, unit, err := splitUnit(s)
	if err != nil {
		return 0, err
	}
	scale := map[string]float64{"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
	if scale == 0 {
		return 0, fmt.Errorf("usage: %q: unknown duration unit", s)
	}
	return v * scale, nil
}

// parseDataSize reads an airlift DataSize ("7295196B", "1.5MB") in bytes.
func parseDataSize(s string) (float64, error) {
	v, unit, err := splitUnit(s)
	if err != nil {
		return 0, err
	}
	scale := map[string]float64{"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "PB": 1 << 50}[unit]
	if scale == 0 {
		return 0, fmt.Errorf("usage: %q: unknown data size unit", s)
	}
	return v * scale, nil
}
