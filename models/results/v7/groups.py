"""The plan model on the template split's test queries per storage, scale and
dynamic filtering (on / off), several bundles side by side on the queries
they all predict (models/README.md, "Model v7: the dynamic filters read,
trained with the statements run without them").

    python groups.py NAME=WORKDIR:BUNDLE[+BUNDLE...] ...

WORKDIR is the workdir of the featurization the bundle was trained on (its
test.npz, test.keys.txt, queries.jsonl), or a `prestroid eval` workdir
(REPORT/work) for a bundle evaluated on other records. Prints the q-error
median / p90 per group. Run from trainer/.
"""
import collections
import json
import os
import sys

import numpy as np
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))
from dynamic_filter_split import predictions, without_df
def load(workdir, bundles):
    ps=[predictions(workdir,b) for b in bundles]
    return {k: sum(p[k] for p in ps)/len(ps) for k in ps[0]}
specs = [a.split("=",1) for a in sys.argv[1:]]
preds = {}
rows = {}
for name, spec in specs:
    w, b = spec.split(":")
    preds[name] = load(w, b.split("+"))
    for r in map(json.loads, open(w+"/queries.jsonl")):
        if r["key"] in preds[name]: rows[r["key"]] = r
keys = [k for k in rows if all(k in p for p in preds.values())]
groups = collections.defaultdict(list)
for k in keys:
    r = rows[k]
    df = "off" if without_df(r) else "on"
    groups[(r["storage"], r["scale"], df)].append(k)
    groups[("ALL", "", "")].append(k)
for g in sorted(groups):
    ks = groups[g]
    y = np.array([rows[k]["ln_cpu_s"] for k in ks])
    out = []
    for name in preds:
        e = np.abs(np.array([preds[name][k] for k in ks]) - y)
        out.append(f"{name} {np.exp(np.median(e)):.2f}/{np.exp(np.percentile(e,90)):.2f}")
    print(g, len(ks), " | ".join(out))
