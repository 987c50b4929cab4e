// Package history keeps what the proxy has observed of completed queries:
// recency-weighted statistics of the log of each target (CPU time, peak
// memory, elapsed time) per exact statement and per statement shape, and
// the residuals and calibrations the estimate cascade learns
// (estimator/cascade.go, docs/design.md §5.1). The store knows nothing of
// targets: the cascade keeps each target's statistic under its own key
// (the CPU time's under the key it always had), so entries written before
// targets beyond CPU read as they did.
//
// A Store maps a string key to Stats. Three implementations: Memory (one
// replica, lost on restart), Bolt (an embedded go.etcd.io/bbolt file that
// survives restarts) and Redis (shared by every replica configured with the
// same Redis and prefix; see Redis). All bound their size and evict the
// least recently updated entries.
package history

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"
)

// Store holds Stats by key. Implementations are safe for concurrent use.
type Store interface {
	// Get returns key's statistics; false when none are recorded.
	Get(key string) (Stats, bool)
	// Update applies each of ups (in order, atomically per key) and
	// stores the results; one call is one write (one transaction on disk).
	Update(ups ...Update) error
	// Len is the number of keys held.
	Len() int
	// Close flushes and releases the store.
	Close() error
}

// Update is one change to one key: Apply gets the current statistics (the
// zero Stats and false when absent) and returns the new ones. Apply must be
// a pure function of its arguments: a shared store (Redis) calls it again
// when another replica changed the key between its read and its write.
type Update struct {
	Key   string
	Apply func(s Stats, ok bool) Stats
}

// Stats is an exponentially weighted summary of observations y (and, for a
// regression, x): means, variances and covariance, with the weight of a new
// observation max(Alpha, 1/Count) so that the first observations form a
// plain mean and later ones forget old ones at rate Alpha.
type Stats struct {
	Count uint64  // observations folded in
	Mean  float64 // of y
	Var   float64 // of y
	MeanX float64 // of x (regressions only)
	VarX  float64
	Cov   float64 // of x and y
	// Last is when the last observation was folded in (eviction order).
	Last time.Time
}

// Spread is the standard deviation of y.
func (s Stats) Spread() float64 { return math.Sqrt(max(s.Var, 0)) }

// Add folds in y with recency weight alpha (0 < alpha ≤ 1).
func (s Stats) Add(y, alpha float64, at time.Time) Stats { return s.AddXY(0, y, alpha, at) }

// AddXY folds in the pair (x, y) with recency weight alpha.
func (s Stats) AddXY(x, y, alpha float64, at time.Time) Stats {
	s.Count++
	a := max(alpha, 1/float64(s.Count))
	dx, dy := x-s.MeanX, y-s.Mean
	s.MeanX += a * dx
	s.Mean += a * dy
	s.VarX = (1 - a) * (s.VarX + a*dx*dx)
	s.Var = (1 - a) * (s.Var + a*dy*dy)
	s.Cov = (1 - a) * (s.Cov + a*dx*dy)
	s.Last = at
	return s
}

// Line is the least-squares fit y ≈ Intercept + Slope·x of a regression's
// Stats, and the spread of its residuals. ok is false while x has not
// varied (fewer than two distinct x).
func (s Stats) Line() (intercept, slope, spread float64, ok bool) {
	if s.Count < 2 || s.VarX <= 1e-12 {
		return 0, 0, 0, false
	}
	slope = s.Cov / s.VarX
	intercept = s.Mean - slope*s.MeanX
	return intercept, slope, math.Sqrt(max(s.Var-slope*s.Cov, 0)), true
}

// statsSize is the length of the binary encoding.
const statsSize = 8 * 7

// MarshalBinary encodes s in 56 bytes (little-endian: count, the five
// moments, Last in Unix nanoseconds).
func (s Stats) MarshalBinary() ([]byte, error) {
	b := make([]byte, statsSize)
	binary.LittleEndian.PutUint64(b[0:], s.Count)
	for i, f := range []float64{s.Mean, s.Var, s.MeanX, s.VarX, s.Cov} {
		binary.LittleEndian.PutUint64(b[8+8*i:], math.Float64bits(f))
	}
	binary.LittleEndian.PutUint64(b[48:], uint64(s.Last.UnixNano()))
	return b, nil
}

// ErrCorrupt means a stored value does not decode.
var ErrCorrupt = errors.New("history: corrupt entry")

// UnmarshalBinary decodes MarshalBinary's encoding.
func (s *Stats) UnmarshalBinary(b []byte) error {
	if len(b) != statsSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorrupt, len(b), statsSize)
	}
	s.Count = binary.LittleEndian.Uint64(b[0:])
	for i, p := range []*float64{&s.Mean, &s.Var, &s.MeanX, &s.VarX, &s.Cov} {
		*p = math.Float64frombits(binary.LittleEndian.Uint64(b[8+8*i:]))
	}
	s.Last = time.Unix(0, int64(binary.LittleEndian.Uint64(b[48:])))
	return nil
}

// Multi is implemented by stores that read several keys in one call (Redis:
// one MGET, one round trip); GetMany uses it.
type Multi interface {
	// GetMany returns each key's statistics (ok[i] false when none are
	// recorded), as Get would.
	GetMany(keys ...string) (stats []Stats, ok []bool)
}

// GetMany reads keys from st: in one call when st implements Multi, else
// one Get each.
func GetMany(st Store, keys ...string) (stats []Stats, ok []bool) {
	if m, isMulti := st.(Multi); isMulti {
		return m.GetMany(keys...)
	}
	stats, ok = make([]Stats, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		stats[i], ok[i] = st.Get(k)
	}
	return stats, ok
}
