package training

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/prestroid/prestroid/estimator"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Novelty is the novelty step: the families of the workdir's training
// statements (estimator.FamilyID) into OUT/families.txt, then python -m
// trainer.novelty fits how much wider the bundle's errors are on the
// validation templates than on the training statements and writes the
// manifest's novelty section (BUNDLE.md, "Novelty"). It runs on a
// finished bundle (after train, ensemble or targets: the model.onnx it
// scores is the one served) in place.
func Novelty(cfg *Config) error {
	if cfg.Out == "" {
		return errors.New("the novelty step needs --out (the bundle it adds the families to)")
	}
	qs, err := readQueries(filepath.Join(cfg.Workdir, "queries.jsonl"))
	if err != nil {
		return err
	}
	ids, err := TrainFamilies(qs)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return errors.New("novelty: the workdir has no training statements")
	}
	if err := writeFile(filepath.Join(cfg.Out, bundle.NoveltyFile), func(w io.Writer) error {
		return WriteFamilies(w, ids)
	}); err != nil {
		return err
	}
	fmt.Fprintf(cfg.log(), "novelty: %d families among %d training statements\n", len(ids), countSplit(qs, "train"))
	return cfg.runPython("-m", "trainer.novelty", "--workdir", cfg.Workdir, "--bundle", cfg.Out,
		"--families", strconv.Itoa(len(ids)))
}

// TrainFamilies are the distinct FamilyIDs of the training split's
// statements, sorted.
func TrainFamilies(qs []*Query) ([]uint64, error) {
	var ids []uint64
	for _, q := range qs {
		if q.Split != "train" {
			continue
		}
		engine, err := dialect.Parse(q.Engine)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", q.Key, err)
		}
		ids = append(ids, estimator.FamilyID(q.SQL, q.Catalog, q.Schema, engine))
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// WriteFamilies writes ids one per line as 16 lowercase hex digits (the
// bundle's families.txt).
func WriteFamilies(w io.Writer, ids []uint64) error {
	for _, id := range ids {
		if _, err := fmt.Fprintf(w, "%016x\n", id); err != nil {
			return err
		}
	}
	return nil
}

func countSplit(qs []*Query, split string) (n int) {
	for _, q := range qs {
		if q.Split == split {
			n++
		}
	}
	return n
}
