package estimator

import (
	"crypto/sha256"
	"net/http"
	"slices"
	"strings"
)

// Fingerprint normalizes a SQL statement for caching: comments dropped,
// tokens separated by one space, unquoted words lower-cased, string and numeric
// literals replaced by "?" (quoted identifiers are kept as written). Two
// statements that differ only in literals share a fingerprint: their plans
// have the same shape, which is what the cost model looks at.
func Fingerprint(sql string) string {
	var b strings.Builder
	b.Grow(len(sql))
	// Tokens are separated by one space whatever the original spacing.
	emit := func(s string) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	isIdent := func(c byte) bool {
		return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f':
			i++
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			end := strings.Index(sql[i+2:], "*/")
			if end < 0 {
				i = len(sql)
			} else {
				i += end + 4
			}
		case c == '\'':
			i++
			for i < len(sql) {
				if sql[i] == '\'' {
					if i+1 < len(sql) && sql[i+1] == '\'' {
						i += 2
						continue
					}
					i++
					break
				}
				i++
			}
			emit("?")
		case c == '"':
			j := i + 1
			for j < len(sql) {
				if sql[j] == '"' {
					if j+1 < len(sql) && sql[j+1] == '"' {
						j += 2
						continue
					}
					j++
					break
				}
				j++
			}
			emit(sql[i:j])
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(sql) && sql[i+1] >= '0' && sql[i+1] <= '9':
			j := i
			for j < len(sql) && (isIdent(sql[j]) || sql[j] == '.' ||
				(sql[j] == '+' || sql[j] == '-') && (sql[j-1] == 'e' || sql[j-1] == 'E')) {
				j++
			}
			emit("?")
			i = j
		case isIdent(c):
			j := i
			for j < len(sql) && isIdent(sql[j]) {
				j++
			}
			emit(strings.ToLower(sql[i:j]))
			i = j
		default:
			emit(sql[i : i+1])
			i++
		}
	}
	out := b.String()
	for strings.HasSuffix(out, " ;") || out == ";" {
		out = strings.TrimSuffix(strings.TrimSuffix(out, ";"), " ")
	}
	return out
}

// plannerIrrelevant are X-Trino-* request headers that do not change a
// query's plan (or its cost); every other X-Trino-* header, Authorization
// included by hash, is part of an estimate's cache key.
var plannerIrrelevant = map[string]bool{
	"X-Trino-Trace-Token": true, "X-Trino-Client-Info": true, "X-Trino-Client-Tags": true,
	"X-Trino-Source": true, "X-Trino-Client-Capabilities": true, "X-Trino-Query-Data-Encoding": true,
	"X-Trino-Routing-Group": true, "X-Trino-Resource-Estimate": true,
}

// EstimateKey is the estimate cache key of sql run by the caller described
// by h (user, catalog, schema, session properties, roles, prepared
// statements, credentials...) under model modelID: a SHA-256 digest.
func EstimateKey(modelID, sql string, h http.Header) string {
	d := sha256.New()
	d.Write([]byte(modelID))
	d.Write([]byte{0})
	d.Write([]byte(Fingerprint(sql)))
	d.Write([]byte{0})
	names := make([]string, 0, len(h))
	for k := range h {
		ck := http.CanonicalHeaderKey(k)
		if strings.HasPrefix(ck, "X-Trino-") && !plannerIrrelevant[ck] || ck == "Authorization" {
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
