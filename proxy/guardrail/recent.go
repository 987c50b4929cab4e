package guardrail

import (
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Event is one refusal or dry-run hit as the console shows it.
type Event struct {
	Time    time.Time `json:"time"`
	Rule    string    `json:"rule"`
	Outcome string    `json:"outcome"` // refused or dry_run
	User    string    `json:"user"`
	Group   string    `json:"group,omitempty"`
	Source  string    `json:"source,omitempty"`
	// Target is the rule's target label and Quantile the quantile compared.
	Target   string  `json:"target"`
	Quantile float64 `json:"quantile"`
	// Estimate is the estimate at Quantile and Limit the rule's limit, in
	// the target's unit (seconds or bytes); the Text fields say them as
	// the error does.
	Estimate     float64 `json:"estimate"`
	Limit        float64 `json:"limit"`
	EstimateText string  `json:"estimate_text"`
	LimitText    string  `json:"limit_text"`
	OverrideTag  string  `json:"override_tag,omitempty"`
	// SQL is the start of the statement with its string literals
	// replaced (Snippet).
	SQL string `json:"sql"`
}

// Recent is a fixed-size ring of Events, newest last. Safe for
// concurrent use.
type Recent struct {
	mu  sync.Mutex
	evs []Event
	n   uint64 // events written
}

// NewRecent keeps the last n events (at least one).
func NewRecent(n int) *Recent { return &Recent{evs: make([]Event, max(n, 1))} }

func (r *Recent) add(e Event) {
	r.mu.Lock()
	r.evs[r.n%uint64(len(r.evs))] = e
	r.n++
	r.mu.Unlock()
}

// Snapshot copies up to n events, newest first, and the number written
// since the process started.
func (r *Recent) Snapshot(n int) ([]Event, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	held := min(r.n, uint64(len(r.evs)))
	n = max(min(n, int(held)), 0)
	out := make([]Event, 0, n)
	for s := r.n; len(out) < n; s-- {
		out = append(out, r.evs[(s-1)%uint64(len(r.evs))])
	}
	return out, r.n
}

// SnippetBytes bounds Snippet's length.
const SnippetBytes = 240

// Snippet is the start of sql for the console: whitespace runs folded to
// one space, every single-quoted string literal replaced by '?' (literals
// may hold what the console's readers should not see), cut to
// SnippetBytes at a rune boundary with "…".
func Snippet(sql []byte) string {
	var b strings.Builder
	inStr, space := false, false
	for _, c := range string(sql) { // no copy: the compiler ranges over the bytes
		if b.Len() > SnippetBytes {
			break
		}
		switch {
		case inStr:
			if c == '\'' {
				inStr = false // a doubled '' reopens on the next rune
			}
			continue
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		if c == '\'' {
			inStr = true
			b.WriteString("'?'")
		} else {
			b.WriteRune(c)
		}
	}
	s := b.String()
	if len(s) > SnippetBytes {
		cut := SnippetBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}
