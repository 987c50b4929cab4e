package config

import (
	"fmt"
	"strconv"
)

// A Deprecation is a setting that still works but has moved: the value is
// used as before, and the server says so at startup (prestroid serve logs
// each one as a warning; serve --check-config prints it).
type Deprecation struct {
	// Key is the deprecated key, e.g. "routing.explain".
	Key string
	// Message says what is used instead and what to change.
	Message string
}

// String is "KEY: MESSAGE".
func (d Deprecation) String() string { return d.Key + ": " + d.Message }

// Deprecations lists the deprecated settings c uses, in key order; none
// means nil. It reads c as loaded (before or after FillDefaults).
func (c *Config) Deprecations() []Deprecation {
	var ds []Deprecation
	if v := c.Routing.DeprecatedExplain; v != "" {
		ds = append(ds, Deprecation{Key: "routing.explain",
			Message: fmt.Sprintf("deprecated: %s is used as estimator.explain; move it there (only the estimator reads it)", strconv.Quote(v))})
	}
	return ds
}

// fillDeprecated moves the values of deprecated keys to their new homes
// where those are empty; FillDefaults calls it before filling defaults, so
// that an old key's value wins over the new key's default. The old field
// keeps its value, for Validate (a conflict) and Deprecations.
func (c *Config) fillDeprecated() {
	setString(&c.Estimator.Explain, c.Routing.DeprecatedExplain)
}

// explainModes are the values of estimator.explain (and routing.explain).
const explainModes = "always, when-uncertain or never"

// validateExplain checks estimator.explain and its deprecated old key:
// the old key's value first (FillDefaults copied it to the new key, so a
// bad value is reported under the key that was written), then that the two
// agree.
func (c *Config) validateExplain() error {
	old, cur := c.Routing.DeprecatedExplain, c.Estimator.Explain
	for _, f := range []struct{ key, v string }{{"routing.explain", old}, {"estimator.explain", cur}} {
		switch f.v {
		case "", "always", "when-uncertain", "never":
		default:
			return fmt.Errorf("%w: %s=%q: want %s", ErrInvalid, f.key, f.v, explainModes)
		}
	}
	if old != "" && cur != "" && old != cur {
		return fmt.Errorf("%w: routing.explain=%q conflicts with estimator.explain=%q: set only estimator.explain (routing.explain is deprecated)",
			ErrInvalid, old, cur)
	}
	return nil
}
