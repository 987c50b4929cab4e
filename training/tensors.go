package training

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/prestroid/prestroid/estimator/featurize"
)

// Target is target.json: the normalization of ln(CPU seconds) into [0, 1].
type Target struct {
	Transform string  `json:"transform"`
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
}

// Normalize maps ln(CPU seconds) onto the model's target scale.
func (t Target) Normalize(lnCPU float64) float32 {
	return float32((lnCPU - t.Min) / (t.Max - t.Min))
}

// TrainTarget is the min-max normalization over the training split's
// queries (Max = Min + 1 when they all cost the same).
func TrainTarget(qs []*Query) Target {
	tgt := Target{Transform: "ln_cpu_seconds_minmax", Min: math.Inf(1), Max: math.Inf(-1)}
	for _, q := range qs {
		if q.Split == "train" {
			tgt.Min = math.Min(tgt.Min, q.LnCPU)
			tgt.Max = math.Max(tgt.Max, q.LnCPU)
		}
	}
	if tgt.Max <= tgt.Min {
		tgt.Max = tgt.Min + 1
	}
	return tgt
}

// tensorInfo is tensors.json: what the tensors step wrote.
type tensorInfo struct {
	N, K, C, Pf  int
	Global       []float32      `json:"global_pred_vector"`
	Counts       map[string]int `json:"counts"`
	FullChunks   map[string]int `json:"full_chunks,omitempty"`
	MaxFullNodes int            `json:"max_full_nodes,omitempty"`
}

// Tensors is the tensors step: it encodes exactly the queries of the
// featurize step's queries.jsonl with tokens.vec and the training split's
// vocabularies, and writes ops.json, tables.json, target.json,
// tensors.json (with the bundle's global PRED vector), {split}.npz with
// {split}.keys.txt, and with Full the full-tree chunks.
func Tensors(cfg *Config) error {
	// The trees the featurize step built: its tree features.
	var st LoadStats
	if err := readJSON(filepath.Join(cfg.Workdir, "meta.json"), &st); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s has no meta.json: run the featurize step first", cfg.Workdir)
	} else if err != nil {
		return err
	}
	tree, err := featurize.ParseTreeFeatures(st.TreeFeatures)
	if err != nil {
		return fmt.Errorf("meta.json: %w", err)
	}
	qs, _, err := LoadQueriesWith(cfg.Data, cfg.Split, tree)
	if err != nil {
		return err
	}
	// Exactly the queries the featurize step kept: a collector may have
	// appended records since.
	if qs, err = sameQueries(filepath.Join(cfg.Workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	vecs, err := readVectors(filepath.Join(cfg.Workdir, "tokens.vec"))
	if err != nil {
		return err
	}
	if vecs.Dim != cfg.Pf {
		return fmt.Errorf("tokens.vec has dimension %d, --pf is %d", vecs.Dim, cfg.Pf)
	}
	// Vocabularies and normalization from the training split only.
	var trainRoots []*featurize.OTPNode
	for _, q := range qs {
		if q.Split == "train" {
			trainRoots = append(trainRoots, q.root)
		}
	}
	if len(trainRoots) == 0 {
		return errors.New("no training queries")
	}
	tgt := TrainTarget(qs)
	ops, tables := featurize.BuildVocabs(trainRoots)
	enc := &featurize.Encoder{Ops: ops, Tables: tables, Vectors: vecs, Dim: vecs.Dim,
		Sampler: featurize.SamplerConfig{N: cfg.N, K: cfg.K, C: cfg.C}, Tree: tree}
	if err := enc.Sampler.Validate(); err != nil {
		return err
	}
	// The global mean PRED vector (docs/design.md §2.3's last fallback): the mean of
	// the training queries' PRED vectors, encoded over whole trees.
	vecs.Global = GlobalPredVector(enc, trainRoots)
	info := tensorInfo{N: cfg.N, K: cfg.K, C: cfg.C, Pf: vecs.Dim, Global: vecs.Global,
		Counts: map[string]int{}, FullChunks: map[string]int{}}
	for _, part := range []string{"train", "val", "test"} {
		var partQs []*Query
		for _, q := range qs {
			if q.Split == part {
				partQs = append(partQs, q)
			}
		}
		info.Counts[part] = len(partQs)
		if len(partQs) == 0 {
			fmt.Fprintf(cfg.log(), "tensors: no %s queries\n", part)
			continue
		}
		meta := featurize.BatchMeta{N: cfg.N, K: cfg.K, C: cfg.C}
		if err := writeSplitTensors(cfg.Workdir, part, enc, meta, partQs, tgt); err != nil {
			return err
		}
		if cfg.Full {
			n, maxNodes, err := writeFullChunks(cfg, enc, part, partQs, tgt)
			if err != nil {
				return err
			}
			info.FullChunks[part] = n
			info.MaxFullNodes = max(info.MaxFullNodes, maxNodes)
		}
	}
	for name, v := range map[string]any{"ops.json": ops, "tables.json": tables, "target.json": tgt, "tensors.json": info} {
		if err := writeJSON(filepath.Join(cfg.Workdir, name), v); err != nil {
			return err
		}
	}
	fmt.Fprintf(cfg.log(), "tensors: N=%d K=%d C=%d Pf=%d; %d operators, %d tables; train %d, val %d, test %d; ln CPU s in [%.3f, %.3f]\n",
		cfg.N, cfg.K, cfg.C, vecs.Dim, ops.Len(), tables.Len(), info.Counts["train"], info.Counts["val"], info.Counts["test"], tgt.Min, tgt.Max)
	return nil
}

// readVectors reads a Word2Vec text file (tokens.vec).
func readVectors(path string) (*featurize.MapVectors, error) {
	vf, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer vf.Close()
	return featurize.LoadWord2VecText(vf)
}

// writeSplitTensors encodes qs (one split, in order) and writes
// DIR/PART.npz with the normalized targets and DIR/PART.keys.txt.
func writeSplitTensors(dir, part string, enc *featurize.Encoder, meta featurize.BatchMeta, qs []*Query, tgt Target) error {
	batch := make([]*featurize.Features, 0, len(qs))
	targets := make([]float32, 0, len(qs))
	keys := make([]string, 0, len(qs))
	for _, q := range qs {
		f, err := enc.Encode(q.root)
		if err != nil {
			return fmt.Errorf("%s: %w", q.Key, err)
		}
		batch = append(batch, f)
		targets = append(targets, tgt.Normalize(q.LnCPU))
		keys = append(keys, q.Key)
	}
	if err := writeNPZFile(filepath.Join(dir, part+".npz"), batch, meta, targets); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, part+".keys.txt"), []byte(strings.Join(keys, "\n")+"\n"), 0o644)
}

// writeFullChunks writes the full-tree tensors of one split in files of at
// most FullChunk queries (each padded to its own longest tree: one file
// padded to the longest tree of the whole set would be huge). The trainer
// re-pads (padded model) or packs (packed model) per batch.
func writeFullChunks(cfg *Config, enc *featurize.Encoder, part string, qs []*Query, tgt Target) (int, int, error) {
	old, _ := filepath.Glob(filepath.Join(cfg.Workdir, "full_"+part+"_*.npz"))
	for _, p := range old {
		os.Remove(p)
	}
	chunks, maxNodes := 0, 0
	for lo := 0; lo < len(qs); lo += cfg.FullChunk {
		hi := min(lo+cfg.FullChunk, len(qs))
		var batch []*featurize.Features
		var targets []float32
		for _, q := range qs[lo:hi] {
			f, err := enc.EncodeFull(q.root, 0)
			if err != nil {
				return 0, 0, fmt.Errorf("%s: %w", q.Key, err)
			}
			maxNodes = max(maxNodes, f.Slots-1)
			batch = append(batch, f)
			targets = append(targets, tgt.Normalize(q.LnCPU))
		}
		path := filepath.Join(cfg.Workdir, fmt.Sprintf("full_%s_%03d.npz", part, chunks))
		if err := writeNPZFile(path, batch, featurize.BatchMeta{K: 1, C: cfg.C, Full: true}, targets); err != nil {
			return 0, 0, err
		}
		chunks++
	}
	return chunks, maxNodes, nil
}

// GlobalPredVector is the mean of the non-zero PRED vectors of the trees
// (the bundle's last-resort fallback vector, docs/design.md §2.3).
func GlobalPredVector(enc *featurize.Encoder, roots []*featurize.OTPNode) []float32 {
	sum := make([]float64, enc.Dim)
	n := 0
	for _, r := range roots {
		f, err := enc.EncodeFull(r, 0)
		if err != nil || f.Dim == 0 {
			continue
		}
		for s, kind := range f.Kind {
			if kind != featurize.SlotPRED {
				continue
			}
			v := f.Pred[s*f.Dim : (s+1)*f.Dim]
			nz := false
			for _, x := range v {
				if x != 0 {
					nz = true
					break
				}
			}
			if !nz {
				continue
			}
			for i, x := range v {
				sum[i] += float64(x)
			}
			n++
		}
	}
	out := make([]float32, enc.Dim)
	if n > 0 {
		for i := range out {
			out[i] = float32(sum[i] / float64(n))
		}
	}
	return out
}

func writeNPZFile(path string, batch []*featurize.Features, meta featurize.BatchMeta, targets []float32) error {
	return writeFile(path, func(w io.Writer) error { return featurize.WriteNPZ(w, batch, meta, targets) })
}
