package training

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/prestroid/prestroid/estimator/featurize"
)

// Featurize is the featurize step: it loads the records (LoadQueries) and
// writes queries.jsonl, the Word2Vec corpus corpus.txt and meta.json (the
// LoadStats) into the workdir.
func Featurize(cfg *Config) error {
	qs, st, err := LoadQueriesWith(cfg.Data, cfg.Split, featurize.TreeOptions{DynamicFilters: cfg.DynamicFilters})
	if err != nil {
		return err
	}
	if cfg.ScaleSplit != "" {
		held, err := ApplyScaleSplit(qs, st, cfg.ScaleSplit)
		if err != nil {
			return err
		}
		fmt.Fprintf(cfg.log(), "featurize: scale split: %s held out as the test split\n", held)
	}
	if st.PerSplit["train"] == 0 {
		return fmt.Errorf("no usable training queries in %d records (dropped: %v)", st.Records, st.Dropped)
	}
	if err := WriteQueries(filepath.Join(cfg.Workdir, "queries.jsonl"), qs); err != nil {
		return err
	}
	// The Word2Vec corpus: the training split's predicates only (serving
	// sees no test predicates either), one sentence per PRED node; join
	// criteria are not PRED nodes in the default encoding (docs/design.md §2.2).
	sentences := 0
	err = writeFile(filepath.Join(cfg.Workdir, "corpus.txt"), func(w io.Writer) error {
		for _, q := range qs {
			if q.Split != "train" {
				continue
			}
			for _, s := range q.Preds {
				if _, err := fmt.Fprintln(w, strings.Join(s, " ")); err != nil {
					return err
				}
				sentences++
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(cfg.Workdir, "meta.json"), st); err != nil {
		return err
	}
	fmt.Fprintf(cfg.log(), "featurize: %d records, %d usable (train %d, val %d, test %d), dropped %v; corpus %d sentences\n",
		st.Records, st.Usable, st.PerSplit["train"], st.PerSplit["val"], st.PerSplit["test"], st.Dropped, sentences)
	return nil
}
