"""Replay `prestroid bench served` runs offline under other blends.

Each run file (`--runs-out`, one JSON line per execution, gzipped or not)
records, per execution, the served estimate (`est`), the plain model's
number (`model`), the calibrated optimizer's (`optimizer`, fitted
prequentially by the bench), the source that served it and the CPU time it
took (`actual`). For the executions the model stage served without
residuals of their own (source `model`) with both numbers, this scores,
against the actual CPU time:

- served: what the proxy served (the precision-weighted blend, in the runs
  committed before the blend line);
- model, optimizer: either number alone;
- line: the blend line, fitted prequentially on the run's earlier such
  executions (ln actual - ln model on ln optimizer - ln model through the
  origin, the slope held to [0, 1]: the optimizer's weight) once `min_fit`
  of them finished, the served number before.

    python -m trainer.served [--all] [--min-fit 10] RUN.runs.jsonl.gz ...

prints the median / p90 q-error of each per run and pooled, for first
sights (new shape, new literals) of at least 1 s CPU, or all of them with
`--all`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
from dataclasses import dataclass, field


def qerror(est: float, actual: float) -> float:
    return math.exp(abs(math.log(est / actual)))


def quantile(xs: list[float], p: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    if not xs:
        return math.nan
    s = sorted(xs)
    k = (len(s) - 1) * p
    lo = math.floor(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


@dataclass
class Line:
    """Least-squares line of y on x through the origin, the slope held to [0, 1]."""

    n: int = 0
    sxx: float = 0.0
    sxy: float = 0.0

    def add(self, x: float, y: float) -> None:
        self.n += 1
        self.sxx += x * x
        self.sxy += x * y

    def predict(self, x: float) -> float | None:
        if self.n < 2 or self.sxx <= 1e-12:
            return None
        return min(max(self.sxy / self.sxx, 0.0), 1.0) * x


@dataclass
class Scores:
    q: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, v: float) -> None:
        self.q.setdefault(name, []).append(v)

    def extend(self, other: "Scores") -> None:
        for k, v in other.q.items():
            self.q.setdefault(k, []).extend(v)


NAMES = ("served", "model", "optimizer", "line")


def replay(executions: list[dict], *, all_sizes: bool = False, min_fit: int = 10) -> Scores:
    """Scores one run's executions in their order (pass, then statement)."""
    out = Scores()
    line = Line()
    for x in sorted(executions, key=lambda r: (r.get("pass", 0), r.get("stmt", 0))):
        m, o, a, e = (x.get(k) or 0 for k in ("model", "optimizer", "actual", "est"))
        if x.get("source") != "model" or not (m > 0 and o > 0 and a > 0 and e > 0):
            continue
        dx, dy = math.log(o) - math.log(m), math.log(a) - math.log(m)
        if x.get("kind") != "repeat" and (all_sizes or a >= 1):
            out.add("served", qerror(e, a))
            out.add("model", qerror(m, a))
            out.add("optimizer", qerror(o, a))
            y = line.predict(dx) if line.n >= min_fit else None
            out.add("line", qerror(math.exp(math.log(m) + y), a) if y is not None else qerror(e, a))
        line.add(dx, dy)
    return out


def read_runs(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return [json.loads(l) for l in f if l.strip()]


def row(label: str, s: Scores) -> str:
    n = len(s.q.get("served", []))
    cells = "  ".join(f"{k} {quantile(s.q.get(k, []), 0.5):.2f}/{quantile(s.q.get(k, []), 0.9):.2f}" for k in NAMES)
    return f"{label:28s} n={n:4d}  {cells}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--all", action="store_true", help="every first sight, not only those of at least 1 s CPU")
    ap.add_argument("--min-fit", type=int, default=10, help="executions the line needs before it serves")
    args = ap.parse_args(argv)
    pooled = Scores()
    for p in args.runs:
        s = replay(read_runs(p), all_sizes=args.all, min_fit=args.min_fit)
        pooled.extend(s)
        print(row(p.rsplit("/", 1)[-1].removesuffix(".runs.jsonl.gz"), s))
    print(row("pooled", pooled))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
