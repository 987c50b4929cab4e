"""Replay the interval calibration (estimator/cover.go) on recorded served runs.

`prestroid bench served --runs-out` records, per execution, the stage that answered, the 80% interval
served and the actual CPU time. Runs of a build that served each stage's own interval (before the
calibration) can be replayed under any step rule: c starts at 1 per run and stage, each execution's
interval is the recorded one times c, and c moves by step(n)·(miss − 0.2) after it. With a shared
factor (as shipped: history and model+residual share one, estimator/cover.go), a stage's c is its own
factor times the shared one, and both step by the same miss, the shared one counting the outcomes of
every stage that shares it. The calibration never changes a decision when it narrows (deciding), so
the replay is exact for c ≤ 1 and approximate beyond. Prints, per rule, each stage's coverage of the
scored (not warm-up) executions.

    python models/results/cover/replay.py RUNS.jsonl[.gz] ...
"""
import collections
import gzip
import json
import math
import sys

Z = 1.2815515655446004  # the standard normal's 90% quantile
BOUND = math.log(4)

SHIPPED = lambda n: max(0.03, 1 / (n + 10))
LOCAL = {"history", "model+residual"}

# name: (step of each stage's own factor, step of the shared factor, the stages sharing it)
RULES = {
    "as computed": (lambda n: 0.0, None, set()),
    "3/(n+5), >= 0.03": (lambda n: max(0.03, 3 / (n + 5)), None, set()),
    "1/(n+10), >= 0.03": (SHIPPED, None, set()),
    "0.03": (lambda n: 0.03, None, set()),
    "1/(n+10), shared history+m+r (shipped)": (SHIPPED, SHIPPED, LOCAL),
    "1/(n+10), shared history+m+r+text": (SHIPPED, SHIPPED, LOCAL | {"text"}),
    "1/(n+10), shared by all four": (SHIPPED, SHIPPED, LOCAL | {"text", "model"}),
}


def rows(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [json.loads(line) for line in f]


def replay(runs, step, shared_step=None, sharing=frozenset()):
    cov = collections.defaultdict(lambda: [0, 0])
    for run in runs:
        state, shared = {}, (0, 0.0)
        for r in run:
            if not r["hi"] > r["lo"] > 0:
                continue
            src = r["source"]
            n, lnc = state.get(src, (0, 0.0))
            lns = shared[1] if src in sharing else 0.0
            sigma = math.log(r["hi"] / r["lo"]) / (2 * Z)
            median = math.sqrt(r["hi"] * r["lo"])
            c = math.exp(max(min(lnc + lns, BOUND), -BOUND))
            miss = abs(math.log(max(r["actual"], 0.001) / median)) > Z * sigma * c
            if r["kind"] != "warm-up":
                cov[src][0] += not miss
                cov[src][1] += 1
            n += 1
            state[src] = (n, max(min(lnc + step(n) * (miss - 0.2), BOUND), -BOUND))
            if src in sharing:
                m = shared[0] + 1
                shared = (m, max(min(lns + shared_step(m) * (miss - 0.2), BOUND), -BOUND))
    return cov


def main():
    runs = [rows(p) for p in sys.argv[1:]]
    for name, (step, shared_step, sharing) in RULES.items():
        cov = replay(runs, step, shared_step, sharing)
        print(f"{name:40s}", "  ".join(f"{k} {h / n:.3f} ({n})" for k, (h, n) in sorted(cov.items())))


if __name__ == "__main__":
    main()
