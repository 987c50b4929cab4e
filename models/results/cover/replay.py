"""Replay the interval calibration (estimator/cover.go) on recorded served runs.

`prestroid bench served --runs-out` records, per execution, the stage that answered, the 80% interval
served and the actual CPU time. Runs of a build that served each stage's own interval (before the
calibration) can be replayed under any step rule: c starts at 1 per run and stage, each execution's
interval is the recorded one times c, and c moves by step(n)·(miss − 0.2) after it. The calibration
never changes a decision when it narrows (deciding), so the replay is exact for c ≤ 1 and approximate
beyond. Prints, per rule, each stage's coverage of the scored (not warm-up) executions.

    python models/results/cover/replay.py RUNS.jsonl[.gz] ...
"""
import collections
import gzip
import json
import math
import sys

Z = 1.2815515655446004  # the standard normal's 90% quantile
BOUND = math.log(4)

RULES = {
    "as computed": lambda n: 0.0,
    "3/(n+5), >= 0.03": lambda n: max(0.03, 3 / (n + 5)),
    "1/(n+10), >= 0.03 (shipped)": lambda n: max(0.03, 1 / (n + 10)),
    "0.03": lambda n: 0.03,
}


def rows(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [json.loads(line) for line in f]


def replay(runs, step):
    cov = collections.defaultdict(lambda: [0, 0])
    for run in runs:
        state = {}
        for r in run:
            if not r["hi"] > r["lo"] > 0:
                continue
            n, lnc = state.get(r["source"], (0, 0.0))
            sigma = math.log(r["hi"] / r["lo"]) / (2 * Z)
            median = math.sqrt(r["hi"] * r["lo"])
            miss = abs(math.log(max(r["actual"], 0.001) / median)) > Z * sigma * math.exp(lnc)
            if r["kind"] != "warm-up":
                cov[r["source"]][0] += not miss
                cov[r["source"]][1] += 1
            n += 1
            state[r["source"]] = (n, max(min(lnc + step(n) * (miss - 0.2), BOUND), -BOUND))
    return cov


def main():
    runs = [rows(p) for p in sys.argv[1:]]
    for name, step in RULES.items():
        cov = replay(runs, step)
        print(f"{name:30s}", "  ".join(f"{k} {h / n:.3f} ({n})" for k, (h, n) in sorted(cov.items())))


if __name__ == "__main__":
    main()
