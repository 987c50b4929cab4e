package collector

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
)

// Split is the fixed train/validation/test assignment by template: every
// query of a template lands in the same part, so the test set measures
// generalisation to unseen query shapes (docs/design.md §3, "Split 8/1/1 by query
// template").
type Split struct {
	Seed       int64             `json:"seed"`
	Train      []string          `json:"train"`
	Validation []string          `json:"validation"`
	Test       []string          `json:"test"`
	ByTemplate map[string]string `json:"by_template"` // template -> "train", "validation" or "test"
}

// MakeSplit shuffles the template names with seed and cuts 80/10/10
// (validation and test get round(n/10) each, at least one).
func MakeSplit(templates []string, seed int64) *Split {
	names := append([]string(nil), templates...)
	sort.Strings(names)
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5117))
	rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	k := max(1, (len(names)+5)/10)
	s := &Split{Seed: seed, ByTemplate: map[string]string{}}
	s.Test = append(s.Test, names[:k]...)
	s.Validation = append(s.Validation, names[k:2*k]...)
	s.Train = append(s.Train, names[2*k:]...)
	for _, part := range []struct {
		name string
		xs   []string
	}{{"train", s.Train}, {"validation", s.Validation}, {"test", s.Test}} {
		sort.Strings(part.xs)
		for _, n := range part.xs {
			s.ByTemplate[n] = part.name
		}
	}
	return s
}

// HashPart places a template that no split file lists (live traffic, whose
// templates are not known in advance) by a hash of its name, in the same
// 80/10/10 proportions as MakeSplit: every query of the template lands in
// the same part, whichever run sees it.
func HashPart(template string) string {
	sum := sha256.Sum256([]byte(template))
	switch binary.BigEndian.Uint64(sum[:8]) % 10 {
	case 0:
		return "test"
	case 1:
		return "validation"
	}
	return "train"
}

// AllTemplateNames lists the TPC templates and the generator kinds.
func AllTemplateNames(ts []Template) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	for _, k := range GenKinds {
		out = append(out, "gen/"+k)
	}
	return out
}

// WriteFile writes s as indented JSON.
func (s *Split) WriteFile(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("collector: %w", err)
	}
	return nil
}

// LoadSplit reads a split file (data/split.json, written by WriteFile).
func LoadSplit(path string) (*Split, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	var s Split
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("collector: split %s: %w", path, err)
	}
	return &s, nil
}

// Part is the template names of a part of the split: "train",
// "validation" or "test" (false for any other name).
func (s *Split) Part(name string) ([]string, bool) {
	switch name {
	case "train":
		return s.Train, true
	case "validation":
		return s.Validation, true
	case "test":
		return s.Test, true
	}
	return nil, false
}
