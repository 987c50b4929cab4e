package featurize

import (
	"math"
	"sort"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// The text stage's input (docs/design.md §5.1, the cascade's microsecond stage): the
// statement's SQL text and its session, without a plan, as a hashed bag of
// tokens. The same code writes the training matrix and the serving vector.
//
// Tokens are internal/sqllex's Statement tokens: bare words lower-cased,
// quoted identifiers by their lower-cased value (so "tpch"."sf1" and
// tpch.sf1 are the same tokens), every string literal one token <str>,
// every number <num>, punctuation as itself; comments and white space are
// dropped. The features are the unigrams, the bigrams of consecutive tokens
// and the context tokens @catalog=…, @schema=… and @session:name=value,
// each hashed (FNV-1a) into one of Dim slots with a sign from the hash
// (signed feature hashing: collisions cancel on average instead of adding
// up), counted, sublinear (1 + ln count), and the vector scaled to unit
// L2 norm.

// DefaultTextDim is the hashed vector's size of `prestroid train --steps
// text`; a bundle's text section names the one its model was trained with.
const DefaultTextDim = 4096

// TextContext is what the statement runs against, besides its text.
type TextContext struct {
	Catalog, Schema string
	// Session holds the session properties sent with the statement.
	Session map[string]string
	// Tables are the statistics of the tables the statement names (one
	// per table, known or not; plan.Tables finds them), read by
	// EncodeTextStats only. Nil: no table named, or none looked up.
	Tables []TableStats
}

// TableStats are what the catalog says of a table's size (SHOW STATS:
// the row count and the sum of its columns' data sizes). Known is false
// when the catalog was not asked yet, refused, or has no row count.
type TableStats struct {
	Rows  float64 `json:"rows"`
	Bytes float64 `json:"bytes,omitempty"` // 0 when the connector gives no column sizes
	Known bool    `json:"known"`
}

const (
	fnvOffset = 2166136261
	fnvPrime  = 16777619
	// bigramMix combines two token hashes into the bigram's.
	bigramMix = 0x9e3779b1
)

func fnvLower(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		h ^= uint32(c)
		h *= fnvPrime
	}
	return h
}

// textTokenHash is the hash of one token, or false for trivia.
func textTokenHash(t sqllex.Token) (uint32, bool) {
	switch t.Kind {
	case sqllex.Space, sqllex.Comment, sqllex.EOF:
		return 0, false
	case sqllex.String:
		return fnvLower(fnvOffset, "<str>"), true
	case sqllex.Number:
		return fnvLower(fnvOffset, "<num>"), true
	case sqllex.Quoted:
		// The value, not the text: one doubled quote inside a quoted
		// identifier is rare enough that hashing Inner is as good.
		return fnvLower(fnvOffset, t.Inner()), true
	default:
		return fnvLower(fnvOffset, t.Text), true
	}
}

// finalize mixes the bits of an FNV hash (FNV's low bits are weak for a
// power-of-two modulus).
func finalize(h uint32) uint32 {
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// EncodeText writes the text features of sql in ctx into dst (its length is
// the dimension, a power of two or not) and returns dst. dst is overwritten
// in full. It allocates nothing but the sorted session keys.
func EncodeText(dst []float32, sql string, ctx TextContext) []float32 {
	clear(dst)
	if len(dst) == 0 {
		return dst
	}
	dim := uint32(len(dst))
	add := func(h uint32) {
		h = finalize(h)
		if h&1 == 0 {
			dst[(h>>1)%dim]++
		} else {
			dst[(h>>1)%dim]--
		}
	}
	var prev uint32
	havePrev := false
	sc := sqllex.NewScanner(sqllex.Statement, sql)
	for t := sc.Next(); t.Kind != sqllex.EOF; t = sc.Next() {
		h, ok := textTokenHash(t)
		if !ok {
			continue
		}
		add(h)
		if havePrev {
			add(prev*bigramMix ^ h)
		}
		prev, havePrev = h, true
	}
	if ctx.Catalog != "" {
		add(fnvLower(fnvLower(fnvOffset, "@catalog="), ctx.Catalog))
	}
	if ctx.Schema != "" {
		add(fnvLower(fnvLower(fnvOffset, "@schema="), ctx.Schema))
	}
	if len(ctx.Session) > 0 {
		keys := make([]string, 0, len(ctx.Session))
		for k := range ctx.Session {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			add(fnvLower(fnvLower(fnvLower(fnvLower(fnvOffset, "@session:"), k), "="), ctx.Session[k]))
		}
	}
	var norm float64
	for i, v := range dst {
		if v == 0 {
			continue
		}
		// Sublinear counts keep the sign of the (signed) sum.
		m := 1 + math.Log(math.Abs(float64(v)))
		if v < 0 {
			m = -m
		}
		dst[i] = float32(m)
		norm += m * m
	}
	if norm > 0 {
		inv := float32(1 / math.Sqrt(norm))
		for i := range dst {
			dst[i] *= inv
		}
	}
	return dst
}

// TextStatsDim is the number of table-statistics features EncodeTextStats
// appends to the hashed vector.
const TextStatsDim = 8

// EncodeTextStats is EncodeText's hashed vector in dst[:len(dst)-TextStatsDim]
// followed by TextStatsDim features of ctx.Tables (the v2 text encoding),
// each in about [0, 1]:
//
//	0  ln(1 + tables named) / 3
//	1  the share of them with known statistics (0 when none is named)
//	2  1 when some named table's statistics are unknown
//	3  the largest ln(1 + rows) / 20 of the known tables
//	4  the second largest ln(1 + rows) / 20 (a join of two large tables)
//	5  ln(1 + Σ rows) / 20
//	6  the largest ln(1 + bytes) / 25
//	7  ln(1 + Σ bytes) / 25
//
// so that a count over a 1.5M-row table and one over a 15k-row table are
// different inputs even when their text is the same. len(dst) must exceed
// TextStatsDim.
func EncodeTextStats(dst []float32, sql string, ctx TextContext) []float32 {
	n := len(dst) - TextStatsDim
	if n <= 0 {
		clear(dst)
		return dst
	}
	EncodeText(dst[:n], sql, ctx)
	f := TextStatsFeatures(ctx.Tables)
	copy(dst[n:], f[:])
	return dst
}

// TextStatsFeatures are the TextStatsDim features of EncodeTextStats.
func TextStatsFeatures(tables []TableStats) [TextStatsDim]float32 {
	var f [TextStatsDim]float32
	if len(tables) == 0 {
		return f
	}
	known := 0
	var max1, max2, sumRows, maxBytes, sumBytes float64
	for _, t := range tables {
		if !t.Known || !(t.Rows >= 0) {
			continue
		}
		known++
		lr := math.Log1p(t.Rows)
		switch {
		case lr > max1:
			max1, max2 = lr, max1
		case lr > max2:
			max2 = lr
		}
		sumRows += t.Rows
		if t.Bytes > 0 {
			maxBytes = math.Max(maxBytes, math.Log1p(t.Bytes))
			sumBytes += t.Bytes
		}
	}
	f[0] = float32(math.Log1p(float64(len(tables))) / 3)
	f[1] = float32(known) / float32(len(tables))
	if known < len(tables) {
		f[2] = 1
	}
	f[3], f[4], f[5] = float32(max1/20), float32(max2/20), float32(math.Log1p(sumRows)/20)
	f[6], f[7] = float32(maxBytes/25), float32(math.Log1p(sumBytes)/25)
	return f
}

// MaxLnRows is the largest ln(1 + rows) of the known tables (0 when none
// is known): what the text stage compares with the largest table its model
// was trained on.
func MaxLnRows(tables []TableStats) float64 {
	m := 0.0
	for _, t := range tables {
		if t.Known && t.Rows > 0 {
			m = math.Max(m, math.Log1p(t.Rows))
		}
	}
	return m
}
