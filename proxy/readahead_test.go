package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// tokenTrino is a stub coordinator that keeps Trino's rules for polls
// (io.trino.server.protocol.Query): token t+1 makes the next page and
// drops page t; a repeated poll of the last token gets the same page
// again; an older token is 410 Gone. The query has pages pages of rows
// (the last without nextUri).
type tokenTrino struct {
	*stubTrino
	pages int

	mu      sync.Mutex
	last    int            // last token served
	made    map[int]int    // token -> times a page was made (not repeated)
	polls   map[int]int    // token -> polls
	breakAt map[int]bool   // token -> the first answer breaks mid-page
	accept  map[int]string // token -> Accept-Encoding of its last poll
	deletes int
	polled  chan int // tokens as they are polled
}

const raQuery = "20260101_000000_00001_abcde"

func newTokenTrino(t *testing.T, pages int) *tokenTrino {
	tt := &tokenTrino{pages: pages, made: map[int]int{}, polls: map[int]int{}, breakAt: map[int]bool{},
		accept: map[int]string{}, polled: make(chan int, 1000)}
	tt.stubTrino = newStub(t, tt.serve)
	return tt
}

func (tt *tokenTrino) page(base string, token int) string {
	var b strings.Builder
	b.WriteString(`{"id":"` + raQuery + `","infoUri":"` + base + `/ui/query.html?` + raQuery + `",`)
	if token < tt.pages {
		fmt.Fprintf(&b, `"nextUri":"%s/v1/statement/executing/%s/yslug/%d",`, base, raQuery, token+1)
	}
	b.WriteString(`"columns":[{"name":"k","type":"bigint"},{"name":"v","type":"varchar"}],"data":[`)
	for i := 0; i < 500; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `[%d,"page %d row %d"]`, token*1000+i, token, i)
	}
	state := "RUNNING"
	if token == tt.pages {
		state = "FINISHED"
	}
	b.WriteString(`],"stats":{"state":"` + state + `"},"warnings":[]}`)
	return b.String()
}

func (tt *tokenTrino) serve(w http.ResponseWriter, r *http.Request, base string) {
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path == "/v1/statement" {
		io.WriteString(w, queuedPage(base))
		return
	}
	parts := strings.Split(r.URL.Path, "/")
	token, _ := strconv.Atoi(parts[len(parts)-1])
	if strings.Contains(r.URL.Path, "/queued/") {
		token = 0 // the queued poll: the first page of rows comes next
	}
	tt.mu.Lock()
	if r.Method == http.MethodDelete {
		tt.deletes++
		tt.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	tt.polls[token]++
	tt.accept[token] = r.Header.Get("Accept-Encoding")
	switch {
	case token == tt.last && token > 0:
	case token == tt.last+1 || token == 0:
		tt.last = token
		tt.made[token]++
	case token < tt.last:
		tt.mu.Unlock()
		w.WriteHeader(http.StatusGone)
		return
	default:
		tt.mu.Unlock()
		w.WriteHeader(http.StatusNotFound)
		return
	}
	brk := tt.breakAt[token]
	delete(tt.breakAt, token)
	tt.mu.Unlock()
	tt.polled <- token
	if token == 0 {
		token = 1 // the queued poll answers with the first page
		tt.mu.Lock()
		tt.last = 1
		tt.made[1]++
		tt.mu.Unlock()
	}
	page := tt.page(base, token)
	if brk {
		w.Header().Set("Content-Length", fmt.Sprint(len(page)))
		io.WriteString(w, page[:len(page)/2])
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection breaks mid-page
	}
	io.WriteString(w, page)
}

// raPage is one page as a client reads it.
type raPage struct {
	NextURI string
	Data    [][]any
	Stats   struct{ State string }
	Error   *struct{ ErrorName, Message string }

	encoding string // the response's Content-Encoding
}

func readPage(t *testing.T, uri, accept string) raPage {
	t.Helper()
	resp, body := get(t, uri, accept)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	p := raPage{encoding: resp.Header.Get("Content-Encoding")}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: HTTP %d %s", uri, resp.StatusCode, body)
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatalf("not JSON (%v): %.200s", err, body)
	}
	return p
}

// waitPolled waits until the stub was polled for token (read ahead).
func (tt *tokenTrino) waitPolled(t *testing.T, token int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case got := <-tt.polled:
			if got == token {
				return
			}
		case <-deadline:
			t.Fatalf("token %d never polled upstream", token)
		}
	}
}

// TestReadAheadServesEachPageOnce: a client draining a query gets every
// page, in order, each made once upstream; the next page is fetched
// while the client holds the current one; and the upstream is asked for
// identity encoding whatever the client accepts.
func TestReadAheadServesEachPageOnce(t *testing.T) {
	for _, accept := range []string{"", "gzip"} {
		t.Run("Accept-Encoding "+strconv.Quote(accept), func(t *testing.T) {
			tt := newTokenTrino(t, 6)
			p, s := pageProxy(t, tt.URL, Options{})
			next := nextURI(t, p)
			rows := 0
			for token := 1; next != ""; token++ {
				pg := readPage(t, next, accept)
				if pg.Error != nil {
					t.Fatalf("page %d failed: %s", token, pg.Error.Message)
				}
				if len(pg.Data) != 500 || pg.Data[0][1] != fmt.Sprintf("page %d row 0", token) {
					t.Fatalf("page %d: %d rows, first %v", token, len(pg.Data), pg.Data[0])
				}
				rows += len(pg.Data)
				if pg.encoding != accept {
					t.Errorf("page %d sent with Content-Encoding %q to a client accepting %q", token, pg.encoding, accept)
				}
				if pg.NextURI != "" && token > 1 {
					tt.waitPolled(t, token+1) // read ahead before the client asked
				}
				next = pg.NextURI
			}
			if rows != 6*500 {
				t.Errorf("%d rows, want %d", rows, 6*500)
			}
			tt.mu.Lock()
			defer tt.mu.Unlock()
			for token := 1; token <= 6; token++ {
				if tt.made[token] != 1 {
					t.Errorf("page %d made %d times upstream, want once", token, tt.made[token])
				}
				poll := token
				if token == 1 {
					poll = 0 // page 1 comes from the queued poll
				}
				if tt.accept[poll] != "identity" {
					t.Errorf("poll %d asked with Accept-Encoding %q, want identity", poll, tt.accept[poll])
				}
			}
			if n := testutil.ToFloat64(s.metrics.ReadAhead.WithLabelValues("served")); n < 4 {
				t.Errorf("%v pages served from read ahead, want at least 4", n)
			}
			waitHeld(t, s, 0)
		})
	}
}

// waitHeld waits until the read ahead holds want bytes.
func waitHeld(t *testing.T, s *Server, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.ahead.held.Load() != want {
		if time.Now().After(deadline) {
			t.Fatalf("read ahead holds %d bytes, want %d", s.ahead.held.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadAheadFailures: a page whose read ahead broke mid-page reaches
// the client whole (its poll goes to Trino, which serves it again); a
// cluster that died meanwhile gives the client a well-formed failed page,
// as a poll without reading ahead does.
func TestReadAheadFailures(t *testing.T) {
	t.Run("broken mid-page while read ahead: the client still gets it whole", func(t *testing.T) {
		tt := newTokenTrino(t, 4)
		tt.breakAt[3] = true
		p, s := pageProxy(t, tt.URL, Options{})
		next := nextURI(t, p)
		for token := 1; token <= 4; token++ {
			pg := readPage(t, next, "gzip")
			if pg.Error != nil || len(pg.Data) != 500 || pg.Data[0][1] != fmt.Sprintf("page %d row 0", token) {
				t.Fatalf("page %d: error %v, %d rows", token, pg.Error, len(pg.Data))
			}
			if token == 2 {
				tt.waitPolled(t, 3) // the broken read ahead
			}
			next = pg.NextURI
		}
		if next != "" {
			t.Fatalf("the last page has nextUri %s", next)
		}
		if n := testutil.ToFloat64(s.metrics.ReadAhead.WithLabelValues("failed")); n != 1 {
			t.Errorf("%v failed reads ahead counted, want 1", n)
		}
		waitHeld(t, s, 0)
	})
	t.Run("cluster gone after the read ahead failed: a Trino error page", func(t *testing.T) {
		tt := newTokenTrino(t, 4)
		tt.breakAt[3] = true
		p, _ := pageProxy(t, tt.URL, Options{})
		next := nextURI(t, p)
		next = readPage(t, next, "").NextURI // page 1
		pg := readPage(t, next, "")          // page 2; page 3 read ahead breaks
		tt.waitPolled(t, 3)
		tt.Close()
		got := readPage(t, pg.NextURI, "")
		if got.Error == nil || got.Error.ErrorName != "PRESTROID_UPSTREAM_ERROR" || got.Stats.State != "FAILED" || got.NextURI != "" {
			t.Fatalf("want a terminal failed page, got %+v", got)
		}
	})
}

// TestReadAheadCancelAndRetry: a client that cancels (DELETE nextUri)
// with a page read ahead frees it and the cancel reaches Trino; a client
// that polls the page it already had again (its connection broke) gets
// that page from the proxy, which Trino could no longer serve (410).
func TestReadAheadCancelAndRetry(t *testing.T) {
	t.Run("cancel", func(t *testing.T) {
		tt := newTokenTrino(t, 10)
		p, s := pageProxy(t, tt.URL, Options{})
		next := nextURI(t, p)
		pg := readPage(t, next, "")
		pg = readPage(t, pg.NextURI, "")
		tt.waitPolled(t, 3)
		if s.ahead.held.Load() == 0 {
			t.Fatal("nothing held read ahead")
		}
		req, _ := http.NewRequest("DELETE", pg.NextURI, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		tt.mu.Lock()
		deletes := tt.deletes
		tt.mu.Unlock()
		if deletes != 1 {
			t.Errorf("%d DELETEs reached Trino, want 1", deletes)
		}
		waitHeld(t, s, 0)
		if next, prev := s.ahead.take("default", "/v1/statement/executing/"+raQuery+"/yslug/3"); next != nil || prev != nil {
			t.Error("the cancelled query's pages are still held")
		}
	})
	t.Run("retry of the page before", func(t *testing.T) {
		tt := newTokenTrino(t, 10)
		p, s := pageProxy(t, tt.URL, Options{})
		pg := readPage(t, nextURI(t, p), "")
		page2 := pg.NextURI
		first := readPage(t, page2, "gzip")
		tt.waitPolled(t, 3)
		again := readPage(t, page2, "gzip")
		if again.NextURI != first.NextURI || len(again.Data) != 500 || again.Data[0][1] != "page 2 row 0" {
			t.Fatalf("the retried page differs: %d rows, nextUri %q vs %q", len(again.Data), again.NextURI, first.NextURI)
		}
		tt.mu.Lock()
		polls := tt.polls[2]
		tt.mu.Unlock()
		if polls != 1 {
			t.Errorf("page 2 polled %d times upstream, want once", polls)
		}
		if n := testutil.ToFloat64(s.metrics.ReadAhead.WithLabelValues("retry")); n != 1 {
			t.Errorf("%v retries counted, want 1", n)
		}
		third := readPage(t, first.NextURI, "")
		if len(third.Data) != 500 || third.Data[0][1] != "page 3 row 0" {
			t.Fatalf("page 3 after the retry: %d rows", len(third.Data))
		}
	})
	t.Run("off: nothing is read ahead", func(t *testing.T) {
		tt := newTokenTrino(t, 4)
		p, s := pageProxy(t, tt.URL, Options{PageReadAheadBytes: -1})
		pg := readPage(t, nextURI(t, p), "")
		readPage(t, pg.NextURI, "")
		time.Sleep(200 * time.Millisecond)
		tt.mu.Lock()
		polls := tt.polls[3]
		tt.mu.Unlock()
		if polls != 0 || s.ahead != nil {
			t.Errorf("page 3 polled %d times with read ahead off", polls)
		}
	})
}
