// Package sqllex is the one scanner over SQL text in Prestroid: it knows
// where a 'string literal' (with ” escapes), a "quoted identifier" (with ""
// escapes), a -- line comment and a /* block comment */ begin and end, so
// that nothing else in the tree re-implements those rules.
//
// A Dialect says what counts as a word, a number and a two-byte operator for
// one kind of text; the quoting and comment rules are the same for all:
//
//	Statement  SQL as clients send it (the estimator's fingerprint and the
//	           statement classifier)
//	Expr       expressions as Trino renders them in EXPLAIN plans (the
//	           predicate parser): no comments, words may hold $ # @
//	Template   workload SQL with ${var} placeholders (the collector's
//	           rewrites; tokens round-trip the text exactly)
//
// The scanner never fails: an unterminated string, quoted identifier or
// block comment runs to the end of the input and is marked Unterminated, for
// the caller to reject or accept.
package sqllex
