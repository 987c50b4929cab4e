package main

import (
	"fmt"
	"os"
)

// Benchmarks are subcommands of `prestroid bench`; each registers itself
// from its own file, like the top-level commands.
var benches = commandTable{}

func registerBench(name, summary string, run func(args []string) int) {
	benches.add(name, summary, run)
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
	benches.list(os.Stderr)
	return 2
}
