package estimator

import (
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"

	"github.com/prestroid/prestroid/internal/dialect"

	"github.com/prestroid/prestroid/internal/sqllex"
)

// Fingerprint normalizes a SQL statement for caching (sqllex.Fingerprint):
// statements that differ only in literals share a fingerprint.
func Fingerprint(sql string) string { return sqllex.Fingerprint(sql) }

// Normalize is Fingerprint with the literals kept (sqllex.Normalize): the
// history's exact-statement key.
func Normalize(sql string) string { return sqllex.Normalize(sql) }

// plannerIrrelevant are X-Trino-* request headers that are not part of an
// estimate's cache key: those that do not change a query's plan (or its
// cost), and the caller's identity (the user, the original user; the
// Authorization header is not an X-Trino-* header and is left out too).
// Another user who runs the same statement in the same catalog, schema and
// session is served the estimate (and the plan) an EXPLAIN made for the
// first, as the history serves every user the same statement's runs: no
// second EXPLAIN. Under identity: verified the proxy then checks the
// caller's credentials with its cheaper probe (a cached estimate is no
// proof of them), and Trino checks the tables' access when the query runs.
var plannerIrrelevant = map[string]bool{
	"X-Trino-Trace-Token": true, "X-Trino-Client-Info": true, "X-Trino-Client-Tags": true,
	"X-Trino-Source": true, "X-Trino-Client-Capabilities": true, "X-Trino-Query-Data-Encoding": true,
	"X-Trino-Routing-Group": true, "X-Trino-Resource-Estimate": true,
	"X-Trino-User": true, "X-Trino-Original-User": true,
}

// EstimateKey is the estimate cache key of sql run in the session described
// by h (catalog, schema, session properties, roles, prepared statements,
// extra credentials...; not the user nor the Authorization header:
// plannerIrrelevant) under model modelID: a SHA-256 digest. The statement
// enters it by its Fingerprint and its range literals (cacheFingerprint):
// other literals in equalities share the key, a moved range does not.
func EstimateKey(modelID, sql string, h http.Header) string {
	return estimateKey(modelID, dialect.Trino, cacheFingerprint(sql, Fingerprint(sql), false), h)
}

// estimateKey is EstimateKey of a statement whose Fingerprint is fp, on a
// coordinator of the engine: the same statement plans and costs otherwise
// on PrestoDB, whose keys get the engine's mark (engineMark) after the
// model; Trino's (and Unknown's) keys are what they always were.
func estimateKey(modelID string, engine dialect.Engine, fp string, h http.Header) string {
	d := sha256.New()
	d.Write([]byte(modelID))
	d.Write([]byte{0})
	if m := engineMark(engine); m != "" {
		d.Write([]byte(m))
		d.Write([]byte{0})
	}
	d.Write([]byte(fp))
	d.Write([]byte{0})
	names := make([]string, 0, len(h))
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		if strings.HasPrefix(ck, "X-Trino-") && !plannerIrrelevant[ck] {
			names = append(names, k)
		}
	}
	slices.SortFunc(names, func(a, b string) int {
		return strings.Compare(http.CanonicalHeaderKey(a), http.CanonicalHeaderKey(b))
	})
	for _, k := range names {
		d.Write([]byte(http.CanonicalHeaderKey(k)))
		d.Write([]byte{':'})
		vals := h[k]
		if len(vals) > 1 {
			vals = slices.Clone(vals)
			slices.Sort(vals)
		}
		for _, v := range vals {
			d.Write([]byte(v))
			d.Write([]byte{0})
		}
	}
	return string(d.Sum(nil))
}

// engineMark is what a key's digest input carries for an engine other than
// Trino: "\xffpresto" for PrestoDB, "" for Trino and Unknown (whose keys
// stay as they were before PrestoDB was served). The 0xff byte never
// occurs in UTF-8, so no statement's text reads as the mark.
func engineMark(e dialect.Engine) string {
	if e == dialect.Presto {
		return "\xff" + string(e)
	}
	return ""
}

// globalKey is a global calibration's history key (keyModel, keyText,
// keyOptimizer) for statements run on the engine: PrestoDB's are learned
// apart from Trino's (another engine on other machines has its own offset
// against the model, and its plan cost is in other units: planCost), under
// the key with ":presto" after it; Trino's keep their names.
func globalKey(key string, e dialect.Engine) string {
	if e == dialect.Presto {
		return key + ":" + string(e)
	}
	return key
}
