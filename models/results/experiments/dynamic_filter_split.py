"""The plan model on the template split's test queries, split by whether the
statement ran without dynamic filtering (models/README.md, "The plan model
reading the dynamic filters: tried, level").

    python dynamic_filter_split.py NAME=WORKDIR:BUNDLE[+BUNDLE...] ...

predicts each bundle on WORKDIR's test tensors (test.npz, test.keys.txt:
the featurization the bundle was trained on), averages several bundles'
ln predictions, and prints the q-error median / p90 of all test queries,
of those run without dynamic filtering (all, Iceberg, at least 1 s CPU)
and of Iceberg's with it, and the mean (and mean absolute) difference, per
template, scale and storage, of the ln residual without dynamic filtering
minus with it. Run from trainer/ (it imports the trainer package).
"""
import collections
import json
import sys

import numpy as np

from trainer.data import load_npz
from trainer.metrics import denormalize
from trainer.train import onnx_predict


def predictions(workdir, bundle):
    mf = json.load(open(bundle + "/manifest.json"))
    y = onnx_predict(bundle + "/model.onnx", load_npz(workdir + "/test.npz"))
    t = mf["target"]
    keys = open(workdir + "/test.keys.txt").read().split()
    return dict(zip(keys, denormalize(y, t["min"], t["max"], transform=t["transform"])))


def without_df(r):
    return (r.get("session") or {}).get("enable_dynamic_filtering") == "false"


def report(name, workdir, bundles):
    ps = [predictions(workdir, b) for b in bundles]
    pred = {k: sum(p[k] for p in ps) / len(ps) for k in ps[0]}
    rows = [r for r in map(json.loads, open(workdir + "/queries.jsonl")) if r["key"] in pred]
    y = np.array([r["ln_cpu_s"] for r in rows])
    e = np.abs(np.array([pred[r["key"]] for r in rows]) - y)
    off = np.array([without_df(r) for r in rows])
    ice = np.array([r["storage"] == "iceberg" for r in rows])

    def q(sel):
        return f"n {sel.sum()} {np.exp(np.median(e[sel])):.2f} / {np.exp(np.percentile(e[sel], 90)):.2f}"
    print(f"{name}: all {q(np.ones(len(e), bool))} | without DF {q(off)} | Iceberg {q(off & ice)} | "
          f">= 1 s {q(off & (y >= 0))} | Iceberg with DF {q(~off & ice)}")
    g = collections.defaultdict(lambda: ([], []))
    for r, d in zip(rows, off):
        g[(r["template"], r["scale"], r["storage"])][int(d)].append(r["ln_cpu_s"] - pred[r["key"]])
    gaps = [np.mean(b) - np.mean(a) for a, b in g.values() if a and b]
    print(f"  per template, scale and storage (n {len(gaps)}): ln residual without DF - with: "
          f"mean {np.mean(gaps):.2f}, mean |.| {np.mean(np.abs(gaps)):.2f}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        name, _, rest = arg.partition("=")
        workdir, _, bundles = rest.partition(":")
        report(name, workdir, bundles.split("+"))
