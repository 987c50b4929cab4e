package training

import (
	"fmt"
	"strconv"
	"strings"
)

// ScaleLargest is the Config.ScaleSplit value that holds out the largest
// scale among the records.
const ScaleLargest = "largest"

// ScaleFactor is the TPC scale factor of a collector scale name: "tiny" is
// 0.01 (the connectors' tiny schema), "sfN" is N ("sf0.1", "sf10").
func ScaleFactor(scale string) (float64, bool) {
	if scale == "tiny" {
		return 0.01, true
	}
	if !strings.HasPrefix(scale, "sf") {
		return 0, false
	}
	f, err := strconv.ParseFloat(scale[2:], 64)
	return f, err == nil && f > 0
}

// ApplyScaleSplit turns the template-level split into a scale split: every
// query at the held-out scale (held, or the largest scale of the queries
// when held is ScaleLargest) is a test query, whatever its template; the
// queries at other scales keep their template's train or validation part,
// and those of test templates train (nothing else is held out). So the
// test split asks only whether the model extrapolates to a larger scale.
// Queries without a scale (live traffic) never test. It updates st's
// per-split counts and ScaleSplit and returns the held-out scale.
func ApplyScaleSplit(qs []*Query, st *LoadStats, held string) (string, error) {
	if held == ScaleLargest {
		best := -1.0
		for _, q := range qs {
			if f, ok := ScaleFactor(q.Scale); ok && f > best {
				best, held = f, q.Scale
			}
		}
		if best < 0 {
			return "", fmt.Errorf("scale split: no query has a TPC scale (tiny, sfN)")
		}
	}
	n := 0
	for _, q := range qs {
		switch {
		case q.Scale == held:
			q.Split = "test"
			n++
		case q.Split == "test":
			q.Split = "train"
		}
	}
	if n == 0 {
		return "", fmt.Errorf("scale split: no query at scale %q", held)
	}
	if n == len(qs) {
		return "", fmt.Errorf("scale split: every query is at scale %q: nothing left to train on", held)
	}
	if st != nil {
		st.ScaleSplit = held
		st.PerSplit = map[string]int{}
		for _, q := range qs {
			st.PerSplit[q.Split]++
		}
	}
	return held, nil
}
