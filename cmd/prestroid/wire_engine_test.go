package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/history"
	"github.com/prestroid/prestroid/internal/dialect"
	"github.com/prestroid/prestroid/proxy"
)

func TestEstimatorAdapterPassesTheEngine(t *testing.T) {
	for _, engine := range []dialect.Engine{dialect.Unknown, dialect.Trino, dialect.Presto} {
		t.Run("a query for "+engine.String()+" is explained in its dialect", func(t *testing.T) {
			var mu sync.Mutex
			var users []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				users = append(users, r.Header.Get(engine.Header("User")))
				mu.Unlock()
				http.Error(w, "no", http.StatusBadRequest) // the EXPLAIN fails: only its headers matter here
			}))
			defer srv.Close()
			svc := estimator.NewService(nil, estimator.ServiceOptions{Workers: 1, History: history.NewMemory(10)})
			defer svc.Close()
			h := http.Header{"X-Trino-User": {"alice"}} // canonical, as the proxy hands it on
			_, err := estimatorAdapter{svc: svc}.Estimate(context.Background(), proxy.Query{SQL: "SELECT 1 FROM t", Header: h, Server: srv.URL, Engine: engine})
			if err == nil {
				t.Fatal("want the EXPLAIN's error")
			}
			mu.Lock()
			defer mu.Unlock()
			if len(users) != 1 || users[0] != "alice" {
				t.Fatalf("%s seen by the coordinator: %q", engine.Header("User"), users)
			}
		})
	}
}
