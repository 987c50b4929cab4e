package collector

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// PrestoDB refuses Trino's X-Trino-* headers, and trino-go-client cannot
// decode its column types (PrestoDB spells a type argument's kind
// LONG_LITERAL where Trino says LONG), so the collector speaks the client
// protocol to a PrestoDB coordinator itself: POST /v1/statement, then GET
// every nextUri until there is none, counting the rows and keeping the
// statistics of the last page. Trino keeps the driver.

// prestoPage is the part of a PrestoDB QueryResults page the collector reads.
type prestoPage struct {
	ID      string            `json:"id"`
	NextURI string            `json:"nextUri"`
	Data    []json.RawMessage `json:"data"`
	Error   *prestoError      `json:"error"`
	Stats   prestoStats       `json:"stats"`
}

// prestoStats is PrestoDB's StatementStats: Trino's fields less
// physicalInputBytes, plus peakTotalMemoryBytes.
type prestoStats struct {
	State                string `json:"state"`
	Nodes                int    `json:"nodes"`
	TotalSplits          int    `json:"totalSplits"`
	CPUTimeMillis        int64  `json:"cpuTimeMillis"`
	WallTimeMillis       int64  `json:"wallTimeMillis"`
	QueuedTimeMillis     int64  `json:"queuedTimeMillis"`
	ElapsedTimeMillis    int64  `json:"elapsedTimeMillis"`
	ProcessedRows        int64  `json:"processedRows"`
	ProcessedBytes       int64  `json:"processedBytes"`
	PeakMemoryBytes      int64  `json:"peakMemoryBytes"`
	PeakTotalMemoryBytes int64  `json:"peakTotalMemoryBytes"`
	SpilledBytes         int64  `json:"spilledBytes"`
}

// stats maps the page statistics to a record's; what PrestoDB's protocol
// lacks is unknown (-1) until /v1/query fills it.
func (s prestoStats) stats() *Stats {
	return &Stats{
		State: s.State, CPUMillis: s.CPUTimeMillis, WallMillis: s.WallTimeMillis,
		ElapsedMillis: s.ElapsedTimeMillis, QueuedMillis: s.QueuedTimeMillis,
		AnalysisMillis: -1, PlanningMillis: -1, PlanningCPUMillis: -1,
		PeakMemoryBytes: s.PeakMemoryBytes, PeakTotalMemoryBytes: s.PeakTotalMemoryBytes,
		ProcessedRows: s.ProcessedRows, ProcessedBytes: s.ProcessedBytes,
		PhysicalInputBytes: -1, SpilledBytes: s.SpilledBytes,
		Splits: s.TotalSplits, Nodes: s.Nodes,
	}
}

// prestoError is a failed query's error on a page.
type prestoError struct {
	Message   string `json:"message"`
	ErrorCode int    `json:"errorCode"`
	ErrorName string `json:"errorName"`
	ErrorType string `json:"errorType"`
}

func (e *prestoError) Error() string {
	return fmt.Sprintf("collector: query failed: %s (%s): %s", e.ErrorName, e.ErrorType, e.Message)
}

// prestoResult is what one execution reports: the query id (empty when the
// coordinator never accepted the statement), the rows drained and the last
// page's statistics (nil without a page).
type prestoResult struct {
	queryID string
	rows    int64
	stats   *Stats
}

// maxPageBytes bounds one protocol page (a page of result rows; PrestoDB
// targets about 1 MB).
const maxPageBytes = 64 << 20

// execPresto runs it on the PrestoDB coordinator with the item's session
// (h: the engine's headers) and drains the result. A failed query returns
// its *prestoError; when ctx ends, the query is cancelled (DELETE on its
// nextUri) and ctx's error returned.
func (r *Runner) execPresto(ctx context.Context, it *Item, h http.Header) (prestoResult, error) {
	var res prestoResult
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(r.Server, "/")+"/v1/statement", strings.NewReader(it.SQL))
	if err != nil {
		return res, err
	}
	req.Header = h.Clone()
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	p, err := r.prestoPage(req)
	for err == nil {
		if p.ID != "" {
			res.queryID = p.ID
		}
		res.rows += int64(len(p.Data))
		res.stats = p.Stats.stats()
		if p.Error != nil {
			return res, p.Error
		}
		if p.NextURI == "" {
			return res, nil
		}
		next := p.NextURI
		if ctx.Err() != nil {
			r.deleteURI(next, h)
			return res, ctx.Err()
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
		if err != nil {
			return res, err
		}
		req.Header = h.Clone()
		p, err = r.prestoPage(req)
		if err != nil && ctx.Err() != nil {
			r.deleteURI(next, h)
			return res, ctx.Err()
		}
	}
	return res, err
}

// prestoPage sends req and decodes the page it answers. The protocol's
// retryable statuses (503 while the coordinator is busy) are retried a few
// times for GETs, which are idempotent.
func (r *Runner) prestoPage(req *http.Request) (*prestoPage, error) {
	backoff := 100 * time.Millisecond
	for attempt := 0; ; attempt++ {
		resp, err := r.httpClient().Do(req)
		if err != nil {
			return nil, fmt.Errorf("collector: %s %s: %w", req.Method, req.URL.Path, err)
		}
		if resp.StatusCode == http.StatusServiceUnavailable && req.Method == http.MethodGet && attempt < 5 {
			resp.Body.Close()
			select {
			case <-req.Context().Done():
				return nil, req.Context().Err()
			case <-time.After(backoff):
			}
			backoff *= 2
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxPageBytes+1))
		resp.Body.Close()
		switch {
		case err != nil:
			return nil, fmt.Errorf("collector: %s %s: %w", req.Method, req.URL.Path, err)
		case len(b) > maxPageBytes:
			return nil, fmt.Errorf("collector: %s %s: page over %d bytes", req.Method, req.URL.Path, maxPageBytes)
		case resp.StatusCode != http.StatusOK:
			return nil, fmt.Errorf("collector: %s %s: HTTP %d: %.200s", req.Method, req.URL.Path, resp.StatusCode, b)
		}
		var p prestoPage
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("collector: %s %s: bad page: %w", req.Method, req.URL.Path, err)
		}
		return &p, nil
	}
}

// deleteURI cancels a query through its nextUri (with its own deadline: the
// caller's context has ended) and ignores the outcome.
func (r *Runner) deleteURI(uri string, h http.Header) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, uri, nil)
	if err != nil {
		return
	}
	req.Header = h.Clone()
	if resp, err := r.httpClient().Do(req); err == nil {
		resp.Body.Close()
	}
}
