package estimator

import (
	"net/http"
	"testing"
	"unicode/utf8"
)

// FuzzFingerprint: any input is fingerprinted without panicking, and a
// fingerprint is its own fingerprint.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{"SELECT 1", "select 'a''b' -- x\n", `SELECT "q""x" FROM t /* c`, "1e+5.3e-2", "'unterminated", `"open`,
		"SELECT x BETWEEN (-1) AND -(2) - -3 FROM t WHERE y IN ((?), -'a')"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fp := Fingerprint(s)
		if !utf8.ValidString(s) {
			return
		}
		if again := Fingerprint(fp); again != fp {
			t.Fatalf("Fingerprint(%q) = %q, refingerprinted %q", s, fp, again)
		}
	})
}

func TestFingerprint(t *testing.T) {
	cases := []struct{ a, b string }{
		{"SELECT * FROM t WHERE x = 1", "select *\n  from T where X = 42;"},
		{"SELECT 'a''b', 1.5e3 -- comment\nFROM t", "SELECT 'zz', 7 /* other */ FROM t"},
		{`SELECT "Mixed" FROM t WHERE d = DATE '2000-01-01'`, `select "Mixed" from t where d = date '2001-02-03'`},
		// A sign or grouping parentheses are the literal's: the same statement.
		{"SELECT * FROM t WHERE p BETWEEN (-155.25) AND 2694.75", "SELECT * FROM t WHERE p BETWEEN 1006.20 AND 3006.20"},
		{"SELECT * FROM t WHERE p BETWEEN -5 AND +5 OR q IN (-1)", "SELECT * FROM t WHERE p BETWEEN 5 AND 5 OR q IN (1)"},
		{"SELECT -1, x FROM t WHERE y > (+2) AND z = ((3))", "SELECT 1, x FROM t WHERE y > 2 AND z = 3"},
	}
	for _, c := range cases {
		if fa, fb := Fingerprint(c.a), Fingerprint(c.b); fa != fb {
			t.Errorf("Fingerprint(%q) = %q\nFingerprint(%q) = %q", c.a, fa, c.b, fb)
		}
	}
	if a, b := Fingerprint(`SELECT "Mixed" FROM t`), Fingerprint(`SELECT "mixed" FROM t`); a == b {
		t.Errorf("quoted identifiers folded: %q", a)
	}
	for sql, want := range map[string]string{
		"SELECT a1, x FROM t2 WHERE y IN (1, 2)": "select a1 , x from t2 where y in ( ? , ? )",
		// Binary minus and calls keep their tokens.
		"SELECT x - 5, x -5, round(7), \"f\"(-2) FROM t": "select x - ? , x - ? , round ( ? ) , \"f\" ( ? ) from t",
		"SELECT (x) - (-5) FROM t;":                      "select ( x ) - ? from t",
	} {
		if got := Fingerprint(sql); got != want {
			t.Errorf("Fingerprint(%q) = %q, want %q", sql, got, want)
		}
	}
}

func TestEstimateKey(t *testing.T) {
	h := http.Header{"X-Trino-User": {"alice"}, "X-Trino-Catalog": {"tpch"}, "X-Trino-Schema": {"sf1"},
		"X-Trino-Session": {"join_distribution_type=BROADCAST"}, "X-Trino-Trace-Token": {"t1"}}
	base := EstimateKey("m1", "SELECT 1", h)
	same := h.Clone()
	same.Set("X-Trino-Trace-Token", "t2")
	same.Set("X-Trino-Client-Info", "dashboards")
	if EstimateKey("m1", "select  2", same) != base {
		t.Error("key changed with literals, trace token or client info")
	}
	// Another user in the same session shares the key: the plan explained
	// for alice serves bob without a second EXPLAIN.
	bob := h.Clone()
	bob.Set("X-Trino-User", "bob")
	bob.Set("X-Trino-Original-User", "bob")
	bob.Set("Authorization", "Basic Ym9iOng=")
	if EstimateKey("m1", "SELECT 1", bob) != base {
		t.Error("key changed with the user or the credentials")
	}
	for name, mod := range map[string]func(http.Header){
		"catalog":  func(h http.Header) { h.Set("X-Trino-Catalog", "tpcds") },
		"schema":   func(h http.Header) { h.Set("X-Trino-Schema", "tiny") },
		"session":  func(h http.Header) { h.Add("X-Trino-Session", "query_max_stage_count=200") },
		"role":     func(h http.Header) { h.Set("X-Trino-Role", "system=ROLE{admin}") },
		"prepared": func(h http.Header) { h.Set("X-Trino-Prepared-Statement", "q1=SELECT+1") },
		"extra":    func(h http.Header) { h.Set("X-Trino-Extra-Credential", "k=v") },
	} {
		h2 := h.Clone()
		mod(h2)
		if EstimateKey("m1", "SELECT 1", h2) == base {
			t.Errorf("key ignores the %s", name)
		}
	}
	if EstimateKey("m2", "SELECT 1", h) == base {
		t.Error("key ignores the model id")
	}
}

func TestNormalizeKeepsLiterals(t *testing.T) {
	a := Normalize("SELECT *  FROM t -- c\n WHERE x = 'A' AND y = 1")
	if a != Normalize("select * from t where x = 'A' and y = 1 /* other */") {
		t.Errorf("spacing, comments and keyword case changed the normalized text: %q", a)
	}
	if a == Normalize("SELECT * FROM t WHERE x = 'a' AND y = 1") || a == Normalize("SELECT * FROM t WHERE x = 'A' AND y = 2") {
		t.Errorf("another literal gave the same normalized text %q", a)
	}
	if Fingerprint("SELECT * FROM t WHERE x = 'A'") != Fingerprint("SELECT * FROM t WHERE x = 'B'") {
		t.Error("the fingerprint must ignore literals")
	}
}
