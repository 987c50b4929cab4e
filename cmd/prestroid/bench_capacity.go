package main

// prestroid bench capacity and capacity-model: flag parsing for
// bench.Capacity (one replica's cost per statement, measured) and
// capacity.Model (a fleet, modelled from those figures).

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prestroid/prestroid/bench"
	"github.com/prestroid/prestroid/internal/capacity"
)

func init() {
	registerBench("capacity", "one replica's CPU per statement on each decision path and Redis ops/bytes per statement per feature, measured on a real Trino and redis-server", benchCapacity)
	registerBench("capacity-model", "a fleet at a rate and a mix: replicas, Redis ops/s and bytes/s, coordinator EXPLAIN load, first bottleneck (from measured figures)", benchCapacityModel)
}

func benchCapacity(args []string) int {
	fs := flag.NewFlagSet("bench capacity", flag.ContinueOnError)
	var o bench.CapacityOptions
	self, _ := os.Executable()
	fs.StringVar(&o.Bin, "bin", self, "the prestroid binary run as the replica")
	fs.StringVar(&o.Trino, "trino", "http://127.0.0.1:8081", "real Trino coordinator URL")
	fs.StringVar(&o.Workloads, "workloads", "../shared/workloads", "directory with tpch/*.sql (docs/workloads.md)")
	fs.StringVar(&o.Scale, "scale", "tiny", "schema the templates are filled with")
	fs.IntVar(&o.Rounds, "rounds", 5, "passes over the 22 TPC-H templates in a measured pass")
	fs.IntVar(&o.Concurrency, "concurrency", 4, "concurrent clients")
	fs.StringVar(&o.RedisServer, "redis-server", envOr("PRESTROID_REDIS_SERVER", "redis-server"), "redis-server binary")
	fs.StringVar(&o.RedisBenchmark, "redis-benchmark", "redis-benchmark", "redis-benchmark binary for the ceiling (empty: not measured)")
	fs.StringVar(&o.Repo, "repo", ".", "repository root (the Lua scripts are read from it)")
	fs.StringVar(&o.ORTLib, "ort-lib", os.Getenv("PRESTROID_ORT_LIB"), "ONNX Runtime library for the replica")
	only := fs.String("only", "", "comma-separated phases to run (passthrough,text,text_learn,explain,history,cache,redis_admission,redis_rate_limit,redis_usage,redis_history,redis_history_text,redis_all,ceiling)")
	out := fs.String("out", "", "write the figures (JSON, internal/capacity's format) here")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if p, err := exec.LookPath(o.RedisServer); err == nil {
		o.RedisServer = p
	}
	if o.RedisBenchmark != "" {
		if p, err := exec.LookPath(o.RedisBenchmark); err == nil {
			o.RedisBenchmark = p
		}
	}
	o.Command = "prestroid bench capacity " + strings.Join(args, " ")
	f, err := bench.Capacity(os.Stdout, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench capacity:", err)
		return 1
	}
	if *out != "" {
		b, _ := json.MarshalIndent(f, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "prestroid bench capacity:", err)
			return 1
		}
		fmt.Println("figures written to", filepath.Clean(*out))
	}
	return 0
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// benchCapacityModel: capacity.Model for each rate, from the committed
// figures or --figures.
func benchCapacityModel(args []string) int {
	fs := flag.NewFlagSet("bench capacity-model", flag.ContinueOnError)
	figures := fs.String("figures", "", "figures written by `prestroid bench capacity --out` (default: the committed internal/capacity/measured.json)")
	rates := fs.String("rates", "1000,10000,50000", "fleet rates, statements per second")
	mix := fs.String("mix", capacity.DefaultMix, "share of each decision path: "+strings.Join(capacity.MixPaths, ", "))
	features := fs.String("features", strings.Join(capacity.DefaultFeatures, ","), "shared features in Redis: admission, rate_limit, usage, history")
	var s capacity.Scenario
	fs.Float64Var(&s.CoresPerReplica, "cores", 2, "cores per replica")
	fs.Float64Var(&s.TargetUtil, "target-util", 0.6, "planned CPU utilisation of a replica")
	fs.Float64Var(&s.RedisTargetUtil, "redis-target-util", 0.7, "planned utilisation of one Redis' command thread")
	redises := fs.String("redis", "", `features on Redis instances of their own: "history,usage" (two more) or "admission+rate_limit,history"; the rest share one`)
	fs.IntVar(&s.ExplainConcurrency, "explain-concurrency", 16, "estimator.explain_concurrency: EXPLAINs in flight per cluster")
	fs.IntVar(&s.Clusters, "clusters", 1, "clusters planning the EXPLAINs")
	explainMs := fs.Float64("explain-ms", 0, "one EXPLAIN's wall time on the coordinator in ms (default: the measured one)")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	f, err := capacity.Measured()
	if *figures != "" {
		f, err = capacity.Load(*figures)
	}
	if err == nil {
		s.Mix, err = capacity.ParseMix(*mix)
	}
	var rs []float64
	for _, r := range strings.Split(*rates, ",") {
		v, e := strconv.ParseFloat(strings.TrimSpace(r), 64)
		if e != nil || v <= 0 {
			err = fmt.Errorf("bad rate %q", r)
		}
		rs = append(rs, v)
	}
	s.ExplainWall = *explainMs / 1000
	if *redises != "" {
		s.Redises = strings.Split(*redises, ",")
	}
	if *features != "" {
		s.Features = strings.Split(*features, ",")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench capacity-model:", err)
		return 2
	}
	if err := capacity.Report(os.Stdout, f, s, rs); err != nil {
		fmt.Fprintln(os.Stderr, "prestroid bench capacity-model:", err)
		return 1
	}
	return 0
}
