package training

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prestroid/prestroid/estimator/featurize"
	"github.com/prestroid/prestroid/estimator/npy"
)

// Text is the text step: it encodes the SQL text and session of every
// query of the featurize step's queries.jsonl (featurize.EncodeText, the
// serving code) into text_{train,val,test}.npz — x float32 (n, dim), y
// float32 (n,) ln CPU seconds — with text_{split}.keys.txt, and runs
// python -m trainer.text, which trains the text stage's quantile model and
// adds text.onnx and the manifest's text section to the bundle in Out.
func Text(cfg *Config) error {
	if cfg.Out == "" {
		return errors.New("the text step needs --out (the bundle it adds the text model to)")
	}
	qs, err := readQueries(filepath.Join(cfg.Workdir, "queries.jsonl"))
	if err != nil {
		return err
	}
	dim := cfg.TextDim
	if dim == 0 {
		dim = featurize.DefaultTextDim
	}
	var stats *TableStatsFile
	if cfg.TableStats != "" {
		if stats, err = ReadTableStats(cfg.TableStats); err != nil {
			return err
		}
		dim += featurize.TextStatsDim
	}
	var weight func(*Query) float32
	if cfg.WarmLabels {
		weight = coldWeight(qs, cfg.ColdWeight)
	}
	tm, err := WriteTextMatrices(cfg.Workdir, qs, dim, stats, weight)
	if err != nil {
		return err
	}
	counts := tm.Counts
	fmt.Fprintf(cfg.log(), "text: %d features (%s); train %d, val %d, test %d queries\n",
		dim, tm.Featurizer, counts["train"], counts["val"], counts["test"])
	fmt.Fprintf(cfg.log(), "text: runs warm %d, cold %d (%d of them of a shape that also ran warm%s), unknown %d\n",
		tm.Warm, tm.Cold, tm.ColdOfWarm, weightNote(cfg), tm.UnknownWarmth)
	if stats != nil {
		fmt.Fprintf(cfg.log(), "text: %d of %d statements name tables of known size; in training %d with sizes withheld, %d without their session's schema; largest ln(1+rows) %.2f\n",
			tm.WithStats, tm.WithTables, tm.Withheld, tm.Blind, tm.MaxLnRows)
	}
	args := []string{"-m", "trainer.text", "--workdir", cfg.Workdir, "--out", cfg.Out,
		"--seed", strconv.Itoa(cfg.Seed), "--threads", strconv.Itoa(cfg.Threads), "--dim", strconv.Itoa(dim),
		"--epochs", strconv.Itoa(cfg.Epochs), "--patience", strconv.Itoa(cfg.Patience),
		"--featurizer", tm.Featurizer, "--max-ln-rows", strconv.FormatFloat(tm.MaxLnRows, 'f', 4, 64)}
	if cfg.TextHidden > 0 {
		args = append(args, "--hidden", strconv.Itoa(cfg.TextHidden))
	}
	return cfg.runPython(args...)
}

func weightNote(cfg *Config) string {
	if !cfg.WarmLabels {
		return ""
	}
	return fmt.Sprintf(": weight %g", cfg.ColdWeight)
}

// coldWeight is the --warm-labels weight of a query: w for a cold run of
// a shape with warm runs in qs, 1 for every other.
func coldWeight(qs []*Query, w float64) func(*Query) float32 {
	warm := WarmSiblings(qs)
	return func(q *Query) float32 {
		if q.Warmth == WarmthCold && warm[q.WarmShape] {
			return float32(w)
		}
		return 1
	}
}

// warmthCode is a query's warmth in text_{split}.npz's "warm": 1 warm, 0
// cold, -1 unknown.
func warmthCode(q *Query) float32 {
	switch q.Warmth {
	case WarmthWarm:
		return 1
	case WarmthCold:
		return 0
	}
	return -1
}

// TextContext is the query's featurize.TextContext.
func (q *Query) TextContext() featurize.TextContext {
	return featurize.TextContext{Catalog: q.Catalog, Schema: q.Schema, Session: q.Session}
}

// TextMatrices says what WriteTextMatrices wrote.
type TextMatrices struct {
	Counts     map[string]int // queries per split
	Featurizer string         // bundle.TextFeaturizer or TextStatsFeaturizer's name
	// With table statistics: statements naming a table, those whose
	// tables' sizes are all known, training statements shown with the
	// sizes withheld (unknownShare), and the largest ln(1 + rows) named.
	// Blind counts the training statements shown without their session's
	// catalog and schema names (blindShare).
	WithTables, WithStats, Withheld, Blind int
	MaxLnRows                              float64
	// Runs by warmth over every split: warm, cold (ColdOfWarm of them of
	// a shape that also ran warm) and unknown.
	Warm, Cold, ColdOfWarm, UnknownWarmth int
}

// The text encodings' names (bundle.TextFeaturizer, TextStatsFeaturizer;
// training does not import the serving bundle package).
const (
	textFeaturizerV1 = "hashed-tokens-v1"
	textFeaturizerV2 = "hashed-tokens-tablestats-v2"
)

// WriteTextMatrices writes text_{split}.npz (x, y, "warm": 1 warm, 0 cold,
// -1 unknown, and with weight "w", each query's weight in the loss),
// text_{split}.keys.txt and,
// with table statistics, text_{split}.tables.jsonl (each row's tables, for
// the golden cases) into dir for each split that has queries. Without
// stats the encoding is featurize.EncodeText (dim features); with them
// featurize.EncodeTextStats (dim includes featurize.TextStatsDim), each
// statement with the statistics of the tables it names, except a share of
// the training statements shown with every size unknown (dropStats).
func WriteTextMatrices(dir string, qs []*Query, dim int, stats *TableStatsFile, weight func(*Query) float32) (*TextMatrices, error) {
	bySplit := map[string][]*Query{}
	for _, q := range qs {
		bySplit[q.Split] = append(bySplit[q.Split], q)
	}
	tm := &TextMatrices{Counts: map[string]int{}, Featurizer: textFeaturizerV1}
	if stats != nil {
		tm.Featurizer = textFeaturizerV2
	}
	warmSiblings := WarmSiblings(qs)
	for _, q := range qs {
		switch q.Warmth {
		case WarmthWarm:
			tm.Warm++
		case WarmthCold:
			tm.Cold++
			if warmSiblings[q.WarmShape] {
				tm.ColdOfWarm++
			}
		default:
			tm.UnknownWarmth++
		}
	}
	for _, split := range []string{"train", "val", "test"} {
		part := bySplit[split]
		if len(part) == 0 {
			continue
		}
		x := make([]float32, len(part)*dim)
		y := make([]float32, len(part))
		warm := make([]float32, len(part))
		var weights []float32
		if weight != nil {
			weights = make([]float32, len(part))
		}
		var tables [][]featurize.TableStats
		for i, q := range part {
			warm[i] = warmthCode(q)
			if weights != nil {
				weights[i] = weight(q)
			}
			if stats == nil {
				featurize.EncodeText(x[i*dim:(i+1)*dim], q.SQL, q.TextContext())
				y[i] = float32(q.LnCPU)
				continue
			}
			tc := q.TextContext()
			tc.Tables = stats.tablesOf(q)
			if len(tc.Tables) > 0 {
				tm.WithTables++
				if allKnown(tc.Tables) {
					tm.WithStats++
				}
				if split == "train" {
					tm.MaxLnRows = max(tm.MaxLnRows, featurize.MaxLnRows(tc.Tables))
					if dropStats(q.Key) {
						tm.Withheld++
						tc.Tables = make([]featurize.TableStats, len(tc.Tables))
					} else if blindContext(q.Key) {
						tm.Blind++
						tc.Schema = ""
					}
				}
			}
			featurize.EncodeTextStats(x[i*dim:(i+1)*dim], q.SQL, tc)
			y[i] = float32(q.LnCPU)
			tables = append(tables, tc.Tables)
		}
		err := writeFile(filepath.Join(dir, "text_"+split+".npz"), func(w io.Writer) error {
			z := npy.NewNPZWriter(w)
			if err := z.Add("x", []int{len(part), dim}, x); err != nil {
				return err
			}
			if err := z.Add("y", []int{len(part)}, y); err != nil {
				return err
			}
			if err := z.Add("warm", []int{len(part)}, warm); err != nil {
				return err
			}
			if weights != nil {
				if err := z.Add("w", []int{len(part)}, weights); err != nil {
					return err
				}
			}
			return z.Close()
		})
		if err != nil {
			return nil, err
		}
		err = writeFile(filepath.Join(dir, "text_"+split+".keys.txt"), func(w io.Writer) error {
			for _, q := range part {
				if _, err := fmt.Fprintln(w, q.Key); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if stats != nil {
			err = writeFile(filepath.Join(dir, "text_"+split+".tables.jsonl"), func(w io.Writer) error {
				enc := json.NewEncoder(w)
				for _, t := range tables {
					if t == nil {
						t = []featurize.TableStats{}
					}
					if err := enc.Encode(t); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return nil, err
			}
		}
		tm.Counts[split] = len(part)
	}
	return tm, nil
}

// readQueries reads queries.jsonl whole (the text step needs only the SQL
// and its context, not the plans).
func readQueries(path string) ([]*Query, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w (run the featurize step first)", err)
	}
	defer f.Close()
	var out []*Query
	dec := json.NewDecoder(bufio.NewReader(f))
	for {
		q := new(Query)
		if err := dec.Decode(q); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, q)
	}
}
