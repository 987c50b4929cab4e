package featurize

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// PredicateVectors supplies predicate token vectors (the Word2Vec model,
// docs/design.md §2.3). Vector returns the element-wise mean of the tokens' vectors
// and ok = true only when every token is known. Implementations must be safe
// for concurrent use and must not keep or modify tokens; the returned slice
// is only read.
type PredicateVectors interface {
	Vector(tokens []string) ([]float32, bool)
}

// GlobalMeaner is an optional capability of a PredicateVectors: the global
// mean PRED vector stored in the model bundle, the last fallback.
type GlobalMeaner interface {
	GlobalMean() []float32
}

// PredicateCache caches encoded predicate vectors by normalized predicate
// text (Pred.String()). It is best-effort (a Set may be dropped); values are
// never modified after Set. ristretto fits.
type PredicateCache interface {
	Get(key string) ([]float32, bool)
	Set(key string, v []float32)
}

// MapVectors is an in-memory PredicateVectors.
type MapVectors struct {
	Dim    int
	Tokens map[string][]float32
	Global []float32 // global mean PRED vector; nil = zeros
}

var (
	_ PredicateVectors = (*MapVectors)(nil)
	_ GlobalMeaner     = (*MapVectors)(nil)
)

// Vector implements PredicateVectors.
func (m *MapVectors) Vector(tokens []string) ([]float32, bool) {
	if len(tokens) == 0 {
		return nil, false
	}
	if len(tokens) == 1 {
		v, ok := m.Tokens[tokens[0]]
		return v, ok
	}
	out := make([]float32, m.Dim)
	for _, t := range tokens {
		v, ok := m.Tokens[t]
		if !ok {
			return nil, false
		}
		for i := range out {
			out[i] += v[i]
		}
	}
	inv := 1 / float32(len(tokens))
	for i := range out {
		out[i] *= inv
	}
	return out, true
}

// GlobalMean implements GlobalMeaner.
func (m *MapVectors) GlobalMean() []float32 { return m.Global }

// LoadWord2VecText reads vectors in the word2vec text format (gensim's
// KeyedVectors.save_word2vec_format(binary=False)): a "count dim" line, then
// "token v1 ... vdim" lines. Tokens contain no spaces (operators use "_").
func LoadWord2VecText(r io.Reader) (*MapVectors, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<16), 1<<24)
	if !sc.Scan() {
		return nil, fmt.Errorf("estimator: word2vec: empty input")
	}
	var count, dim int
	if _, err := fmt.Sscan(sc.Text(), &count, &dim); err != nil || dim <= 0 || count < 0 {
		return nil, fmt.Errorf("estimator: word2vec: bad header %q", sc.Text())
	}
	m := &MapVectors{Dim: dim, Tokens: make(map[string][]float32, count)}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != dim+1 {
			return nil, fmt.Errorf("estimator: word2vec: token %q has %d values, want %d", f[0], len(f)-1, dim)
		}
		v := make([]float32, dim)
		for i := range v {
			x, err := strconv.ParseFloat(f[i+1], 32)
			if err != nil {
				return nil, fmt.Errorf("estimator: word2vec: token %q: %w", f[0], err)
			}
			v[i] = float32(x)
		}
		m.Tokens[f[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("estimator: word2vec: %w", err)
	}
	return m, nil
}

// predEncoder encodes PRED nodes of one query with the fallback chain of
// docs/design.md §2.3.
type predEncoder struct {
	vecs  PredicateVectors
	cache PredicateCache
	dim   int
}

// encode returns the vector of p (AND = element-wise min, OR = max, NOT =
// its child, clause = mean of its tokens) and whether every token was known.
func (e *predEncoder) encode(p *Pred) ([]float32, bool) {
	if p == nil {
		return nil, false
	}
	switch p.Kind {
	case PredClause:
		toks := p.ClauseTokens()
		v, ok := e.vecs.Vector(toks)
		if !ok || len(v) != e.dim {
			return nil, false
		}
		return v, true
	case PredNot:
		if len(p.Children) != 1 {
			return nil, false
		}
		return e.encode(p.Children[0])
	}
	var out []float32
	for i, c := range p.Children {
		v, ok := e.encode(c)
		if !ok {
			return nil, false
		}
		if i == 0 {
			out = append(make([]float32, 0, e.dim), v...)
			continue
		}
		for j := range out {
			if p.Kind == PredAnd && v[j] < out[j] || p.Kind == PredOr && v[j] > out[j] {
				out[j] = v[j]
			}
		}
	}
	return out, out != nil
}

// direct encodes each PRED node directly (cache first) and counts the nodes
// it could not encode (nil in out).
func (e *predEncoder) direct(preds []*OTPNode) (out [][]float32, missing int) {
	out = make([][]float32, len(preds))
	if e.dim == 0 || e.vecs == nil {
		return out, 0
	}
	for i, n := range preds {
		key := ""
		if e.cache != nil && n.Pred != nil {
			key = n.Value
			if v, ok := e.cache.Get(key); ok && len(v) == e.dim {
				out[i] = v
				continue
			}
		}
		if n.PredErr == nil {
			if v, ok := e.encode(n.Pred); ok {
				out[i] = v
				if key != "" {
					e.cache.Set(key, v)
				}
				continue
			}
		}
		missing++
	}
	return out, missing
}

// vectors fills one vector per PRED node (same order as preds): the direct
// encoding when every token is known; otherwise, in order, the mean of the
// query's fully known PRED vectors, the mean of all known tokens of the
// query's predicates, the global mean PRED vector (zeros if none).
func (e *predEncoder) vectors(preds []*OTPNode) [][]float32 {
	out, missing := e.direct(preds)
	if missing == 0 {
		return out
	}
	fb := meanOf(out, e.dim)
	if fb == nil { // mean of all known tokens of the query
		sum, n := make([]float32, e.dim), 0
		var one [1]string
		for _, p := range preds {
			for _, t := range p.Pred.Tokens() {
				one[0] = t
				if v, ok := e.vecs.Vector(one[:]); ok && len(v) == e.dim {
					addTo(sum, v)
					n++
				}
			}
		}
		if n > 0 {
			scale(sum, 1/float32(n))
			fb = sum
		}
	}
	if fb == nil {
		if g, ok := e.vecs.(GlobalMeaner); ok && len(g.GlobalMean()) == e.dim {
			fb = g.GlobalMean()
		}
	}
	for i := range out {
		if out[i] == nil {
			out[i] = fb // nil → zeros
		}
	}
	return out
}

func meanOf(vs [][]float32, dim int) []float32 {
	var sum []float32
	n := 0
	for _, v := range vs {
		if v == nil {
			continue
		}
		if sum == nil {
			sum = make([]float32, dim)
		}
		addTo(sum, v)
		n++
	}
	if n > 0 {
		scale(sum, 1/float32(n))
	}
	return sum
}

func addTo(dst, v []float32) {
	for i := range dst {
		dst[i] += v[i]
	}
}

func scale(v []float32, f float32) {
	for i := range v {
		v[i] *= f
	}
}
