"""How much wider the plan model errs off the families it was trained on
(estimator/BUNDLE.md, "Novelty"; estimator/novelty.go).

The serving side gives the plain model's estimate one spread whatever the
statement; a statement of a template the model never trained on is missed
by more than another literal of one it did. This step scores the bundle's
model.onnx (the graph served: a single network, a gated ensemble, with
targets or without) on the workdir's training and validation tensors and
writes into the bundle's manifest

    "novelty": {"file": "families.txt", "families": N, "widen": W,
                "quantile": 0.8, "validation": {...}}

with W the ratio of the 80% quantile of |ln actual - ln predicted| on the
validation templates to that on the training statements (at least 1, at
most 4): the factor that makes an interval as wide, in quantiles of its
own errors, on a new family as on a trained one. The validation templates
are the ones early stopping read, never the test templates the served
evaluation scores (models/README.md). families.txt, the FamilyID of every
training statement, is written by the Go side of the step before this
runs (training/novelty.go: the key is Go code, as serving computes it).

    python -m trainer.novelty --workdir W --bundle B --families N
"""
import argparse
import json
import os

import numpy as np

from .metrics import denormalize
from .train import onnx_predict

QUANTILE = 0.8
MAX_WIDEN = 4.0


def abs_errors(bundle, tgt, workdir, part, target):
    """|ln actual - ln predicted| of the bundle's CPU output (its manifest's
    target tgt) on a part of the workdir (its target.json: target)."""
    with np.load(os.path.join(workdir, f"{part}.npz")) as z:
        z = dict(z)
    pred = denormalize(onnx_predict(os.path.join(bundle, "model.onnx"), z), tgt["min"], tgt["max"],
                       transform=tgt["transform"])
    actual = target["min"] + z["target"].astype(np.float64) * (target["max"] - target["min"])
    return np.abs(actual - pred)


def fit(train_err, val_err, q=QUANTILE):
    """The widening factor and what it was fitted from."""
    qt, qv = float(np.quantile(train_err, q)), float(np.quantile(val_err, q))
    widen = min(max(qv / qt, 1.0), MAX_WIDEN) if qt > 0 else 1.0
    return widen, {"train": {"n": int(len(train_err)), "abs_error_q": qt},
                   "val": {"n": int(len(val_err)), "abs_error_q": qv}, "ratio": qv / qt if qt > 0 else None}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--families", type=int, required=True, help="how many families.txt holds")
    a = ap.parse_args(argv)
    with open(os.path.join(a.workdir, "target.json")) as f:
        target = json.load(f)
    path = os.path.join(a.bundle, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    tr, va = (abs_errors(a.bundle, manifest["target"], a.workdir, p, target) for p in ("train", "val"))
    if len(tr) == 0 or len(va) == 0:
        raise SystemExit("novelty: the workdir needs training and validation tensors")
    widen, validation = fit(tr, va)
    manifest["novelty"] = {"file": "families.txt", "families": a.families, "widen": widen,
                           "quantile": QUANTILE, "validation": validation}
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)
    print(f"novelty: widen {widen:.3f} (80% |ln error| validation {validation['val']['abs_error_q']:.3f}, "
          f"training {validation['train']['abs_error_q']:.3f}; {a.families} families)", flush=True)


if __name__ == "__main__":
    main()
