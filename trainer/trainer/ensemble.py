"""Average sub-tree bundles trained on the same tensors into one bundle.

    python -m trainer.ensemble --out DIR [--workdir W] BUNDLE BUNDLE...

The members must come from one featurization (the same workdir: N, K, C, Pf,
vocabularies, token vectors, target normalization and inputs) and differ
only in what training did with it (seeds, flags). The bundle's model.onnx is
one graph holding every member, y = Mean(y_1, ..., y_M): the Go side loads
it like any bundle (estimator/BUNDLE.md). Seeds alone move a member's test
MSE by up to 45% on our data (models/README.md); the mean of M members
removes most of that noise, for M times the inference arithmetic.

Checks: the ensemble's ONNX Runtime output on the golden cases equals the
mean of the members' PyTorch outputs there (each member's golden
"expected") within the bundle parity tolerance; with --workdir also the mean
of the members' ONNX Runtime outputs on the whole test split, and the
manifest's test metrics are the ensemble's.
"""
import argparse
import filecmp
import hashlib
import json
import os
import shutil
import sys
from datetime import datetime, timezone

import numpy as np

from .data import load_npz, read_keys
from .metrics import denormalize, metrics
from .train import PARITY_TOL, onnx_predict, swap_in_bundle

# Manifest fields every member must share: they define the model's input
# and output.
SHARED = ("kind", "N", "K", "C", "Pf", "slots", "tensor_format_version", "target", "global_pred_vector",
          "training_data_sha256", "inputs", "output")
VOCAB_FILES = ("ops.json", "tables.json", "tokens.vec")


def read_manifest(bundle):
    with open(os.path.join(bundle, "manifest.json")) as f:
        return json.load(f)


def check_members(bundles):
    """The members' manifests and vocabulary files agree; returns the manifests."""
    if len(bundles) < 2:
        raise ValueError("an ensemble needs at least two bundles")
    ms = [read_manifest(b) for b in bundles]
    for b, m in zip(bundles[1:], ms[1:]):
        for k in SHARED:
            if m.get(k) != ms[0].get(k):
                raise ValueError(f"{b}: manifest {k} {m.get(k)!r} differs from {bundles[0]}'s {ms[0].get(k)!r}")
        for name in VOCAB_FILES:
            if not filecmp.cmp(os.path.join(bundles[0], name), os.path.join(b, name), shallow=False):
                raise ValueError(f"{b}: {name} differs from {bundles[0]}'s (members must share one featurization)")
    if ms[0].get("kind") != "subtree":
        raise ValueError(f"{bundles[0]}: kind {ms[0].get('kind')!r}: only sub-tree bundles are averaged")
    return ms


def merge_onnx(paths, out_path):
    """One ONNX graph: every member under its own name prefix, the shared
    inputs, y = Mean of the members' outputs."""
    import onnx
    from onnx import compose, helper

    models = [onnx.load(p) for p in paths]
    first = models[0]
    out_name = first.graph.output[0].name
    nodes, inits, outs = [], [], []
    for i, m in enumerate(models):
        if [x.name for x in m.graph.input] != [x.name for x in first.graph.input]:
            raise ValueError(f"{paths[i]}: inputs differ from {paths[0]}'s")
        if list(m.opset_import) != list(first.opset_import):
            raise ValueError(f"{paths[i]}: opset differs from {paths[0]}'s")
        p = compose.add_prefix(m, f"m{i}_", rename_inputs=False)
        nodes.extend(p.graph.node)
        inits.extend(p.graph.initializer)
        outs.append(p.graph.output[0].name)
    nodes.append(helper.make_node("Mean", outs, [out_name], name="ensemble_mean"))
    graph = helper.make_graph(nodes, "prestroid_ensemble", list(first.graph.input), list(first.graph.output), inits)
    merged = helper.make_model(graph, opset_imports=list(first.opset_import), producer_name="prestroid-ensemble")
    merged.ir_version = first.ir_version
    onnx.checker.check_model(merged)
    onnx.save(merged, out_path)


def build(bundles, out, workdir=None, log=sys.stderr):
    """Write the ensemble bundle of bundles to out (replaced only on success)."""
    ms = check_members(bundles)
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        return _build(bundles, ms, tmp, out, workdir, log)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)     # gone already after a successful swap


def _build(bundles, ms, tmp, out, workdir, log):
    for name in VOCAB_FILES:
        shutil.copyfile(os.path.join(bundles[0], name), os.path.join(tmp, name))
    model_path = os.path.join(tmp, "model.onnx")
    merge_onnx([os.path.join(b, "model.onnx") for b in bundles], model_path)

    # golden cases: the first member's inputs; expected = the ensemble's output,
    # checked against the mean of the members' PyTorch outputs
    goldens = [dict(np.load(os.path.join(b, "golden.npz"))) for b in bundles]
    g = goldens[0]
    for b, o in zip(bundles[1:], goldens[1:]):
        if any(not np.array_equal(g[k], o[k]) for k in ms[0]["inputs"]):
            raise ValueError(f"{b}: golden inputs differ from {bundles[0]}'s (members of one workdir share them)")
    got = onnx_predict(model_path, g)
    want = np.mean([o["expected"] for o in goldens], 0)
    diff = float(np.max(np.abs(got - want))) if len(want) else 0.0
    if diff > PARITY_TOL:
        raise ValueError(f"ensemble vs the members' mean on the golden cases: |diff| {diff:.2e} > {PARITY_TOL}")
    g["expected"] = got.astype(np.float32)
    np.savez_compressed(os.path.join(tmp, "golden.npz"), **g)

    m0 = ms[0]
    created = datetime.now(timezone.utc).replace(microsecond=0)
    members = [m["model_id"] for m in ms]
    tag = hashlib.sha256("|".join(members).encode()).hexdigest()[:6]
    man = {k: v for k, v in m0.items() if k not in ("model_id", "created", "metrics", "training")}
    man["model_id"] = (f"subtree-{m0['N']}-{m0['K']}-{m0['Pf']}-x{len(bundles)}-{created:%Y%m%dT%H%M%SZ}-"
                       f"{m0['training_data_sha256'][:8]}-{tag}")
    man["created"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    training = {k: v for k, v in m0.get("training", {}).items() if k not in ("seed", "epochs")}
    training["ensemble"] = [{"model_id": m["model_id"], "seed": m.get("training", {}).get("seed"),
                             "epochs": m.get("training", {}).get("epochs"), "test": (m.get("metrics") or {}).get("test")}
                            for m in ms]
    man["training"] = training
    man["metrics"] = {}
    report = {"golden_max_abs_diff": diff}
    if workdir:
        te = load_npz(os.path.join(workdir, "test.npz"))
        p = onnx_predict(model_path, te)
        mean = np.mean([onnx_predict(os.path.join(b, "model.onnx"), te) for b in bundles], 0)
        tdiff = float(np.max(np.abs(p - mean))) if len(p) else 0.0
        if tdiff > PARITY_TOL:
            raise ValueError(f"ensemble vs the members' mean on the test split: |diff| {tdiff:.2e} > {PARITY_TOL}")
        lo, hi, tf = m0["target"]["min"], m0["target"]["max"], m0["target"]["transform"]
        man["metrics"] = {"test": metrics(te["target"] * (hi - lo) + lo, denormalize(p, lo, hi, transform=tf), lo, hi)}
        report.update(test_queries=int(len(p)), test_max_abs_diff_vs_member_mean=tdiff)
        t = man["metrics"]["test"]
        print(f"ensemble: test mse {t['mse']:.5f} q-error p50 {t['qerror_p50']:.2f} p95 {t['qerror_p95']:.2f} "
              f"({len(p)} queries; members: " + ", ".join(f"{(m.get('metrics') or {}).get('test', {}).get('mse', float('nan')):.5f}"
                                                 for m in ms) + ")", file=log)
        with open(os.path.join(workdir, f"predictions_test_prestroid_{m0['N']}_{m0['K']}_{m0['Pf']}_x{len(bundles)}.json"), "w") as f:
            json.dump(dict(zip(read_keys(os.path.join(workdir, "test.keys.txt")), denormalize(p, lo, hi, transform=tf).tolist())), f)
    man["ensemble_check"] = report
    swap_in_bundle(tmp, out, man)
    print(f"ensemble: bundle {man['model_id']} ({len(bundles)} members, golden |diff| {diff:.2e}) -> {out}", file=log)
    return man


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="bundle directory to write (replaced)")
    ap.add_argument("--workdir", help="the members' prestroid train workdir: test metrics and parity on its test split")
    ap.add_argument("bundles", nargs="+", help="member bundles (two or more)")
    a = ap.parse_args(argv)
    try:
        build(a.bundles, a.out, a.workdir)
    except (ValueError, OSError) as e:
        sys.exit(f"ensemble: {e}")


if __name__ == "__main__":
    main()
