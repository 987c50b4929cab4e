//go:build ignore

// gen_inputs writes the Go half of the test bundle fixture (see gen.sh):
// vocabularies and random token vectors built from committed EXPLAIN plans,
// and the featurized golden inputs that gen_model.py runs through ONNX
// Runtime. Deterministic: the same plans give the same files.
//
//	go run ./estimator/testdata/bundle-fixture/gen_inputs.go OUTDIR WORKDIR
package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/plan"
)

const (
	n = 15
	k = 9
	c = 3
)

// dim is Pf: 16 for the committed fixture; FIXTURE_PF overrides it (a
// benchmark-sized bundle uses the paper's 100).
var dim = 16

// Plans the vocabularies are built from ("training"), and the golden cases:
// some of the training plans plus tiny-scale plans whose tables are not in
// the vocabulary (out-of-vocabulary tables and predicate tokens).
var (
	trainGlob = []string{"tpch-q*-sf1.json", "tpcds-q0*-sf1.json", "tpcds-q1*-sf1.json"}
	golden    = []string{"tpch-q03-sf1", "tpch-q05-sf1", "tpch-q20-sf1", "tpcds-q01-sf1", "tpcds-q14a-sf1", "tpcds-q18-sf1", "tpcds-q64-tiny", "tpch-q19-tiny"}
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: gen_inputs OUTDIR WORKDIR")
		os.Exit(2)
	}
	out, work := os.Args[1], os.Args[2]
	if v := os.Getenv("FIXTURE_PF"); v != "" {
		fmt.Sscan(v, &dim)
	}
	if err := run(out, work); err != nil {
		fmt.Fprintln(os.Stderr, "gen_inputs:", err)
		os.Exit(1)
	}
}

func otp(path string) (*featurize.OTPNode, error) {
	js, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	p, err := plan.Parse(js)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return featurize.BuildOTP(p)
}

func run(out, work string) error {
	explain := filepath.Join("estimator", "testdata", "explain")
	var trees []*featurize.OTPNode
	count := map[string]int{}
	for _, g := range trainGlob {
		files, _ := filepath.Glob(filepath.Join(explain, g))
		for _, f := range files {
			root, err := otp(f)
			if err != nil {
				return err
			}
			trees = append(trees, root)
			root.Walk(func(n *featurize.OTPNode) {
				if n.Kind == featurize.OTPPredicate && n.Pred != nil {
					for _, t := range n.Pred.Tokens() {
						count[t]++
					}
				}
			})
		}
	}
	ops, tables := featurize.BuildVocabs(trees)
	// Tokens seen at least twice get a vector (word2vec's min_count): the
	// rare ones exercise the fallback chain.
	var toks []string
	for t, cnt := range count {
		if cnt >= 2 {
			toks = append(toks, t)
		}
	}
	sort.Strings(toks)
	rng := rand.New(rand.NewPCG(1, 2))
	vecs := &featurize.MapVectors{Dim: dim, Tokens: map[string][]float32{}, Global: make([]float32, dim)}
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d\n", len(toks), dim)
	for _, t := range toks {
		v := make([]float32, dim)
		b.WriteString(t)
		for i := range v {
			v[i] = float32(rng.NormFloat64()) * 0.5
			// Round-trip through the text format's precision.
			fmt.Fprintf(&b, " %.6f", v[i])
			fmt.Sscanf(fmt.Sprintf("%.6f", v[i]), "%g", &v[i])
			vecs.Global[i] += v[i] / float32(len(toks))
		}
		b.WriteByte('\n')
		vecs.Tokens[t] = v
	}
	if err := os.WriteFile(filepath.Join(out, "tokens.vec"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	for i := range vecs.Global {
		fmt.Sscanf(fmt.Sprintf("%.6f", vecs.Global[i]), "%g", &vecs.Global[i])
	}
	for name, v := range map[string]any{
		filepath.Join(out, "ops.json"):     ops,
		filepath.Join(out, "tables.json"):  tables,
		filepath.Join(work, "global.json"): vecs.Global,
		filepath.Join(work, "names.json"):  golden,
	} {
		js, err := json.MarshalIndent(v, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(name, append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	enc := &featurize.Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: dim,
		Sampler: featurize.SamplerConfig{N: n, K: k, C: c}}
	var batch []*featurize.Features
	for _, g := range golden {
		js, err := os.ReadFile(filepath.Join(explain, g+".json"))
		if err != nil {
			return err
		}
		f, err := enc.Featurize(js)
		if err != nil {
			return fmt.Errorf("%s: %w", g, err)
		}
		batch = append(batch, f)
	}
	fh, err := os.Create(filepath.Join(work, "inputs.npz"))
	if err != nil {
		return err
	}
	if err := featurize.WriteNPZ(fh, batch, featurize.BatchMeta{N: n, K: k, C: c}, nil); err != nil {
		return err
	}
	return fh.Close()
}
