package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/prestroid/prestroid/bench"
)

// Benchmarks are subcommands of `prestroid bench`; the harnesses live in
// package bench, this file parses their flags.
var benches = commandTable{}

func registerBench(name, summary string, run func(args []string) int) {
	benches.add(name, summary, run)
}

func init() {
	register("bench", "benchmarks (prestroid bench NAME; NAME -h for flags)", runBench)
	registerBench("proxy", "added latency and throughput of the proxy, direct vs proxied", benchProxy)
	registerBench("pages", "time to the last row of a large result, direct vs proxied, identity and gzip clients", benchPages)
	registerBench("train", "training efficiency: sub-trees vs padded/packed full trees (paper Fig 6)", benchTrain)
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

// benchProxy: bench.Proxy, what the proxy adds on loopback.
func benchProxy(args []string) int {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	var o bench.ProxyOptions
	fs.StringVar(&o.Trino, "trino", "", "real Trino URL for part (a); empty skips it")
	fs.IntVar(&o.Queries, "queries", 200, "queries per path in part (a)")
	fs.IntVar(&o.Requests, "requests", 20000, "requests per path in part (b)")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "concurrent clients for the throughput runs")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := bench.Proxy(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

// benchTrain: bench.Train, the paper's Fig 6.
func benchTrain(args []string) int {
	fs := flag.NewFlagSet("bench train", flag.ContinueOnError)
	var data multiFlag
	var o bench.TrainOptions
	fs.Var(&data, "data", "record file or directory (repeatable; more may follow the flags)")
	fs.StringVar(&o.Workdir, "workdir", "bench-train.work", "directory for features and results")
	fs.StringVar(&o.Split, "split", "data/split.json", "template-level split (the training split is benchmarked)")
	fs.IntVar(&o.Pf, "pf", 100, "predicate vector size Pf")
	fs.StringVar(&o.Batches, "batches", "32,64,256", "batch sizes")
	fs.IntVar(&o.Epochs, "epochs", 2, "timed epochs per setting (after a warm-up epoch)")
	fs.IntVar(&o.MinNodes, "min-nodes", 0, "only queries whose O-T-P tree has at least this many nodes (the large-plan part)")
	fs.StringVar(&o.Kernels, "kernels", "128,128,128", "tree-conv kernels")
	fs.StringVar(&o.Dense, "dense", "32,8", "dense layers")
	fs.StringVar(&o.Device, "device", "cpu", "cpu or cuda")
	fs.StringVar(&o.Python, "python", "", "Python with the trainer package (default $PRESTROID_PYTHON, .venv/bin/python, python3)")
	fs.BoolVar(&o.Reuse, "reuse", false, "reuse the features already in --workdir")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	o.Data = append([]string(data), fs.Args()...)
	if err := bench.Train(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench train:", err)
		return 1
	}
	return 0
}

// benchPages: bench.Pages, time to the last row of a large result.
func benchPages(args []string) int {
	fs := flag.NewFlagSet("bench pages", flag.ContinueOnError)
	var o bench.PagesOptions
	fs.StringVar(&o.Trino, "trino", "http://127.0.0.1:8081", "real Trino URL")
	fs.StringVar(&o.SQL, "sql", "SELECT * FROM tpch.sf1.orders", "the large query")
	fs.IntVar(&o.Runs, "runs", 5, "runs per path (identity and gzip client, direct and proxied)")
	clients := fs.String("clients", "identity,gzip", "client kinds: identity (no Accept-Encoding), gzip")
	fs.StringVar(&o.Proxy, "proxy", "", "running proxies in front of --trino to measure, URL or NAME=URL,NAME=URL (default: two in-process, read-ahead off and on)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	o.Clients = strings.Split(*clients, ",")
	if err := bench.Pages(os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench pages:", err)
		return 1
	}
	return 0
}
