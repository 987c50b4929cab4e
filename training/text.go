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
	counts, err := WriteTextMatrices(cfg.Workdir, qs, dim)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.log(), "text: %d hashed features; train %d, val %d, test %d queries\n",
		dim, counts["train"], counts["val"], counts["test"])
	args := []string{"-m", "trainer.text", "--workdir", cfg.Workdir, "--out", cfg.Out,
		"--seed", strconv.Itoa(cfg.Seed), "--threads", strconv.Itoa(cfg.Threads), "--dim", strconv.Itoa(dim),
		"--epochs", strconv.Itoa(cfg.Epochs), "--patience", strconv.Itoa(cfg.Patience)}
	if cfg.TextHidden > 0 {
		args = append(args, "--hidden", strconv.Itoa(cfg.TextHidden))
	}
	return cfg.runPython(args...)
}

// TextContext is the query's featurize.TextContext.
func (q *Query) TextContext() featurize.TextContext {
	return featurize.TextContext{Catalog: q.Catalog, Schema: q.Schema, Session: q.Session}
}

// WriteTextMatrices writes text_{split}.npz and text_{split}.keys.txt into
// dir for each split that has queries and returns the count per split.
func WriteTextMatrices(dir string, qs []*Query, dim int) (map[string]int, error) {
	bySplit := map[string][]*Query{}
	for _, q := range qs {
		bySplit[q.Split] = append(bySplit[q.Split], q)
	}
	counts := map[string]int{}
	for _, split := range []string{"train", "val", "test"} {
		part := bySplit[split]
		if len(part) == 0 {
			continue
		}
		x := make([]float32, len(part)*dim)
		y := make([]float32, len(part))
		for i, q := range part {
			featurize.EncodeText(x[i*dim:(i+1)*dim], q.SQL, q.TextContext())
			y[i] = float32(q.LnCPU)
		}
		err := writeFile(filepath.Join(dir, "text_"+split+".npz"), func(w io.Writer) error {
			z := npy.NewNPZWriter(w)
			if err := z.Add("x", []int{len(part), dim}, x); err != nil {
				return err
			}
			if err := z.Add("y", []int{len(part)}, y); err != nil {
				return err
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
		counts[split] = len(part)
	}
	return counts, nil
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
