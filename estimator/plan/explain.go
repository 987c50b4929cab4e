package plan

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unsafe"

	"github.com/prestroid/prestroid/internal/callerhdr"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/internal/sqllex"
)

// ExplainClient runs `EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON) <sql>` over the
// client protocol as the caller, on Trino or PrestoDB (ExplainOn): the
// statement and the protocol are the same on both but for the headers'
// prefix. The zero value is ready to use; it is
// safe for concurrent use.
type ExplainClient struct {
	// HTTP sends the requests. Nil means a default client with connect,
	// TLS-handshake and response-header timeouts that does not follow
	// redirects (Trino's protocol never redirects; the Go client refuses them).
	HTTP *http.Client
	// MaxBytes limits the plan JSON (the "Query Plan" value). 0 means
	// DefaultMaxPlanBytes (64 MiB). Response bodies are limited to twice
	// that plus 1 MiB (the plan travels JSON-escaped).
	MaxBytes int64
}

// ExplainResult is a plan and the EXPLAIN query's timing.
type ExplainResult struct {
	PlanJSON       []byte // the single "Query Plan" varchar value (the JSON text)
	QueryID        string // id of the EXPLAIN query
	ElapsedMillis  int64  // final stats elapsedTimeMillis
	AnalysisMillis int64  // final stats analysisTimeMillis (0 if absent, as on PrestoDB; includes the inner planning)
	PlanningMillis int64  // final stats planningTimeMillis (the trivial outer plan; 0 if absent, as on PrestoDB)
	Wall           time.Duration
}

// TrinoError is a query failure reported by the coordinator, Trino or
// PrestoDB (HTTP 200 with an "error" object). Match it with errors.As.
type TrinoError struct {
	QueryID   string
	ErrorName string // e.g. SYNTAX_ERROR, TABLE_NOT_FOUND
	ErrorType string // USER_ERROR, INTERNAL_ERROR, INSUFFICIENT_RESOURCES, EXTERNAL
	ErrorCode int
	SQLState  string
	Message   string
}

func (e *TrinoError) Error() string {
	return fmt.Sprintf("estimator: EXPLAIN failed: %s (%s): %s", e.ErrorName, e.ErrorType, e.Message)
}

// HTTPError is a protocol-level failure: a non-200 answer from Trino.
type HTTPError struct {
	StatusCode int
	Body       string      // first 512 bytes
	Header     http.Header // the response's headers (a 401's WWW-Authenticate)
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("estimator: EXPLAIN: HTTP %d: %s", e.StatusCode, e.Body)
}

// ErrNoPlan means the EXPLAIN finished without a "Query Plan" value.
var ErrNoPlan = errors.New("estimator: EXPLAIN returned no plan")

// ErrNotExplainable is returned, without contacting Trino, for statements
// that get no EXPLAIN (see Explainable): SET SESSION, SHOW, DDL, EXPLAIN...
var ErrNotExplainable = errors.New("estimator: statement is not explained")

// explainPrefix is prepended to the statement; the newline keeps a leading
// "--" comment of the statement from swallowing the rest.
const explainPrefix = "EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)\n"

// ExplainSQL returns the EXPLAIN statement sent for sql (a trailing ";" is
// removed; Trino's protocol takes one statement without it).
func ExplainSQL(sql string) string {
	s := strings.TrimRight(sql, " \t\r\n")
	if strings.HasSuffix(s, ";") && endsWithSemicolon(s) {
		s = strings.TrimRight(strings.TrimSuffix(s, ";"), " \t\r\n")
	}
	return explainPrefix + s
}

// endsWithSemicolon reports whether the last token of s is a ";" (not one
// at the end of a comment or an unterminated string).
func endsWithSemicolon(s string) bool {
	var last sqllex.Token
	sc := sqllex.NewScanner(sqllex.Statement, s)
	for t := sc.NextTrivia(); t.Kind != sqllex.EOF; t = sc.NextTrivia() {
		last = t
	}
	return last.Kind == sqllex.Punct && last.Text == ";"
}

var defaultExplainHTTP = NewHTTPClient(nil)

// NewHTTPClient is the ExplainClient's default HTTP client (connect,
// TLS-handshake and response-header timeouts, no redirects followed) with
// tlsConfig for https clusters: a CA bundle, or verification off for tests.
// Nil means Go's defaults (the system roots).
func NewHTTPClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSClientConfig:       tlsConfig,
			TLSHandshakeTimeout:   5 * time.Second,
			ResponseHeaderTimeout: 60 * time.Second,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConnsPerHost:   32,
			DisableCompression:    true, // gzip is asked for and decoded explicitly
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// queryResults is the part of a Trino QueryResults page the client reads.
// decodeQueryResults fills it; the data is not read by encoding/json.
type queryResults struct {
	ID      string `json:"id"`
	NextURI string `json:"nextUri"`
	Error   *struct {
		Message   string `json:"message"`
		SQLState  string `json:"sqlState"`
		ErrorCode int    `json:"errorCode"`
		ErrorName string `json:"errorName"`
		ErrorType string `json:"errorType"`
	} `json:"error"`
	Stats struct {
		State              string `json:"state"`
		ElapsedTimeMillis  int64  `json:"elapsedTimeMillis"`
		AnalysisTimeMillis int64  `json:"analysisTimeMillis"`
		PlanningTimeMillis int64  `json:"planningTimeMillis"`
	} `json:"stats"`

	// The first row of data: EXPLAIN's one row of one string, the plan.
	hasRow bool
	plan   []byte
	badRow string // a first row of another shape, for the error
}

// decodeQueryResults decodes a QueryResults page. The plan is a JSON
// document escaped inside a JSON string, often hundreds of KB: the plan
// decoder's string reader unescapes it in one pass, where encoding/json
// would scan it three times (validate, copy the raw row, decode the row).
// The small fields go through encoding/json.
func decodeQueryResults(b []byte) (*queryResults, error) {
	qr := &queryResults{}
	// src aliases b without a copy: b is the page this client read and
	// never writes, and nothing sliced from src outlives this call (the
	// small fields are copied by encoding/json, the plan by bytes).
	d := newPlanDecoder(unsafe.String(unsafe.SliceData(b), len(b)), b, Limits{})
	small := func(v any) error {
		raw, err := d.skip()
		if err != nil {
			return err
		}
		return json.Unmarshal([]byte(raw), v)
	}
	err := d.object(func(key string) error {
		switch key {
		case "id":
			return small(&qr.ID)
		case "nextUri":
			return small(&qr.NextURI)
		case "error":
			return small(&qr.Error)
		case "stats":
			return small(&qr.Stats)
		case "data":
			if d.peek() == 'n' {
				_, err := d.skip()
				return err
			}
			return d.array(func() error {
				if qr.hasRow { // later rows: checked, not kept
					_, err := d.skip()
					return err
				}
				qr.hasRow = true
				return d.firstRow(qr)
			})
		}
		_, err := d.skip()
		return err
	})
	if err == nil && !d.atEnd() {
		err = d.errorf("data after the page")
	}
	return qr, err
}

// firstRow reads a row; a row of one string is the plan, any other row is
// kept as text in badRow.
func (d *planDecoder) firstRow(qr *queryResults) error {
	start := d.pos
	if d.peek() == '[' {
		d.pos++
		if d.peek() == '"' {
			plan, err := d.bytes()
			if err != nil {
				return err
			}
			if d.peek() == ']' {
				d.pos++
				qr.plan = plan
				return nil
			}
		}
	}
	d.pos = start
	raw, err := d.skip()
	qr.badRow = raw
	return err
}

// Explain runs the EXPLAIN for sql against server (the coordinator's base
// URL, e.g. http://trino:8080) as the caller described by h: every X-Trino-*
// header and Authorization are copied with all their values (h is only
// read); no user is invented. `EXECUTE name USING ...` works when h carries
// X-Trino-Prepared-Statement. Statements that are not Explainable fail with
// ErrNotExplainable without a request. When ctx ends, the EXPLAIN query is cancelled
// with a DELETE on its nextUri and ctx's error is returned. It is ExplainOn
// a Trino coordinator.
func (c *ExplainClient) Explain(ctx context.Context, server string, sql string, h http.Header) (*ExplainResult, error) {
	return c.ExplainOn(ctx, server, dialect.Trino, sql, h)
}

// ExplainOn is Explain on a coordinator of the given engine. h is the
// caller's session in the canonical form (X-Trino-* names, see package
// dialect): the headers callerhdr admits are renamed for the engine
// (dialect.For), so that a PrestoDB coordinator gets X-Presto-User, and
// those callerhdr keeps back (the transaction id, the spooling encoding)
// stay back under either name. Unknown is Trino.
func (c *ExplainClient) ExplainOn(ctx context.Context, server string, engine dialect.Engine, sql string, h http.Header) (*ExplainResult, error) {
	start := time.Now()
	if k := Classify(sql); !k.Explainable() {
		return nil, fmt.Errorf("%w: a %s statement", ErrNotExplainable, k)
	}
	hc := c.HTTP
	if hc == nil {
		hc = defaultExplainHTTP
	}
	maxPlan := c.MaxBytes
	if maxPlan <= 0 {
		maxPlan = DefaultMaxPlanBytes
	}
	maxBody := 2*maxPlan + 1<<20
	u, err := url.Parse(strings.TrimRight(server, "/") + "/v1/statement")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("estimator: EXPLAIN: bad server URL %q", server)
	}
	hdr := dialect.For(callerhdr.Copy(h, 3), engine)
	hdr.Set("Accept-Encoding", "gzip")
	hdr.Set("User-Agent", "prestroid-estimator")

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(ExplainSQL(sql)))
	if err != nil {
		return nil, fmt.Errorf("estimator: EXPLAIN: %w", err)
	}
	req.Header = hdr.Clone()
	req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	qr, err := c.do(hc, req, maxBody)
	if err != nil {
		return nil, err
	}
	res := &ExplainResult{QueryID: qr.ID}
	var plan []byte
	for {
		if qr.Error != nil {
			return nil, &TrinoError{QueryID: qr.ID, ErrorName: qr.Error.ErrorName, ErrorType: qr.Error.ErrorType,
				ErrorCode: qr.Error.ErrorCode, SQLState: qr.Error.SQLState, Message: qr.Error.Message}
		}
		if plan == nil && qr.hasRow {
			if qr.badRow != "" {
				c.cancel(hc, qr.NextURI, hdr)
				return nil, fmt.Errorf("%w: unexpected row %.100s", ErrNoPlan, qr.badRow)
			}
			if int64(len(qr.plan)) > maxPlan {
				c.cancel(hc, qr.NextURI, hdr)
				return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrPlanTooLarge, len(qr.plan), maxPlan)
			}
			plan = qr.plan
		}
		if qr.NextURI == "" {
			break
		}
		next := qr.NextURI
		if err := ctx.Err(); err != nil {
			c.cancel(hc, next, hdr)
			return nil, fmt.Errorf("estimator: EXPLAIN cancelled: %w", err)
		}
		qr, err = c.get(ctx, hc, next, hdr, maxBody)
		if err != nil {
			if ctx.Err() != nil {
				c.cancel(hc, next, hdr)
				return nil, fmt.Errorf("estimator: EXPLAIN cancelled: %w", ctx.Err())
			}
			return nil, err
		}
	}
	if plan == nil {
		return nil, ErrNoPlan
	}
	res.PlanJSON = plan
	res.ElapsedMillis = qr.Stats.ElapsedTimeMillis
	res.AnalysisMillis = qr.Stats.AnalysisTimeMillis
	res.PlanningMillis = qr.Stats.PlanningTimeMillis
	res.Wall = time.Since(start)
	return res, nil
}

// get polls nextUri, retrying 429/502/503/504 (GETs are idempotent: the same
// token returns the cached page) a few times.
func (c *ExplainClient) get(ctx context.Context, hc *http.Client, next string, hdr http.Header, maxBody int64) (*queryResults, error) {
	backoff := 50 * time.Millisecond
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, next, nil)
		if err != nil {
			return nil, fmt.Errorf("estimator: EXPLAIN: bad nextUri: %w", err)
		}
		req.Header = hdr.Clone()
		qr, err := c.do(hc, req, maxBody)
		var he *HTTPError
		if err != nil && errors.As(err, &he) && attempt < 5 &&
			(he.StatusCode == 429 || he.StatusCode == 502 || he.StatusCode == 503 || he.StatusCode == 504) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff *= 2
			continue
		}
		return qr, err
	}
}

func (c *ExplainClient) do(hc *http.Client, req *http.Request, maxBody int64) (*queryResults, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("estimator: EXPLAIN: %w", err)
	}
	defer resp.Body.Close()
	var body io.Reader = resp.Body
	if strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return nil, fmt.Errorf("estimator: EXPLAIN: gzip: %w", err)
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("estimator: EXPLAIN: reading response: %w", err)
	}
	if int64(len(b)) > maxBody {
		return nil, fmt.Errorf("%w: response over %d bytes", ErrPlanTooLarge, maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &HTTPError{StatusCode: resp.StatusCode, Body: string(bytes.TrimSpace(b[:min(len(b), 512)])), Header: resp.Header.Clone()}
	}
	qr, err := decodeQueryResults(b)
	if err != nil {
		return nil, fmt.Errorf("estimator: EXPLAIN: bad response: %v", err) // not ErrBadPlan: the page, not a plan
	}
	return qr, nil
}

// cancel sends DELETE on nextUri (with its own short deadline: the caller's
// context may already be done) and ignores the outcome.
func (c *ExplainClient) cancel(hc *http.Client, next string, hdr http.Header) {
	if next == "" {
		return
	}
	ctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	req, err := http.NewRequestWithContext(ctx, http.MethodDelete, next, nil)
	if err != nil {
		return
	}
	req.Header = hdr.Clone()
	if resp, err := hc.Do(req); err == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
	}
}
