// Package tablestats gives the estimate cascade's cheap stages what the
// catalog says of a table's size — its row count and data size from
// `SHOW STATS FOR` — so that a statement's text stage can tell a count over
// a 1.5M-row table from one over a 15k-row table.
//
// The statistics are asked of the coordinator, Trino or PrestoDB (whose
// SHOW STATS has the same columns), as the caller (every X-Trino-* header
// and Authorization travel, renamed X-Presto-* for PrestoDB, as for the
// EXPLAIN: internal/callerhdr, internal/dialect) and
// cached per table and caller: a caller is served only statistics its own
// credentials could read, so an estimate never tells a user the size of a
// table the cluster would not show them. Nothing is fetched on the hot
// path: Lookup answers from the cache at once (unknown on a miss) and
// queues a fetch that one background worker runs; an entry older than
// Options.Refresh is served while it is fetched again.
package tablestats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
	"github.com/prestroid/prestroid/internal/callerhdr"
	"github.com/prestroid/prestroid/internal/dialect"
)

// maxBody bounds one page of SHOW STATS' answer (one row per column).
const maxBody = 4 << 20

// Client runs SHOW STATS over the Trino client protocol. The zero value
// is ready to use.
type Client struct {
	// HTTP sends the requests. Nil means plan.NewHTTPClient(nil).
	HTTP *http.Client
}

var defaultHTTP = plan.NewHTTPClient(nil)

// QuoteName is t as a quoted SQL name: "catalog"."schema"."table".
func QuoteName(t plan.TableName) string {
	q := func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
	return q(t.Catalog) + "." + q(t.Schema) + "." + q(t.Table)
}

// Fetch runs `SHOW STATS FOR t` on server (a coordinator's base URL) as
// the caller described by h, in h's dialect (dialect.Of: X-Presto-*
// headers for a PrestoDB coordinator); only the headers callerhdr.Forward
// admits, by their canonical names, are sent
// and reads the row count (the summary row's row_count) and the data size
// (the sum of the columns' data_size). Known is false when the catalog
// has no row count. A failure (no such table, access denied, HTTP) is an
// error.
func (c *Client) Fetch(ctx context.Context, server string, t plan.TableName, h http.Header) (featurize.TableStats, error) {
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	u, err := url.Parse(strings.TrimRight(server, "/") + "/v1/statement")
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return featurize.TableStats{}, fmt.Errorf("tablestats: bad server URL %q", server)
	}
	hdr := dialect.For(callerhdr.Copy(dialect.Canonical(h), 1), dialect.Of(h))
	hdr.Set("User-Agent", "prestroid-estimator")
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader("SHOW STATS FOR "+QuoteName(t)))
	if err != nil {
		return featurize.TableStats{}, fmt.Errorf("tablestats: %w", err)
	}
	req.Header = hdr.Clone()
	var st featurize.TableStats
	var cols []string
	for {
		p, err := page(hc, req)
		if err != nil {
			return featurize.TableStats{}, err
		}
		if p.Error != nil {
			return featurize.TableStats{}, fmt.Errorf("tablestats: SHOW STATS FOR %s: %s: %s", t, p.Error.ErrorName, p.Error.Message)
		}
		if cols == nil && len(p.Columns) > 0 {
			for _, c := range p.Columns {
				cols = append(cols, c.Name)
			}
		}
		for _, row := range p.Data {
			readRow(cols, row, &st)
		}
		if p.NextURI == "" {
			return st, nil
		}
		if req, err = http.NewRequestWithContext(ctx, http.MethodGet, p.NextURI, nil); err != nil {
			return featurize.TableStats{}, fmt.Errorf("tablestats: bad nextUri: %w", err)
		}
		req.Header = hdr.Clone()
	}
}

type statsPage struct {
	NextURI string `json:"nextUri"`
	Columns []struct {
		Name string `json:"name"`
	} `json:"columns"`
	Data  [][]any `json:"data"`
	Error *struct {
		ErrorName string `json:"errorName"`
		Message   string `json:"message"`
	} `json:"error"`
}

func page(hc *http.Client, req *http.Request) (*statsPage, error) {
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("tablestats: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("tablestats: reading response: %w", err)
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("tablestats: response over %d bytes", maxBody)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tablestats: HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b[:min(len(b), 256)]))
	}
	p := &statsPage{}
	if err := json.Unmarshal(b, p); err != nil {
		return nil, fmt.Errorf("tablestats: bad response: %w", err)
	}
	return p, nil
}

// readRow folds one SHOW STATS row into st: the summary row (no
// column_name) carries the row count, every column row its data size.
func readRow(cols []string, row []any, st *featurize.TableStats) {
	var name any = "?"
	var size, rows float64
	var hasRows bool
	for i, v := range row {
		if i >= len(cols) {
			break
		}
		switch cols[i] {
		case "column_name":
			name = v
		case "data_size":
			size, _ = v.(float64)
		case "row_count":
			rows, hasRows = v.(float64)
		}
	}
	if name == nil {
		if hasRows && rows >= 0 {
			st.Rows, st.Known = rows, true
		}
		return
	}
	if size > 0 {
		st.Bytes += size
	}
}

// ReaderKey is the cache's name for a caller: who it says it is and the
// credentials it shows (hashed: a cache key never holds a secret), so
// that statistics fetched with one caller's credentials serve only the
// same caller.
func ReaderKey(h http.Header) string {
	sum := sha256.New()
	for _, k := range []string{"X-Trino-User", "X-Trino-Original-User", "Authorization", "X-Trino-Role"} {
		for _, v := range h.Values(k) {
			sum.Write([]byte(k))
			sum.Write([]byte{0})
			sum.Write([]byte(v))
			sum.Write([]byte{0})
		}
	}
	return hex.EncodeToString(sum.Sum(nil)[:12])
}

// now is the clock (tests move it).
var now = time.Now
