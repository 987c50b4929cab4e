// Package dialect is the one place that knows the two dialects of the Presto
// family's client protocol: Trino's (X-Trino-* headers) and PrestoDB's
// (X-Presto-* headers). A cluster has an engine, a client request has a
// dialect, and the two must match (docs/design.md §5.3).
//
// Inside Prestroid a caller's session travels under Trino's names (the
// canonical form): Canonical renames a PrestoDB request's X-Presto-*
// headers to X-Trino-* once at the edge, and For renames them back for a
// request made on the caller's behalf to a PrestoDB coordinator. Only the
// prefix changes; which headers exist is each engine's business.
package dialect

import (
	"fmt"
	"net/http"
	"strings"
)

// Engine is a coordinator's engine, or a client's dialect.
type Engine string

const (
	// Unknown is a request that carries neither dialect's headers, or a
	// cluster whose engine is not known yet.
	Unknown Engine = ""
	Trino   Engine = "trino"
	Presto  Engine = "presto"
)

const (
	trinoPrefix  = "X-Trino-"
	prestoPrefix = "X-Presto-"
)

// Parse reads an engine name as configuration spells it ("trino",
// "presto"; "" is Unknown, to be detected).
func Parse(s string) (Engine, error) {
	switch e := Engine(strings.ToLower(strings.TrimSpace(s))); e {
	case Unknown, Trino, Presto:
		return e, nil
	}
	return Unknown, fmt.Errorf("dialect: unknown engine %q (want trino or presto)", s)
}

// String is the engine's name; Unknown prints as "unknown".
func (e Engine) String() string {
	if e == Unknown {
		return "unknown"
	}
	return string(e)
}

// Prefix is the engine's header prefix ("X-Trino-" or "X-Presto-");
// Unknown has Trino's.
func (e Engine) Prefix() string {
	if e == Presto {
		return prestoPrefix
	}
	return trinoPrefix
}

// Header is the engine's name of a protocol header given by its suffix:
// Presto.Header("User") is "X-Presto-User".
func (e Engine) Header(suffix string) string { return e.Prefix() + suffix }

// FromVersion tells the engine from a coordinator's /v1/info
// nodeVersion.version: PrestoDB numbers its releases 0.N ("0.296-8661b73"),
// Trino by one integer ("476", "476-e", "476-SNAPSHOT"). Anything else is
// Unknown.
func FromVersion(v string) Engine {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "0.") {
		return Presto
	}
	n := 0
	for n < len(v) && v[n] >= '0' && v[n] <= '9' {
		n++
	}
	if n > 0 && (n == len(v) || v[n] == '-') {
		return Trino
	}
	return Unknown
}

func hasPrefixFold(name, prefix string) bool {
	return len(name) > len(prefix) && strings.EqualFold(name[:len(prefix)], prefix)
}

// OfHeader says which dialect a header name belongs to, or Unknown.
func OfHeader(name string) Engine {
	switch {
	case hasPrefixFold(name, trinoPrefix):
		return Trino
	case hasPrefixFold(name, prestoPrefix):
		return Presto
	}
	return Unknown
}

// OfNames is the dialect of a request whose header names are given: Trino
// when any is X-Trino-*, else Presto when any is X-Presto-*, else Unknown.
// (Trino clients of old releases may send a legacy X-Presto-* header beside
// their X-Trino-* ones; a request is PrestoDB's only when it has no Trino
// header at all.)
func OfNames(names func(yield func(string) bool)) Engine {
	got := Unknown
	for n := range names {
		switch OfHeader(n) {
		case Trino:
			return Trino
		case Presto:
			got = Presto
		}
	}
	return got
}

// Of is OfNames over an http.Header.
func Of(h http.Header) Engine {
	return OfNames(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
}

// Rename returns name with its dialect prefix changed to to's; a name of
// neither dialect is returned unchanged.
func Rename(name string, to Engine) string {
	switch OfHeader(name) {
	case Trino:
		if to == Presto {
			return prestoPrefix + name[len(trinoPrefix):]
		}
	case Presto:
		if to != Presto {
			return trinoPrefix + name[len(prestoPrefix):]
		}
	}
	return name
}

// Canonical returns h with every X-Presto-* header renamed X-Trino-* (h is
// only read; value slices are shared). A header present under both names
// keeps both values lists, Trino's first. A Trino request is returned as is.
func Canonical(h http.Header) http.Header { return For(h, Trino) }

// For returns the canonical header set h renamed for a coordinator of
// engine e: X-Trino-* become X-Presto-* for Presto; for Trino (or Unknown)
// it is Canonical. h is only read; it is returned itself when nothing needs
// renaming.
func For(h http.Header, e Engine) http.Header {
	from := Presto
	if e == Presto {
		from = Trino
	}
	need := false
	for k := range h {
		if OfHeader(k) == from {
			need = true
			break
		}
	}
	if !need {
		return h
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		if OfHeader(k) != from {
			out[k] = append(out[k], vs...)
		}
	}
	for k, vs := range h {
		if OfHeader(k) == from {
			n := http.CanonicalHeaderKey(Rename(k, e))
			out[n] = append(out[n], vs...)
		}
	}
	return out
}
