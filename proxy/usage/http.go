package usage

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"
)

// The query parameters of GET /prestroid/api/usage:
//
//	by=user|group|source   the dimension (default user)
//	window=DURATION        the last DURATION, whole buckets, the current one included (default 1h; e.g. 5m, 1h, 24h)
//	from=RFC3339&to=RFC3339  a span instead of window (to defaults to now)
//	limit=N                at most N rows, the rest summed in "other" (default 100; 0: all)
const (
	defaultWindow = time.Hour
	defaultLimit  = 100
)

// ServeAPI answers GET /prestroid/api/usage with a Report as JSON, or
// 400 with {"error": ...} for a bad parameter and 503 when the store
// cannot be read. The caller has authorized the request.
func (r *Recorder) ServeAPI(ctx *fasthttp.RequestCtx) {
	q, err := r.parse(ctx.QueryArgs(), time.Now())
	if err != nil {
		apiError(ctx, fasthttp.StatusBadRequest, err.Error())
		return
	}
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rep, err := r.Report(c, q.by, q.from, q.to, q.limit)
	if err != nil {
		r.log.Warn("usage: reading the store failed", "error", err)
		apiError(ctx, fasthttp.StatusServiceUnavailable, "usage: the store cannot be read now")
		return
	}
	b, err := json.Marshal(rep)
	if err != nil {
		apiError(ctx, fasthttp.StatusInternalServerError, "usage: encoding failed")
		return
	}
	ctx.Response.Header.Set("Cache-Control", "no-store")
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}

type apiQuery struct {
	by       Dimension
	from, to time.Time
	limit    int
}

// parse reads the query parameters (see above) at now.
func (r *Recorder) parse(args *fasthttp.Args, now time.Time) (apiQuery, error) {
	q := apiQuery{by: ByUser, limit: defaultLimit}
	if v := args.Peek("by"); len(v) > 0 {
		d, err := ParseDimension(string(v))
		if err != nil {
			return q, err
		}
		q.by = d
	}
	if args.Has("limit") {
		n, err := args.GetUint("limit")
		if err != nil {
			return q, fmt.Errorf("usage: limit=%q: want a whole number (0: all rows)", args.Peek("limit"))
		}
		q.limit = n
	}
	from, to := args.Peek("from"), args.Peek("to")
	if len(from) == 0 && len(to) == 0 {
		w := defaultWindow
		if v := args.Peek("window"); len(v) > 0 {
			d, err := time.ParseDuration(string(v))
			if err != nil || d <= 0 {
				return q, fmt.Errorf("usage: window=%q: want a positive duration such as 5m, 1h, 24h", v)
			}
			if d > r.o.Retention {
				return q, fmt.Errorf("usage: window=%q: longer than the retention (usage.retention: %s)", v, r.o.Retention)
			}
			w = d
		}
		q.from, q.to = r.Window(now, w)
		return q, nil
	}
	if args.Has("window") {
		return q, fmt.Errorf("usage: give window or from/to, not both")
	}
	if len(from) == 0 {
		return q, fmt.Errorf("usage: to without from")
	}
	f, err := time.Parse(time.RFC3339, string(from))
	if err != nil {
		return q, fmt.Errorf("usage: from=%q: want RFC 3339 (2006-01-02T15:04:05Z)", from)
	}
	t := now
	if len(to) > 0 {
		if t, err = time.Parse(time.RFC3339, string(to)); err != nil {
			return q, fmt.Errorf("usage: to=%q: want RFC 3339 (2006-01-02T15:04:05Z)", to)
		}
	}
	if !f.Before(t) {
		return q, fmt.Errorf("usage: from must be before to")
	}
	q.from, q.to = r.Span(now, f, t)
	return q, nil
}

func apiError(ctx *fasthttp.RequestCtx, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": "prestroid: " + msg})
	ctx.Response.Header.Set("X-Content-Type-Options", "nosniff")
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
