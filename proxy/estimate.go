package proxy

import (
	"context"
	"net/http"
	"time"
)

// Estimator is what the proxy needs from a cost model: the predicted CPU
// time of one statement, planned as the calling user. The proxy declares it
// and never imports the estimator; cmd/prestroid wires an implementation.
type Estimator interface {
	Estimate(ctx context.Context, q Query) (Estimate, error)
}

// Query is one statement as the client sent it. Header is a copy the
// estimator may keep; it holds the caller's identity and session
// (X-Trino-* headers, Authorization), which the EXPLAIN must carry.
type Query struct {
	SQL string
	// Header is the caller's identity and session: the request's
	// X-Trino-* headers and Authorization as callerhdr.Forward admits them,
	// hop-by-hop headers dropped (callerHeaders in headers.go).
	Header http.Header
	// Server is the base URL of the cluster to plan on.
	Server string
}

// Estimate is a model's answer for one statement.
type Estimate struct {
	// Estimated is false when the statement is not one the model scores
	// (SET SESSION, SHOW, transactions, ...); Reason then says why.
	Estimated bool
	Reason    string
	// CPUSeconds is the predicted CPU time.
	CPUSeconds float64
	// Model identifies the model that made the prediction.
	Model string
	// Timings of the steps.
	Explain   time.Duration
	Featurize time.Duration
	Infer     time.Duration
	// Cached is true when the estimate came from the estimate cache.
	Cached bool
	// Tables is the number of tables the plan scans and UnknownTables how
	// many of them the model never saw in training (the drift signal).
	Tables, UnknownTables int
	// Plan is the EXPLAIN JSON the estimate was made from, for the
	// feedback log; nil when unknown (e.g. a cached estimate).
	Plan []byte
}
