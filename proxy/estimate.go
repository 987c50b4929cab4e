package proxy

import (
	"context"
	"errors"
	"net/http"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Estimator is what the proxy needs from a cost model: the predicted CPU
// time of one statement, planned as the calling user. The proxy declares it
// and never imports the estimator; cmd/prestroid wires an implementation.
type Estimator interface {
	Estimate(ctx context.Context, q Query) (estimate.Estimate, error)
}

// Query is one statement as the client sent it. Header is a copy the
// estimator may keep; it holds the caller's identity and session
// (X-Trino-* headers, Authorization), which the EXPLAIN must carry.
type Query struct {
	SQL string
	// Header is the caller's identity and session: the request's
	// X-Trino-* headers and Authorization as callerhdr.Forward admits them,
	// hop-by-hop headers dropped (protocol.CallerHeaders). A PrestoDB
	// client's X-Presto-* headers are here under Trino's names (the
	// canonical form); dialect.For renames them for Engine.
	Header http.Header
	// Engine is the engine of Server and of every planner: the client's
	// dialect, or the default cluster's engine for a client that sent
	// neither dialect's headers. The EXPLAIN speaks its dialect, and its
	// estimates are learned apart. Unknown when that cluster's engine is
	// not known yet (treat it as Trino).
	Engine dialect.Engine
	// Server is the base URL of the default cluster of Engine.
	Server string
	// Planners are the base URLs of the healthy clusters of Engine an
	// EXPLAIN may run on (the estimator spreads them and bounds each), the
	// default first. Empty means Server alone.
	Planners []string
}

// ErrEstimatorBusy is what an Estimator returns (wrapped or not) when it
// could not estimate without waiting (every planner at its EXPLAIN bound):
// the query fails open at once, never queued behind EXPLAINs.
var ErrEstimatorBusy = errors.New("proxy: estimator busy")
