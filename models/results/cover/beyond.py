"""Pool the peak memory and elapsed time that `prestroid bench served` scored, over several runs.

Each `--runs-out` line carries the served median and 80% interval of each target beyond the CPU time
(`mem`, `mem_lo`, `mem_hi`; `elapsed`, ...; 0 when not served) and what Trino reported (`actual_mem`,
`actual_elapsed`). Prints, for the runs given (a) and their `.versus` runs (b) separately, each
target's 80% coverage with a 95% Wilson interval and the median and p90 q-error, over all scored
(not warm-up) executions, first sights, repeats and per serving source.

    python models/results/cover/beyond.py RUNS.runs.jsonl[.gz] ... RUNS.versus.runs.jsonl[.gz] ...
"""
import collections
import gzip
import json
import math
import sys


def rows(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [json.loads(line) for line in f]


def wilson(hits, n, z=1.96):
    p = hits / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    w = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - w, c + w


def pooled(paths, target):
    cover, q = collections.defaultdict(lambda: [0, 0]), collections.defaultdict(list)
    for path in paths:
        for r in rows(path):
            est, lo, hi, actual = (r.get(target, 0), r.get(target + "_lo", 0), r.get(target + "_hi", 0),
                                   r.get("actual_" + target, 0))
            if r["kind"] == "warm-up" or not (est > 0 and actual > 0):
                continue
            for group in ("all", "first sight" if r["kind"] != "repeat" else "repeat", r["source"]):
                cover[group][0] += lo <= actual <= hi
                cover[group][1] += 1
                q[group].append(max(est / actual, actual / est))
    return cover, q


def main():
    sides = [("a", [p for p in sys.argv[1:] if ".versus." not in p]),
             ("b", [p for p in sys.argv[1:] if ".versus." in p])]
    for side, paths in sides:
        if not paths:
            continue
        for target in ("mem", "elapsed"):
            cover, q = pooled(paths, target)
            print(side, target)
            for group in ("all", "first sight", "repeat", "history", "text", "model", "model+residual", "optimizer"):
                hits, n = cover[group]
                if n == 0:
                    continue
                lo, hi = wilson(hits, n)
                qs = sorted(q[group])
                print(f"  {group:15s} coverage {100 * hits / n:3.0f}% [{100 * lo:.0f}, {100 * hi:.0f}]"
                      f"  q50 {qs[n // 2]:.2f}  p90 {qs[int(0.9 * n)]:.2f}  (n {n})")


if __name__ == "__main__":
    main()
