"""Metrics shared by training and evaluation (docs/design.md §3).

All take ln(CPU seconds) arrays: y (actual) and p (predicted), plus the
normalization (lo, hi) of the training set.
"""
import numpy as np

QUANTILES = (50, 90, 95, 99)


def normalize(ln, lo, hi):
    return (np.asarray(ln, np.float64) - lo) / (hi - lo)


# The bundle's target transforms (BUNDLE.md) and the range of the
# normalized output each keeps: a sigmoid model's [0, 1], and for a model
# that extrapolates (a cost anchor) half the training range beyond either end.
TRANSFORMS = {"ln_cpu_seconds_minmax": (0.0, 1.0), "ln_cpu_seconds_minmax_open": (-0.5, 1.5)}


def transform(anchored):
    """The target transform of a model: a cost-anchored one's output is not
    bounded by a sigmoid, so it keeps the wider range."""
    return "ln_cpu_seconds_minmax_open" if anchored else "ln_cpu_seconds_minmax"


def denormalize(y, lo, hi, clip=True, transform="ln_cpu_seconds_minmax"):
    y = np.asarray(y, np.float64)
    if clip:
        y = np.clip(y, *TRANSFORMS[transform])
    return lo + y * (hi - lo)


def qerrors(y, p):
    """max(pred/actual, actual/pred) on CPU seconds = exp(|ln p - ln y|)."""
    return np.exp(np.abs(np.asarray(p, np.float64) - np.asarray(y, np.float64)))


def metrics(y, p, lo, hi):
    """The metric object of one model on one set of queries."""
    y, p = np.asarray(y, np.float64), np.asarray(p, np.float64)
    n = len(y)
    if n == 0:
        return {"n": 0}
    q = qerrors(y, p)
    cy, cp = np.exp(y), np.exp(p)                   # CPU seconds
    over = np.clip(cp - cy, 0, None).sum() / cy.sum()
    under = np.clip(cy - cp, 0, None).sum() / cy.sum()
    r = float(np.corrcoef(y, p)[0, 1]) if n > 1 and np.std(p) > 0 and np.std(y) > 0 else float("nan")
    out = {
        "n": n,
        # the paper's metric: MSE on the min-max normalized ln target
        "mse": float(np.mean((normalize(p, lo, hi) - normalize(y, lo, hi)) ** 2)),
    }
    for k in QUANTILES:
        out[f"qerror_p{k}"] = float(np.percentile(q, k))
    out["qerror_max"] = float(q.max())
    out["pearson_r"] = r                            # on ln(CPU seconds)
    # resource-allocation view: CPU over-/under-provisioned, as shares of
    # the actual total CPU, and the shares of queries that were over/under
    out["over_provisioned_cpu"] = float(over)
    out["under_provisioned_cpu"] = float(under)
    out["over_provisioned_queries"] = float(np.mean(cp > cy))
    out["under_provisioned_queries"] = float(np.mean(cp < cy))
    return out


def clean(obj):
    """JSON-safe: NaN/inf -> None."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj
