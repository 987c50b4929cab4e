"""Replay the model stage's interval calibration with statements of new families told apart.

On recorded served runs (`prestroid bench served --runs-out`, builds before the novelty section), the
model stage's answers are replayed under estimator/cover.go's factor (c starts at 1 per run, each
interval is the recorded one times c, c steps by 1/(n+10), at least 0.03, times (miss - 0.2)), with a
statement counted as of a new family when it is a held-out template's or a generated one's (the
generators draw new SQL per variant; the warm-up's TPC templates are the model's training families):

- "one factor": as shipped before;
- "a second factor for new families": c = c_model * c_new, c_new stepped by new families' outcomes only
  (the deployment learning the gap itself);
- "widen W": new families' σ times W before the factor (the bundle's novelty.widen), one factor for all.

Prints the model stage's coverage of the warm-up, of the held-out TPC and generated templates, and of
all held-out statements.

    python models/results/cover/novelty.py RUNS.jsonl[.gz] ...
"""
import collections
import math
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import replay  # noqa: E402

Z, BOUND, STEP = replay.Z, replay.BOUND, replay.SHIPPED


def new_family(r):
    return r["kind"] != "warm-up" or r["template"].startswith("gen/")


def run(runs, widen=1.0, second=False):
    cov = collections.defaultdict(lambda: [0, 0])
    for rows in runs:
        own, new = (0, 0.0), (0, 0.0)
        for r in rows:
            if r["source"] != "model" or not r["hi"] > r["lo"] > 0:
                continue
            novel = new_family(r)
            ln = own[1] + (new[1] if novel and second else 0.0)
            sigma = math.log(r["hi"] / r["lo"]) / (2 * Z) * (widen if novel else 1.0)
            median = math.sqrt(r["hi"] * r["lo"])
            miss = abs(math.log(max(r["actual"], 0.001) / median)) > Z * sigma * math.exp(max(min(ln, BOUND), -BOUND))
            if r["kind"] == "warm-up":
                keys = ["warm-up"]
            else:
                keys = ["held-out", "held-out gen" if r["template"].startswith("gen/") else "held-out tpc"]
            for k in keys:
                cov[k][0] += not miss
                cov[k][1] += 1
            n = own[0] + 1
            own = (n, max(min(own[1] + STEP(n) * (miss - 0.2), BOUND), -BOUND))
            if novel and second:
                m = new[0] + 1
                new = (m, max(min(new[1] + STEP(m) * (miss - 0.2), BOUND), -BOUND))
    return cov


def main():
    runs = [replay.rows(p) for p in sys.argv[1:]]
    rules = [("one factor", {}), ("a second factor for new families", {"second": True})]
    rules += [(f"widen {w}", {"widen": w}) for w in (1.1, 1.17, 1.2, 1.3)]
    for name, kw in rules:
        cov = run(runs, **kw)
        print(f"{name:34s}", "  ".join(f"{k} {h / n:.3f} ({n})" for k, (h, n) in sorted(cov.items())))


if __name__ == "__main__":
    main()
