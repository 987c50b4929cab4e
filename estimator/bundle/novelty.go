package bundle

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"strconv"

	"github.com/prestroid/prestroid/estimate"
)

// NoveltyFile holds the families a bundle's model was trained on (the
// novelty section's file).
const NoveltyFile = "families.txt"

// Novelty is the manifest's optional novelty section (BUNDLE.md): the
// families of the statements the model was trained on, in File
// (NoveltyFile: one estimator.FamilyID per line, 16 lowercase hex
// digits, sorted), and how much wider the model's errors are on
// statements of other families. The model stage serves a statement whose
// family is not in File with its σ times Widen (estimator/novelty.go).
type Novelty struct {
	File string `json:"file"`
	// Families is how many File holds (a truncated file is refused).
	Families int `json:"families"`
	// Widen is the ratio of the model's Quantile absolute ln-CPU error on
	// the validation templates to that on the training statements, at
	// least 1. Quantile must be the coverage of the intervals served
	// (estimate.IntervalCoverage): a ratio of other quantiles says how much wider
	// another interval should be. (The manifest's "validation", how Widen
	// was fitted, is the trainer's record: not read.)
	Widen    float64 `json:"widen"`
	Quantile float64 `json:"quantile"`

	familiar map[uint64]struct{}
}

// NewNovelty is the novelty section of a model trained on the families
// ids whose errors off them are widen times wider (at estimate.IntervalCoverage),
// as a bundle's manifest and families.txt would give it.
func NewNovelty(widen float64, ids []uint64) *Novelty {
	n := &Novelty{File: NoveltyFile, Widen: widen, Quantile: estimate.IntervalCoverage, familiar: make(map[uint64]struct{}, len(ids))}
	for _, id := range ids {
		n.familiar[id] = struct{}{}
	}
	n.Families = len(n.familiar)
	return n
}

// maxWiden bounds Novelty.Widen: a model four times as wrong off its
// training families needs retraining, not wider intervals.
const maxWiden = 4.0

// Familiar reports whether the family id (estimator.FamilyID) is one the
// model was trained on.
func (n *Novelty) Familiar(id uint64) bool {
	_, ok := n.familiar[id]
	return ok
}

// validate checks the section on its own (the file is read later).
func (n *Novelty) validate() error {
	switch {
	case n.File != NoveltyFile:
		return fmt.Errorf("novelty.file %q: want %q", n.File, NoveltyFile)
	case n.Families <= 0:
		return fmt.Errorf("novelty.families %d: want at least 1", n.Families)
	case !(n.Widen >= 1 && n.Widen <= maxWiden):
		return fmt.Errorf("novelty.widen %v: want a ratio in [1, %g]", n.Widen, maxWiden)
	case math.Abs(n.Quantile-estimate.IntervalCoverage) > 1e-9:
		return fmt.Errorf("novelty.quantile %v: want %g, the coverage of the intervals served", n.Quantile, estimate.IntervalCoverage)
	}
	return nil
}

// readFamilies parses the novelty file's data into n.
func (n *Novelty) readFamilies(data []byte) error {
	set := make(map[uint64]struct{}, n.Families)
	sc := bufio.NewScanner(bytes.NewReader(data))
	line := 0
	for sc.Scan() {
		line++
		s := sc.Text()
		if s == "" {
			continue
		}
		if len(s) != 16 {
			return fmt.Errorf("line %d: %q is not 16 hex digits", line, s)
		}
		id, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return fmt.Errorf("line %d: %q is not 16 hex digits", line, s)
		}
		set[id] = struct{}{}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(set) != n.Families {
		return fmt.Errorf("holds %d families, the manifest says %d (truncated?)", len(set), n.Families)
	}
	n.familiar = set
	return nil
}
