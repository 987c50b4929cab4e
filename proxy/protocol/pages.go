package protocol

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/valyala/fasthttp"
)

// The QueryResults pages the proxy writes itself: a query waiting in its
// admission queue, and a query that failed in the proxy (a well-formed
// Trino error: clients show its message like any other failure).

// ErrorCode is the error code of the proxy's own failures. Trino's
// EXTERNAL codes start at 0x0100_0000 (io.trino.spi.StandardErrorCode /
// ErrorType); the proxy's live in a range of their own above the
// connectors'.
const ErrorCode = 0x7072_0000 // "pr"

// QueuedPage is a QUEUED page of query id, waiting for elapsed, whose
// client polls nextURI next.
func QueuedPage(id, infoURI, nextURI string, elapsed time.Duration) []byte {
	ms := max(elapsed.Milliseconds(), 0)
	b, _ := json.Marshal(map[string]any{
		"id":       id,
		"infoUri":  infoURI,
		"nextUri":  nextURI,
		"stats":    stats("QUEUED", true, ms),
		"warnings": []any{},
	})
	return b
}

// ErrorPage is the last page of query id, FAILED with Trino error name of
// type typ (USER_ERROR, INSUFFICIENT_RESOURCES, EXTERNAL, ...) and msg.
func ErrorPage(id, infoURI, name, typ, msg string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id":      id,
		"infoUri": infoURI,
		"stats":   stats("FAILED", false, 0),
		"error": map[string]any{
			"message": msg, "errorCode": ErrorCode, "errorName": name, "errorType": typ,
			"failureInfo": map[string]any{"type": "io.prestroid.ProxyException", "message": msg, "suppressed": []any{}, "stack": []any{}},
		},
		"warnings": []any{},
	})
	return b
}

// stats are a page's StatementStats for a query that has run nothing.
func stats(state string, queued bool, elapsedMillis int64) map[string]any {
	return map[string]any{"state": state, "queued": queued, "scheduled": false, "nodes": 0,
		"totalSplits": 0, "queuedSplits": 0, "runningSplits": 0, "completedSplits": 0,
		"cpuTimeMillis": 0, "wallTimeMillis": 0, "queuedTimeMillis": elapsedMillis, "elapsedTimeMillis": elapsedMillis,
		"processedRows": 0, "processedBytes": 0, "physicalInputBytes": 0, "peakMemoryBytes": 0, "spilledBytes": 0}
}

// SyntheticQueryID returns an id shaped like Trino's (date_time_seq_random)
// for a failure that has no query of its own.
func SyntheticQueryID() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102_150405") + "_00000_p" + hex.EncodeToString(b[:])[:4]
}

// WriteJSON answers with v as JSON (and a newline) and status, replacing
// whatever the response held.
func WriteJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, _ := json.Marshal(v)
	ctx.Response.Reset()
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(append(b, '\n'))
}
