package config

import "fmt"

// Console configures the web console (proxy/console), served on
// the admin surface (admin_listen, else listen) under /prestroid/ behind
// admin_token when one is set.
type Console struct {
	// Decisions is how many recent placed queries the console keeps in
	// memory (a ring; each a few hundred bytes). Zero means 2000; negative
	// turns the console off (its paths answer 404). At most 100000.
	Decisions int `yaml:"decisions"`
}

// MaxConsoleDecisions bounds Console.Decisions.
const MaxConsoleDecisions = 100000

func (c *Config) validateConsole() error {
	if c.Console.Decisions > MaxConsoleDecisions {
		return fmt.Errorf("%w: console.decisions=%d: at most %d (a negative value turns the console off)",
			ErrInvalid, c.Console.Decisions, MaxConsoleDecisions)
	}
	return nil
}
