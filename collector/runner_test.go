package collector

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trinodb/trino-go-client/trino"
)

// A server that knows its version but answers no statement: every item is a
// client error, none is recorded (a later run retries them), and the run
// stops after maxClientErrors instead of racing through the whole plan.
func TestClientErrorsAreNotRecordedAndStopTheRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/info" {
			fmt.Fprint(w, `{"nodeVersion":{"version":"476"},"starting":false}`)
			return
		}
		http.Error(w, "no", http.StatusNotFound)
	}))
	defer srv.Close()
	conn, err := trino.NewConnector(&trino.Config{ServerURI: strings.Replace(srv.URL, "://", "://u@", 1)})
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	path := filepath.Join(t.TempDir(), "r.jsonl.gz")
	w, err := OpenWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var items []Item
	for i := 0; i < 3*maxClientErrors; i++ {
		items = append(items, Item{Key: fmt.Sprint("k", i), Catalog: "tpch", Schema: "tiny", SQL: "SELECT 1"})
	}
	r := &Runner{Server: srv.URL, DB: db, Writer: w, Timeout: 5 * time.Second}
	sum, err := r.Run(context.Background(), items)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("run ended with %v, want ErrUnavailable", err)
	}
	if n := sum.ByStatus[StatusClientError]; n < maxClientErrors || n >= len(items) {
		t.Fatalf("%d client errors, want the run to stop after %d", n, maxClientErrors)
	}
	if w.Len() != 0 {
		t.Fatalf("%d records written for client errors", w.Len())
	}
}
