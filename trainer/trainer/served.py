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
class Plane:
    """Least-squares y on (x1, x2) through the origin, the weights held to
    w1, w2 >= 0 and w1 + w2 <= 1 (the optimizer's and the text stage's
    weights against the model's)."""

    n: int = 0
    s11: float = 0.0
    s12: float = 0.0
    s22: float = 0.0
    s1y: float = 0.0
    s2y: float = 0.0

    def add(self, x1: float, x2: float, y: float) -> None:
        self.n += 1
        self.s11 += x1 * x1
        self.s12 += x1 * x2
        self.s22 += x2 * x2
        self.s1y += x1 * y
        self.s2y += x2 * y

    def weights(self) -> tuple[float, float] | None:
        if self.n < 3:
            return None

        def sse(w1: float, w2: float) -> float:
            return w1 * w1 * self.s11 + 2 * w1 * w2 * self.s12 + w2 * w2 * self.s22 - 2 * w1 * self.s1y - 2 * w2 * self.s2y

        cands = [(0.0, 0.0)]
        det = self.s11 * self.s22 - self.s12 * self.s12
        if det > 1e-12:
            cands.append(((self.s22 * self.s1y - self.s12 * self.s2y) / det, (self.s11 * self.s2y - self.s12 * self.s1y) / det))
        if self.s11 > 1e-12:
            cands.append((self.s1y / self.s11, 0.0))
        if self.s22 > 1e-12:
            cands.append((0.0, self.s2y / self.s22))
        a, b = self.s11 - 2 * self.s12 + self.s22, self.s1y - self.s2y - self.s12 + self.s22
        if a > 1e-12:  # on w1 + w2 = 1
            w1 = b / a
            cands.append((w1, 1 - w1))
        ok = [(w1, w2) for w1, w2 in cands if w1 >= -1e-9 and w2 >= -1e-9 and w1 + w2 <= 1 + 1e-9]
        ok += [(1.0, 0.0), (0.0, 1.0)]
        return min(ok, key=lambda w: sse(*w))

    def predict(self, x1: float, x2: float) -> float | None:
        w = self.weights()
        return None if w is None else w[0] * x1 + w[1] * x2


@dataclass
class Scores:
    q: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, v: float) -> None:
        self.q.setdefault(name, []).append(v)

    def extend(self, other: "Scores") -> None:
        for k, v in other.q.items():
            self.q.setdefault(k, []).extend(v)


NAMES = ("served", "model", "optimizer", "line", "text", "plane")


def replay(executions: list[dict], *, all_sizes: bool = False, min_fit: int = 10) -> Scores:
    """Scores one run's executions in the order they ran: the file's, one pass
    after the other (the bench runs each pass's statements in a shuffled
    order; `stmt` is a statement's place in the workload, not its turn).
    Warm-up executions (pass -1) are learned from, not scored."""
    out = Scores()
    line, plane = Line(), Plane()
    for x in sorted(executions, key=lambda r: r.get("pass", 0)):
        m, o, a, e, t = (x.get(k) or 0 for k in ("model", "optimizer", "actual", "est", "text"))
        if x.get("source") != "model" or not (m > 0 and o > 0 and a > 0 and e > 0):
            continue
        dx, dy = math.log(o) - math.log(m), math.log(a) - math.log(m)
        dt = math.log(t) - math.log(m) if t > 0 else None
        if x.get("kind") not in ("repeat", "warm-up") and (all_sizes or a >= 1):
            out.add("served", qerror(e, a))
            out.add("model", qerror(m, a))
            out.add("optimizer", qerror(o, a))
            y = line.predict(dx) if line.n >= min_fit else None
            out.add("line", qerror(math.exp(math.log(m) + y), a) if y is not None else qerror(e, a))
            if dt is not None:
                out.add("text", qerror(t, a))
                z = plane.predict(dx, dt) if plane.n >= min_fit else None
                out.add("plane", qerror(math.exp(math.log(m) + z), a) if z is not None else qerror(e, a))
        line.add(dx, dy)
        if dt is not None:
            plane.add(dx, dt, dy)
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
