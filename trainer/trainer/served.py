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

    python -m trainer.served --pooled [--classes 2,20] RUN.runs.jsonl.gz ...

prints what the served estimate achieved over all the runs together, each
figure with a 90% interval for the sampling noise (a run scores 20-30
first sights of at least 1 s, so one run's p90 is its second or third
worst): q-error median and p90 of first sights (all, and of at least 1 s
CPU; percentile bootstrap) and of repeats, the served estimate and the
bench's calibrated optimizer on the same first sights, each source's 80%
interval coverage (Wilson interval), the share of executions routed to a
class too small for their CPU (class bounds as the bench's --classes), the
share of first sights explained on the hot path and the decision's median.

    python -m trainer.served --paired RUN.runs.jsonl.gz ...

scores a paired run's two proxies (`bench served --versus-model`: the first
proxy's executions in RUN, the second's in RUN.versus..., matched by pass
and statement) on the same statements over all the runs together: each
estimate against the pair's geometric mean CPU, so that neither gains from
the order it ran in; median and p90 of each, with a 90% interval for the
difference of the two (a paired bootstrap: the same statements drawn for
both), and the share where the first proxy is nearer.

    python -m trainer.served --pooled --session enable_dynamic_filtering=false RUN...
    python -m trainer.served --pooled --not-session enable_dynamic_filtering=false RUN...

keeps only the executions whose statement ran with (or without) that
session property set to that value (each flag may repeat; all must hold),
from the `session` field that bench served writes since it records the
statements' sessions (a run without any is warned about: its statements
count as run in Trino's default session). With --pooled or --paired only:
the blend line's replay fits on every execution of a run.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
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


def bootstrap(xs: list[float], p: float, *, draws: int = 2000, seed: int = 1) -> tuple[float, float]:
    """The 90% percentile-bootstrap interval of the p quantile of xs."""
    if not xs:
        return math.nan, math.nan
    rng = random.Random(seed)
    qs = sorted(quantile([rng.choice(xs) for _ in xs], p) for _ in range(draws))
    return qs[int(0.05 * draws)], qs[int(0.95 * draws) - 1]


def wilson(k: int, n: int, z: float = 1.645) -> tuple[float, float]:
    """The 90% Wilson interval of a share of k in n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return c - h, c + h


def pool(runs: list[list[dict]], bounds: list[float]) -> dict:
    """The served figures over every run's scored executions together."""
    q: dict[str, list[float]] = {"first sight": [], "first sight >= 1 s": [], "repeat": []}
    vs: list[tuple[float, float]] = []
    cover: dict[str, list[int]] = {}
    small = total = explained = 0
    decide: list[float] = []
    for executions in runs:
        for x in executions:
            if x.get("kind") == "warm-up" or not x.get("source"):
                continue
            a, e = x["actual"], x["est"]
            err = qerror(max(e, 0.001), a)
            total += 1
            if x["kind"] == "repeat":
                q["repeat"].append(err)
            else:
                q["first sight"].append(err)
                explained += bool(x.get("explained"))
                if a >= 1:
                    q["first sight >= 1 s"].append(err)
                if (x.get("opt") or 0) > 0:
                    vs.append((err, qerror(x["opt"], a)))
            decide.append(x.get("decide_ms") or 0.0)
            c = cover.setdefault(x["source"], [0, 0])
            c[0] += x["lo"] <= a <= x["hi"]
            c[1] += 1
            cls = x.get("class", -1)
            small += 0 <= cls < len(bounds) and bounds[cls] < a
    out: dict = {"executions": total, "q": {}, "coverage": {}}
    for k, xs in q.items():
        out["q"][k] = {"n": len(xs), "median": quantile(xs, 0.5), "median_90ci": bootstrap(xs, 0.5),
                       "p90": quantile(xs, 0.9), "p90_90ci": bootstrap(xs, 0.9)}
    served, opt = [a for a, _ in vs], [b for _, b in vs]
    out["vs_optimizer"] = {"n": len(vs), "served": (quantile(served, 0.5), quantile(served, 0.9)),
                           "optimizer": (quantile(opt, 0.5), quantile(opt, 0.9))}
    for src, (k, n) in sorted(cover.items()):
        out["coverage"][src] = {"n": n, "share": k / n, "share_90ci": wilson(k, n)}
    out["too_small"] = {"n": total, "share": small / total if total else math.nan, "share_90ci": wilson(small, total)}
    n1 = len(q["first sight"])
    out["explained_first_sights"] = explained / n1 if n1 else math.nan
    out["decision_p50_ms"] = quantile(decide, 0.5)
    return out


def print_pooled(p: dict) -> None:
    print(f"{p['executions']} executions")
    for k, r in p["q"].items():
        print(f"{k:20s} n={r['n']:4d}  median {r['median']:.2f} [{r['median_90ci'][0]:.2f}, {r['median_90ci'][1]:.2f}]"
              f"  p90 {r['p90']:.2f} [{r['p90_90ci'][0]:.2f}, {r['p90_90ci'][1]:.2f}]")
    v = p["vs_optimizer"]
    print(f"first sights with a calibrated optimizer number (n={v['n']}): served {v['served'][0]:.2f} / {v['served'][1]:.2f},"
          f" optimizer {v['optimizer'][0]:.2f} / {v['optimizer'][1]:.2f}")
    for src, c in p["coverage"].items():
        print(f"80% coverage {src:15s} {100 * c['share']:3.0f}% [{100 * c['share_90ci'][0]:.0f}, {100 * c['share_90ci'][1]:.0f}] (n={c['n']})")
    t = p["too_small"]
    print(f"too-small class {100 * t['share']:.1f}% [{100 * t['share_90ci'][0]:.1f}, {100 * t['share_90ci'][1]:.1f}] (n={t['n']})")
    print(f"first sights explained on the hot path {100 * p['explained_first_sights']:.0f}%; decision p50 {p['decision_p50_ms']:.2f} ms")


def versus_path(path: str) -> str:
    """The second proxy's runs beside path (bench served --versus-model):
    ".versus" after the name's stem, x.runs.jsonl.gz -> x.versus.runs.jsonl.gz."""
    head, sep, base = path.rpartition("/")
    stem, dot, rest = base.partition(".")
    return head + sep + stem + ".versus" + dot + rest


def pairs_of(a: list[dict], b: list[dict]) -> list[tuple[dict, dict]]:
    """The scored executions a and b share (pass and statement)."""
    bs = {(x["pass"], x["stmt"]): x for x in b if x.get("kind") != "warm-up"}
    return [(x, bs[(x["pass"], x["stmt"])]) for x in a if x.get("kind") != "warm-up" and (x["pass"], x["stmt"]) in bs]


def paired(runs: list[tuple[list[dict], list[dict]]], *, draws: int = 2000, seed: int = 1) -> dict:
    """The two proxies of paired runs on their shared executions, per group:
    q-errors against the pair's geometric mean CPU, median and p90 of each,
    the 90% paired-bootstrap interval of b's minus a's, a's share nearer."""
    groups: dict[str, list[tuple[float, float]]] = {"first sight": [], "first sight >= 1 s": [], "repeat": []}
    order: list[float] = []
    for a, b in runs:
        for x, y in pairs_of(a, b):
            m = math.sqrt(max(x["actual"], 0.001) * max(y["actual"], 0.001))
            e = (qerror(max(x["est"], 0.001), m), qerror(max(y["est"], 0.001), m))
            if x["kind"] == "repeat":
                groups["repeat"].append(e)
                continue
            groups["first sight"].append(e)
            if m >= 1:
                groups["first sight >= 1 s"].append(e)
            if "first" in x:
                f, g = (x, y) if x["first"] else (y, x)
                order.append(max(f["actual"], 0.001) / max(g["actual"], 0.001))
    out: dict = {"groups": {}, "first_over_second_median": quantile(order, 0.5), "first_sights_ordered": len(order)}
    rng = random.Random(seed)
    for k, es in groups.items():
        r: dict = {"n": len(es)}
        for p, name in ((0.5, "median"), (0.9, "p90")):
            diffs = []
            for _ in range(draws if es else 0):
                d = [rng.choice(es) for _ in es]
                diffs.append(quantile([e[1] for e in d], p) - quantile([e[0] for e in d], p))
            diffs.sort()
            ci = (diffs[int(0.05 * draws)], diffs[int(0.95 * draws) - 1]) if diffs else (math.nan, math.nan)
            r[name] = {"a": quantile([e[0] for e in es], p), "b": quantile([e[1] for e in es], p), "b_minus_a_90ci": ci}
        closer = sum(e[0] < e[1] for e in es)
        r["a_closer"], r["a_closer_90ci"] = (closer / len(es) if es else math.nan), wilson(closer, len(es))
        out["groups"][k] = r
    return out


def print_paired(p: dict) -> None:
    print("a and b on the same statements, each against the pair's geometric mean CPU:")
    for k, r in p["groups"].items():
        cells = "  ".join(f"{name} a {r[name]['a']:.2f} b {r[name]['b']:.2f} (b - a [{r[name]['b_minus_a_90ci'][0]:+.2f}, "
                          f"{r[name]['b_minus_a_90ci'][1]:+.2f}])" for name in ("median", "p90"))
        print(f"{k:20s} n={r['n']:4d}  {cells}  a nearer {100 * r['a_closer']:.0f}% "
              f"[{100 * r['a_closer_90ci'][0]:.0f}, {100 * r['a_closer_90ci'][1]:.0f}]")
    print(f"first sights' CPU, the execution that ran first over the other's: median {p['first_over_second_median']:.2f} "
          f"(n={p['first_sights_ordered']})")


def session_filter(want: list[str], refuse: list[str]):
    """A predicate on executions: every NAME=VALUE of want set in the
    execution's session, none of refuse's; warm-ups always pass (the
    scores skip them, and a replay's fits need them)."""
    def pairs(specs: list[str]) -> list[tuple[str, str]]:
        out = []
        for spec in specs:
            name, eq, value = spec.partition("=")
            if not eq or not name:
                raise ValueError(f"session filter {spec!r}: want NAME=VALUE")
            out.append((name, value))
        return out
    w, r = pairs(want), pairs(refuse)

    def keep(x: dict) -> bool:
        if x.get("kind") == "warm-up":
            return True
        s = x.get("session") or {}
        return all(s.get(k) == v for k, v in w) and not any(s.get(k) == v for k, v in r)
    return keep


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
    ap.add_argument("--pooled", action="store_true", help="the served figures over all the runs together, with 90%% intervals")
    ap.add_argument("--classes", default="2,20", help="the runs' class bounds in CPU seconds (bench served --classes)")
    ap.add_argument("--paired", action="store_true", help="paired runs (bench served --versus-model): the two proxies on the same statements")
    ap.add_argument("--session", action="append", default=[], metavar="NAME=VALUE",
                    help="only statements run with this session property (--pooled, --paired; may repeat)")
    ap.add_argument("--not-session", action="append", default=[], metavar="NAME=VALUE",
                    help="only statements run without this session property (--pooled, --paired; may repeat)")
    args = ap.parse_args(argv)
    filtered = bool(args.session or args.not_session)
    if filtered and not (args.pooled or args.paired):
        ap.error("--session and --not-session go with --pooled or --paired")
    try:
        keep = session_filter(args.session, args.not_session)
    except ValueError as e:
        ap.error(str(e))

    def load(path: str) -> list[dict]:
        xs = read_runs(path)
        if filtered and not any("session" in x for x in xs):
            print(f"warning: {path} records no session: every statement counts as run in Trino's default session",
                  file=sys.stderr)
        return [x for x in xs if keep(x)]
    if args.paired:
        print_paired(paired([(load(p), load(versus_path(p))) for p in args.runs]))
        return 0
    if args.pooled:
        print_pooled(pool([load(p) for p in args.runs], [float(b) for b in args.classes.split(",")]))
        return 0
    pooled = Scores()
    for p in args.runs:
        s = replay(read_runs(p), all_sizes=args.all, min_fit=args.min_fit)
        pooled.extend(s)
        print(row(p.rsplit("/", 1)[-1].removesuffix(".runs.jsonl.gz"), s))
    print(row("pooled", pooled))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
