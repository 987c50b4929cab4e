// Command prestroid is the cost-aware Trino gateway and its tools.
//
//	prestroid serve   run the proxy
//	prestroid help    list every subcommand
//
// Each subcommand lives in its own file and registers itself in init, so the
// command table below is the union of those files.
package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand: run gets the arguments after its name and
// returns the process exit code.
type command struct {
	summary string
	run     func(args []string) int
}

// commandTable maps names to commands; filled from init functions.
type commandTable map[string]command

func (t commandTable) add(name, summary string, run func(args []string) int) {
	if _, dup := t[name]; dup {
		panic("prestroid: duplicate command " + name)
	}
	t[name] = command{summary: summary, run: run}
}

// list prints the table's names and summaries, sorted.
func (t commandTable) list(w io.Writer) {
	names := make([]string, 0, len(t))
	for n := range t {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, t[n].summary)
	}
}

var commands = commandTable{}

// register adds a top-level subcommand; called from init functions.
func register(name, summary string, run func(args []string) int) { commands.add(name, summary, run) }

func usage() {
	fmt.Fprintln(os.Stderr, "usage: prestroid COMMAND [flags]\n\ncommands:")
	commands.list(os.Stderr)
	fmt.Fprintln(os.Stderr, "\nRun 'prestroid COMMAND -h' for a command's flags.")
}

func main() {
	if len(os.Args) < 2 || os.Args[1] == "help" || os.Args[1] == "-h" || os.Args[1] == "--help" {
		usage()
		if len(os.Args) < 2 {
			os.Exit(2)
		}
		return
	}
	c, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "prestroid: unknown command %q\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	os.Exit(c.run(os.Args[2:]))
}
