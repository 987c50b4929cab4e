package collector

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/trinodb/trino-go-client/trino"
)

// PlanFunc takes the EXPLAIN plan of an item, with the item's own session
// (Header, in the engine's dialect: X-Presto-* for PrestoDB). The command
// wires it to estimator.ExplainClient so that training plans come from the
// same code as serving; nil means no plans. A nil plan
// with a nil error runs the item without a plan. An error that is not the
// query's fault (network, HTTP 5xx) should wrap ErrUnavailable: the item is
// then left for a later run instead of being recorded as EXPLAIN_FAILED.
type PlanFunc func(ctx context.Context, server string, it *Item, h http.Header) (*Plan, error)

// ErrUnavailable marks failures of the server or the network rather than
// of a query. Such items are not recorded (a resumed run retries them), and
// a run stops after maxClientErrors of them in a row.
var ErrUnavailable = errors.New("collector: server unavailable")

// maxClientErrors is how many CLIENT_ERROR outcomes in a row stop a run.
const maxClientErrors = 10

// Header is the session of an item as request headers under Trino's names
// (the canonical form, see internal/dialect): user, catalog, schema and
// session properties.
func (it *Item) Header(user, source string) http.Header {
	h := http.Header{}
	h.Set("X-Trino-User", user)
	if source != "" {
		h.Set("X-Trino-Source", source)
	}
	if it.Catalog != "" {
		h.Set("X-Trino-Catalog", it.Catalog)
	}
	if it.Schema != "" {
		h.Set("X-Trino-Schema", it.Schema)
	}
	if s := it.sessionHeader(); s != "" {
		h.Set("X-Trino-Session", s)
	}
	return h
}

func (it *Item) sessionHeader() string {
	ks := make([]string, 0, len(it.Session))
	for k := range it.Session {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var parts []string
	for _, k := range ks {
		parts = append(parts, k+"="+url.QueryEscape(it.Session[k]))
	}
	return strings.Join(parts, ",")
}

// Runner executes items against one Trino or PrestoDB server and writes a
// record for each. The zero value is not usable: set Server, Writer and,
// for Trino, DB.
type Runner struct {
	Server string // base URL, e.g. http://127.0.0.1:8083
	// Engine is the server's engine. Unknown (the zero value) detects it
	// from /v1/info's version (dialect.FromVersion), and takes Trino when
	// the version says neither; a set engine that the version contradicts
	// fails the run. Every request of the run carries the engine's headers.
	Engine dialect.Engine
	// DB is the trino-go-client database for a Trino Server (no
	// catalog/schema/session in the DSN); unused for PrestoDB, whose
	// statements the runner sends itself (presto.go).
	DB     *sql.DB
	User   string // X-Trino-User (X-Presto-User); "prestroid-collect" if empty
	Source string // X-Trino-Source (X-Presto-Source); "prestroid-collect" if empty
	// Concurrency is the number of queries in flight (1 if < 1).
	Concurrency int
	// Timeout per query execution (EXPLAIN not included); 0 means none.
	// On expiry the query is cancelled on Trino (DELETE /v1/query/{id}) and
	// recorded with status TIMEOUT and the statistics so far.
	Timeout time.Duration
	Plan    PlanFunc
	Writer  *Writer
	// HTTP is used for /v1/info, /v1/status, /v1/query/{id}, cancels and
	// PrestoDB's statement requests (one request per result page, so a
	// client Timeout bounds a page, not a query); http.DefaultClient if nil.
	HTTP *http.Client
	// Progress receives a status line per finished query (nil: none).
	Progress io.Writer
	Info     RunInfo
	// OperatorStats fetches the query's full /v1/query/{id} (not pruned:
	// larger) for its operator summaries, recorded per operator type as
	// Stats.OperatorCPUMillis.
	OperatorStats bool

	version string
	engine  dialect.Engine // Engine, or the detected one
	shapes  *shapeTracker
}

// Summary counts a run's outcomes.
type Summary struct {
	Planned, Skipped, Done int
	ByStatus               map[string]int
	Elapsed                time.Duration
}

func (r *Runner) httpClient() *http.Client {
	if r.HTTP != nil {
		return r.HTTP
	}
	return http.DefaultClient
}

func (r *Runner) user() string {
	if r.User == "" {
		return "prestroid-collect"
	}
	return r.User
}

func (r *Runner) source() string {
	if r.Source == "" {
		return "prestroid-collect"
	}
	return r.Source
}

// ServerVersion asks the server for its version (GET /v1/info:
// nodeVersion.version, e.g. "476" or "0.296-8661b73"; dialect.FromVersion
// tells the engine from it).
func ServerVersion(ctx context.Context, c *http.Client, server string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(server, "/")+"/v1/info", nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", fmt.Errorf("collector: /v1/info: %w", err)
	}
	defer resp.Body.Close()
	var info struct {
		NodeVersion struct{ Version string } `json:"nodeVersion"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&info); err != nil {
		return "", fmt.Errorf("collector: /v1/info: %w", err)
	}
	return info.NodeVersion.Version, nil
}

// Run executes the items not yet in the writer's file, Concurrency at a
// time, until all are done or ctx ends. Failed queries are recorded and never
// stop the run; only a write error does.
func (r *Runner) Run(ctx context.Context, items []Item) (Summary, error) {
	start := time.Now()
	sum := Summary{Planned: len(items), ByStatus: map[string]int{}}
	v, err := ServerVersion(ctx, r.httpClient(), r.Server)
	if err != nil {
		return sum, err
	}
	if r.engine, err = ResolveEngine(r.Engine, v); err != nil {
		return sum, err
	}
	r.version = v
	if r.engine == dialect.Trino && r.DB == nil {
		return sum, errors.New("collector: a Trino server needs Runner.DB")
	}
	r.shapes = newShapeTracker(r.Writer.pastWarmth())
	var todo []*Item
	for i := range items {
		if r.Writer.Has(items[i].Key) {
			sum.Skipped++
			continue
		}
		todo = append(todo, &items[i])
	}
	n := max(r.Concurrency, 1)
	work := make(chan *Item)
	var (
		mu         sync.Mutex
		firstErr   error
		clientErrs int
		done       atomic.Int64
		wg         sync.WaitGroup
	)
	prog := newProgress(r.Progress, len(todo), sum.Skipped)
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				rec := r.runOne(ctx, it)
				if ctx.Err() != nil && rec.Status != StatusFinished {
					// Interrupted by the caller, not by the query: do not
					// record, so that a resumed run does it again.
					continue
				}
				if rec.Status == StatusClientError {
					// Not the query's fault: leave it for a later run, and
					// stop when the server looks gone.
					mu.Lock()
					sum.ByStatus[rec.Status]++
					clientErrs++
					if clientErrs >= maxClientErrors && firstErr == nil {
						firstErr = fmt.Errorf("%w: %d client errors in a row, last: %s", ErrUnavailable, clientErrs, rec.Error.Message)
					}
					mu.Unlock()
					prog.update(rec)
					continue
				}
				err := r.Writer.Write(rec)
				mu.Lock()
				clientErrs = 0
				if err != nil && firstErr == nil {
					firstErr = err
				}
				sum.ByStatus[rec.Status]++
				mu.Unlock()
				done.Add(1)
				prog.update(rec)
			}
		}()
	}
loop:
	for _, it := range todo {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		select {
		case work <- it:
		case <-ctx.Done():
			break loop
		}
	}
	close(work)
	wg.Wait()
	sum.Done = int(done.Load())
	sum.Elapsed = time.Since(start)
	if firstErr != nil {
		return sum, firstErr
	}
	return sum, ctx.Err()
}

// progressSink keeps the last statistics the driver reported.
type progressSink struct {
	mu   sync.Mutex
	info trino.QueryProgressInfo
	n    int
}

func (p *progressSink) Update(i trino.QueryProgressInfo) {
	p.mu.Lock()
	p.info = i
	p.n++
	p.mu.Unlock()
}

func (p *progressSink) last() (trino.QueryProgressInfo, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.info, p.n
}

// ResolveEngine is the engine of a server whose /v1/info says version,
// given the engine the caller expects (Unknown: whatever the version says,
// Trino when it says neither). A version of the other engine is an error.
func ResolveEngine(want dialect.Engine, version string) (dialect.Engine, error) {
	got := dialect.FromVersion(version)
	switch {
	case want == dialect.Unknown && got == dialect.Unknown:
		return dialect.Trino, nil
	case want == dialect.Unknown:
		return got, nil
	case got != dialect.Unknown && got != want:
		return want, fmt.Errorf("collector: engine %s expected, but the server's version %q is %s's", want, version, got)
	}
	return want, nil
}

// runOne explains and executes one item and returns its record.
func (r *Runner) runOne(ctx context.Context, it *Item) *Record {
	w := it.Workload
	rec := &Record{
		Version: RecordVersion, Source: SourceCollector, Key: it.Key,
		Server: r.Server, User: r.user(), ClientSource: r.source(),
		Catalog: it.Catalog, Schema: it.Schema, SessionProperties: it.Session, SQL: it.SQL,
		Workload: &w, Collector: &r.Info,
	}
	if r.engine == dialect.Presto {
		rec.Engine, rec.EngineVersion = string(r.engine), r.version
	} else {
		rec.TrinoVersion = r.version // Trino's records stay as they were
	}
	h := dialect.For(it.Header(r.user(), r.source()), r.engine)
	if r.Plan != nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		p, err := r.Plan(pctx, r.Server, it, h)
		cancel()
		if err != nil {
			rec.Status = StatusExplainFailed
			if errors.Is(err, ErrUnavailable) {
				rec.Status = StatusClientError
			}
			rec.Error = &Error{Name: "EXPLAIN", Message: err.Error()}
			rec.SubmittedAt = time.Now().UTC()
			rec.FinishedAt = rec.SubmittedAt
			return rec
		}
		rec.Plan = p
	}

	qctx := ctx
	var cancel context.CancelFunc = func() {}
	if r.Timeout > 0 {
		qctx, cancel = context.WithTimeout(ctx, r.Timeout)
	}
	defer cancel()
	rec.Warmth = r.warmth(ctx, it)
	before, okBefore := loadAvg()
	rec.SubmittedAt = time.Now().UTC()
	t0 := time.Now()
	var (
		st  *Stats
		err error
	)
	if r.engine == dialect.Presto {
		var res prestoResult
		res, err = r.execPresto(qctx, it, h)
		rec.ResultRows, rec.QueryID, st = res.rows, res.queryID, res.stats
		if st == nil {
			st = prestoStats{}.stats()
		}
	} else {
		rec.ResultRows, rec.QueryID, st, err = r.execTrino(qctx, it)
	}
	client := time.Since(t0)
	rec.FinishedAt = time.Now().UTC()
	if after, ok := loadAvg(); ok && okBefore {
		rec.Load = &Load{Before: before, After: after}
	}
	timedOut := err != nil && qctx.Err() != nil && ctx.Err() == nil
	if err != nil && rec.QueryID != "" && qctx.Err() != nil {
		// The driver cancels on rows.Close, but not when the deadline hits
		// before the first page: cancel here too (idempotent).
		r.cancel(rec.QueryID)
	}
	st.ClientMillis = client.Milliseconds()
	rec.Stats = st
	var qi *queryInfo
	if rec.QueryID != "" {
		qi = r.queryInfo(ctx, rec.QueryID, timedOut || err != nil)
	}
	if qi != nil {
		if !r.OperatorStats {
			// PrestoDB sends the operator summaries even when asked for
			// the pruned form; record them only when asked, as for Trino.
			qi.QueryStats.OperatorSummaries = nil
		}
		qi.fill(st)
	}
	switch {
	case err == nil:
		rec.Status = StatusFinished
	case timedOut:
		rec.Status = StatusTimeout
		rec.Error = &Error{Name: "TIMEOUT", Message: fmt.Sprintf("collector timeout %s: %v", r.Timeout, err)}
	default:
		rec.Status = StatusFailed
		rec.Error = &Error{Name: "CLIENT", Message: err.Error()}
		if qi != nil && qi.ErrorCode != nil {
			rec.Error.Name, rec.Error.Type, rec.Error.Code = qi.ErrorCode.Name, qi.ErrorCode.Type, qi.ErrorCode.Code
			if qi.FailureInfo != nil && qi.FailureInfo.Message != "" {
				rec.Error.Message = qi.FailureInfo.Message
			}
		} else if pe := (*prestoError)(nil); errors.As(err, &pe) {
			rec.Error.Name, rec.Error.Type, rec.Error.Code, rec.Error.Message = pe.ErrorName, pe.ErrorType, pe.ErrorCode, pe.Message
		} else if rec.QueryID == "" {
			rec.Status = StatusClientError
			rec.Error.Name = "CLIENT"
		}
	}
	return rec
}

// execTrino runs the item through trino-go-client and drains it: rows,
// query id, the last progress callback's statistics.
func (r *Runner) execTrino(ctx context.Context, it *Item) (int64, string, *Stats, error) {
	sink := &progressSink{}
	args := []any{
		sql.Named("X-Trino-User", r.user()),
		sql.Named("X-Trino-Source", r.source()),
		sql.Named("X-Trino-Catalog", it.Catalog),
		sql.Named("X-Trino-Schema", it.Schema),
		sql.Named("X-Trino-Progress-Callback", sink),
		sql.Named("X-Trino-Progress-Callback-Period", time.Second),
	}
	if s := it.sessionHeader(); s != "" {
		args = append(args, sql.Named("X-Trino-Session", s))
	}
	nrows, err := drain(ctx, r.DB, it.SQL, args)
	info, _ := sink.last()
	return nrows, info.QueryId, statsFrom(info), err
}

// warmth marks the item's shape as run on the server's current JVM and
// says whether it had run there before; nil when the server does not say
// which JVM it is (the flag would be a guess).
func (r *Runner) warmth(ctx context.Context, it *Item) *Warmth {
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	j, err := ServerJVM(sctx, r.httpClient(), r.Server)
	if err != nil {
		return nil
	}
	shape := Shape(it.Catalog, it.Schema, it.Session, it.SQL)
	warm, j := r.shapes.mark(j, shape)
	return &Warmth{Shape: shape, Warm: warm, Node: j.Node, StartedAt: j.StartedAt}
}

// drain runs the query and reads every row.
func drain(ctx context.Context, db *sql.DB, query string, args []any) (int64, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return 0, err
	}
	vals := make([]any, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	var n int64
	for rows.Next() {
		if err := rows.Scan(ptrs...); err != nil {
			return n, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return n, err
	}
	return n, rows.Close()
}

func statsFrom(i trino.QueryProgressInfo) *Stats {
	s := i.QueryStats
	return &Stats{
		State: s.State, CPUMillis: s.CPUTimeMillis, WallMillis: s.WallTimeMillis,
		ElapsedMillis: s.ElapsedTimeMillis, QueuedMillis: s.QueuedTimeMillis,
		AnalysisMillis: -1, PlanningMillis: -1, PlanningCPUMillis: -1,
		PeakMemoryBytes: s.PeakMemoryBytes, ProcessedRows: s.ProcessedRows, ProcessedBytes: s.ProcessedBytes,
		PhysicalInputBytes: s.PhysicalInputBytes, SpilledBytes: s.SpilledBytes,
		Splits: s.TotalSplits, Nodes: s.Nodes,
	}
}

// cancel deletes a query on the server.
func (r *Runner) cancel(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "DELETE", strings.TrimRight(r.Server, "/")+"/v1/query/"+url.PathEscape(id), nil)
	if err != nil {
		return
	}
	req.Header.Set(r.engine.Header("User"), r.user())
	if resp, err := r.httpClient().Do(req); err == nil {
		resp.Body.Close()
	}
}

// queryInfo is the part of GET /v1/query/{id} the collector reads: the
// statistics the client protocol's final page lacks (analysis and planning
// time; PrestoDB's physical input) and, for failed queries, the error.
// PrestoDB names the planning time totalPlanningTime, has no planning CPU
// time, and calls the connectors' input rawInputDataSize.
type queryInfo struct {
	State      string `json:"state"`
	QueryStats struct {
		AnalysisTime              string `json:"analysisTime"`
		PlanningTime              string `json:"planningTime"`
		TotalPlanningTime         string `json:"totalPlanningTime"` // PrestoDB's planningTime
		PlanningCPUTime           string `json:"planningCpuTime"`
		QueuedTime                string `json:"queuedTime"`
		ElapsedTime               string `json:"elapsedTime"`
		TotalCPUTime              string `json:"totalCpuTime"`
		TotalScheduledTime        string `json:"totalScheduledTime"`
		PeakUserMemoryReservation string `json:"peakUserMemoryReservation"`
		ProcessedInputPositions   int64  `json:"processedInputPositions"`
		RawInputDataSize          string `json:"rawInputDataSize"`
		TotalDrivers              int    `json:"totalDrivers"`
		OperatorSummaries         []struct {
			OperatorType string `json:"operatorType"`
			AddInputCPU  string `json:"addInputCpu"`
			GetOutputCPU string `json:"getOutputCpu"`
			FinishCPU    string `json:"finishCpu"`
		} `json:"operatorSummaries"` // empty unless fetched unpruned
	} `json:"queryStats"`
	ErrorCode *struct {
		Code int    `json:"code"`
		Name string `json:"name"`
		Type string `json:"type"`
	} `json:"errorCode"`
	FailureInfo *struct {
		Message string `json:"message"`
	} `json:"failureInfo"`
}

// queryInfo fetches /v1/query/{id}?pruned=true, waiting (up to a few
// seconds) for a final state when wait is set; nil on any error.
func (r *Runner) queryInfo(ctx context.Context, id string, wait bool) *queryInfo {
	u := strings.TrimRight(r.Server, "/") + "/v1/query/" + url.PathEscape(id)
	if !r.OperatorStats {
		u += "?pruned=true"
	}
	for attempt := 0; attempt < 20; attempt++ {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		req, err := http.NewRequestWithContext(qctx, "GET", u, nil)
		if err != nil {
			cancel()
			return nil
		}
		req.Header.Set(r.engine.Header("User"), r.user())
		resp, err := r.httpClient().Do(req)
		if err != nil {
			cancel()
			return nil
		}
		var qi queryInfo
		err = json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&qi)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil
		}
		if !wait || qi.State == "FINISHED" || qi.State == "FAILED" {
			return &qi
		}
		time.Sleep(250 * time.Millisecond)
	}
	return nil
}

// fill completes st with the fields the progress callback lacks, and takes
// over the CPU time when the callback never saw a final page (cancelled or
// failed queries).
func (qi *queryInfo) fill(st *Stats) {
	q := qi.QueryStats
	st.AnalysisMillis = parseDurationMillis(q.AnalysisTime)
	st.PlanningMillis = parseDurationMillis(q.PlanningTime)
	if q.PlanningTime == "" && q.TotalPlanningTime != "" {
		st.PlanningMillis = parseDurationMillis(q.TotalPlanningTime)
	}
	if st.PhysicalInputBytes < 0 {
		// Only PrestoDB's protocol lacks it (prestoStats.stats).
		st.PhysicalInputBytes = parseDataSizeBytes(q.RawInputDataSize)
	}
	st.PlanningCPUMillis = parseDurationMillis(q.PlanningCPUTime)
	if st.State != "FINISHED" || st.CPUMillis == 0 {
		// The callback's last page was not the final one, or it was but
		// its statistics were not rolled up from the tasks yet (seen on a
		// loaded Trino: FINISHED with 0 ms of CPU, 0 ms of wall time and
		// 0 rows processed after 7 splits). /v1/query's durations are
		// rounded to 3 digits, so use them only then.
		if cpu := parseDurationMillis(q.TotalCPUTime); cpu > st.CPUMillis {
			st.CPUMillis = cpu
		}
		if el := parseDurationMillis(q.ElapsedTime); el > st.ElapsedMillis {
			st.ElapsedMillis = el
		}
	}
	if qi.State != "" {
		st.State = qi.State
	}
	for _, o := range q.OperatorSummaries {
		ms := 0.0
		for _, d := range []string{o.AddInputCPU, o.GetOutputCPU, o.FinishCPU} {
			v, _ := parseDuration(d) // 0 when unreadable
			ms += v
		}
		if st.OperatorCPUMillis == nil {
			st.OperatorCPUMillis = map[string]float64{}
		}
		st.OperatorCPUMillis[o.OperatorType] = math.Round((st.OperatorCPUMillis[o.OperatorType]+ms)*100) / 100
	}
}

// durationUnits are airlift's Duration units in milliseconds.
var durationUnits = map[string]float64{"ns": 1e-6, "us": 1e-3, "ms": 1, "s": 1e3, "m": 60e3, "h": 3600e3, "d": 86400e3}

// parseDuration parses an airlift Duration ("1.23s", "15.00ms", "2.50m")
// into milliseconds; ok is false if it cannot.
func parseDuration(s string) (ms float64, ok bool) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	unit := durationUnits[s[i:]]
	if err != nil || unit == 0 {
		return 0, false
	}
	return v * unit, true
}

// parseDurationMillis is parseDuration rounded to whole milliseconds; -1
// if it cannot parse s.
func parseDurationMillis(s string) int64 {
	ms, ok := parseDuration(s)
	if !ok {
		return -1
	}
	return int64(ms + 0.5)
}

// dataSizeUnits are airlift's DataSize units in bytes (powers of 1024).
var dataSizeUnits = map[string]float64{"B": 1, "kB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40, "PB": 1 << 50}

// parseDataSizeBytes parses an airlift DataSize ("726B", "1.43kB",
// "2.50GB") into bytes; -1 if it cannot.
func parseDataSizeBytes(s string) int64 {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if i <= 0 {
		return -1
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	unit := dataSizeUnits[s[i:]]
	if err != nil || unit == 0 {
		return -1
	}
	return int64(v*unit + 0.5)
}

// progress prints one line per finished query: count, rate, ETA, outcome.
type progress struct {
	w       io.Writer
	total   int
	skipped int
	start   time.Time
	mu      sync.Mutex
	n       int
	failed  int
}

func newProgress(w io.Writer, total, skipped int) *progress {
	return &progress{w: w, total: total, skipped: skipped, start: time.Now()}
}

func (p *progress) update(rec *Record) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n++
	if rec.Status != StatusFinished {
		p.failed++
	}
	el := time.Since(p.start)
	rate := float64(p.n) / el.Seconds()
	eta := time.Duration(float64(p.total-p.n)/max(rate, 1e-9)) * time.Second
	cpu := int64(-1)
	if rec.Stats != nil {
		cpu = rec.Stats.CPUMillis
	}
	tmpl := ""
	if rec.Workload != nil {
		tmpl = rec.Workload.Template + "@" + rec.Workload.Scale
	}
	fmt.Fprintf(p.w, "[%d/%d +%d done before] %.2f q/s, %.0f q/h, ETA %s | %s %s cpu=%dms | not finished: %d\n",
		p.n, p.total, p.skipped, rate, rate*3600, eta.Truncate(time.Second), tmpl, rec.Status, cpu, p.failed)
	if f, ok := p.w.(*os.File); ok {
		f.Sync()
	}
}
