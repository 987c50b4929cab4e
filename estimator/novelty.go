package estimator

import (
	"encoding/binary"
	"net/http"

	"github.com/prestroid/prestroid/estimate"
	"github.com/prestroid/prestroid/estimator/bundle"
	"github.com/prestroid/prestroid/internal/dialect"
)

// Novelty: the plan model errs more on statements unlike any it was
// trained on than on other literals of those it was. Its σ for a
// statement without residuals is one spread for all (the global
// residuals' around the offset, or the blend line's), and the interval
// factor (cover.go) learns one c from the mix the deployment serves: a
// deployment whose model was trained on most of its traffic then serves
// the new statements intervals that are too narrow (held-out templates on
// Parquet: 74% of the model's 80% intervals held, against 82% on the
// trained templates' other literals, models/README.md).
//
// A bundle may name the families it was trained on (bundle.Novelty: the
// FamilyID of every training statement) and how much wider the model's
// errors are on the validation templates than on the training ones
// (Widen, the ratio of their 80% absolute log-errors, fitted as the text
// stage's conformal margin is). The model stage serves a statement whose
// family is not among them with σ·Widen; the others, and every
// model+residual answer (the deployment's own residuals say how far the
// model is on that shape), as before. The interval factor then learns
// one c for both.

// FamilyID is the short name of the family of sql run in catalog and
// schema on a coordinator of engine (the statement with other literals
// in any session: Basis.Family): the first 8 bytes of the family key's
// digest, as the bundle's list of the families the model was trained on
// holds it (bundle.Novelty).
func FamilyID(sql, catalog, schema string, engine dialect.Engine) uint64 {
	h := http.Header{}
	if catalog != "" {
		h.Set("X-Trino-Catalog", catalog)
	}
	if schema != "" {
		h.Set("X-Trino-Schema", schema)
	}
	_, _, family := historyKeys(sql, engine, Fingerprint(sql), h)
	id, _ := familyID(family)
	return id
}

// familyID is the FamilyID of a family key (Basis.Family); false for an
// empty or malformed one.
func familyID(family string) (uint64, bool) {
	if len(family) < len(keyFamily)+8 || family[:len(keyFamily)] != keyFamily {
		return 0, false
	}
	return binary.BigEndian.Uint64([]byte(family[len(keyFamily) : len(keyFamily)+8])), true
}

// widenNovel widens e's CPU σ by novelty(b, mf) when e is the plain
// model's (no residuals).
func widenNovel(e *estimate.Estimate, b *Basis, mf *bundle.Manifest) {
	if e.Source == estimate.SourceModel {
		e.Sigma *= novelty(b, mf)
	}
}

// novelty is the factor the model of mf's CPU σ is widened by for a
// statement of b's family: the bundle's Widen when the model was not
// trained on it, else 1 (also for a bundle without the list, or a
// statement without a family).
func novelty(b *Basis, mf *bundle.Manifest) float64 {
	if b == nil || mf == nil || mf.Novelty == nil {
		return 1
	}
	if id, ok := familyID(b.Family); !ok || mf.Novelty.Familiar(id) {
		return 1
	}
	return mf.Novelty.Widen
}
