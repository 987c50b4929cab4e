package main

import (
	"fmt"
	"os"
	"sort"
)

// Benchmarks are subcommands of `prestroid bench`; each registers itself
// from its own file, like the top-level commands.
var benches = map[string]command{}

func registerBench(name, summary string, run func(args []string) int) {
	if _, dup := benches[name]; dup {
		panic("prestroid: duplicate benchmark " + name)
	}
	benches[name] = command{summary: summary, run: run}
}

func init() {
	register("bench", "benchmarks (prestroid bench NAME; NAME -h for flags)", runBench)
}

func runBench(args []string) int {
	if len(args) > 0 {
		if b, ok := benches[args[0]]; ok {
			return b.run(args[1:])
		}
	}
	fmt.Fprintln(os.Stderr, "usage: prestroid bench NAME [flags]\n\nbenchmarks:")
	names := make([]string, 0, len(benches))
	for n := range benches {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-8s %s\n", n, benches[n].summary)
	}
	return 2
}
