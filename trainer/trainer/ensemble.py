"""Average sub-tree bundles trained on the same tensors into one bundle,
or gate a plain network and a cost-anchored one by the plan's size.

    python -m trainer.ensemble --out DIR [--workdir W] BUNDLE BUNDLE...
    python -m trainer.ensemble --gate --out DIR --workdir W PLAIN ANCHORED [PLAIN ANCHORED]...

The members must come from one featurization (the same workdir: N, K, C, Pf,
vocabularies, token vectors, target normalization and inputs) and differ
only in what training did with it (seeds, flags). The bundle's model.onnx is
one graph holding every member, y = Mean(y_1, ..., y_M): the Go side loads
it like any bundle (estimator/BUNDLE.md). Seeds alone move a member's test
MSE by up to 45% on our data (models/README.md); the mean of M members
removes most of that noise, for M times the inference arithmetic.

With --gate the members come in pairs, a plain network (sigmoid output,
bounded by its training range) then a cost-anchored one (`--cost-anchor`,
transform ln_cpu_seconds_minmax_open), and the output is

    y = y_plain + g (y_anchored - y_plain)    g = sigmoid((x - x_gate) / width)

with y_plain the mean of the plain members and y_anchored that of the
anchored ones (one pair: the two networks; several pairs, e.g. seeds: a
seed ensemble of each side, gated once). Member i sits under the name
prefix m{i}_ in the graph, so the first pair is m0_ and m1_ whatever the
number of pairs (trainer.targets reads their trunk tensors),

with x the ln of the plan's largest row estimate (--gate-input rows, the
default: plan[:, 3] * EST_SCALE) or ln(1 + Σ cpuCost of the plan) (--gate-input
cost, plan[:, 0] * EST_SCALE), and x_gate the --gate-quantile (default 0.99)
of x over the workdir's training split: the plain network inside the
training range, the anchor for a plan that reads more than nearly any plan in
training (models/README.md, "The gated network"). The bundle's transform is
the anchor's (the output may leave the training range).

The first member's text stage (text.onnx and the manifest's "text"), when it
has one, is carried over: it reads the SQL, not the plan.

Checks: the ensemble's ONNX Runtime output on the golden cases equals the
mean (or the gate) of the members' PyTorch outputs there (each member's
golden "expected") within the bundle parity tolerance; with --workdir also
the mean (or the gate) of the members' ONNX Runtime outputs on the whole
test split, and the manifest's test metrics are the ensemble's.
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

from .data import EST_SCALE, load_npz, read_keys
from .metrics import denormalize, metrics, transform
from .train import PARITY_TOL, onnx_predict, swap_in_bundle

# Manifest fields every member must share: they define the model's input
# and output.
SHARED = ("format_version", "tree_features", "kind", "N", "K", "C", "Pf", "slots", "tensor_format_version", "target",
          "global_pred_vector", "training_data_sha256", "inputs", "output")
VOCAB_FILES = ("ops.json", "tables.json", "tokens.vec")


def read_manifest(bundle):
    with open(os.path.join(bundle, "manifest.json")) as f:
        return json.load(f)


def check_members(bundles, same_target=True):
    """The members' manifests and vocabulary files agree (the target too
    unless same_target is false: a gate checks its own); returns the
    manifests."""
    if len(bundles) < 2:
        raise ValueError("an ensemble needs at least two bundles")
    ms = [read_manifest(b) for b in bundles]
    for b, m in zip(bundles[1:], ms[1:]):
        for k in SHARED:
            if k == "target" and not same_target:
                continue
            if m.get(k) != ms[0].get(k):
                raise ValueError(f"{b}: manifest {k} {m.get(k)!r} differs from {bundles[0]}'s {ms[0].get(k)!r}")
        for name in VOCAB_FILES:
            if not filecmp.cmp(os.path.join(bundles[0], name), os.path.join(b, name), shallow=False):
                raise ValueError(f"{b}: {name} differs from {bundles[0]}'s (members must share one featurization)")
    if ms[0].get("kind") != "subtree":
        raise ValueError(f"{bundles[0]}: kind {ms[0].get('kind')!r}: only sub-tree bundles are averaged")
    return ms


# The gate's defaults: what it reads, the quantile of the training plans'
# values of it and the width in ln units: the anchor takes over only for a
# plan whose largest row estimate lies beyond nearly every training plan's
# (models/README.md, "The gated network").
GATE_INPUT, GATE_QUANTILE, GATE_WIDTH = "rows", 0.99, 1.0
# What the gate reads: a column of the plan vector (estimator.PlanDim; ln
# values over EST_SCALE).
GATE_INPUTS = {"cost": 0, "rows": 3}


def check_gate_members(ms, bundles):
    """A gate's members: pairs of a plain network then a cost-anchored one,
    on one target range, the anchored ones with one anchor (the workdir's)."""
    if len(ms) < 2 or len(ms) % 2:
        raise ValueError(f"a gate takes pairs of bundles (plain, cost-anchored, ...), have {len(ms)}")
    plain, anchored = transform(False), transform(True)
    t0 = ms[0]["target"]
    for i, (m, b) in enumerate(zip(ms, bundles)):
        t, ca = m["target"], m.get("training", {}).get("cost_anchor")
        if i % 2 == 0 and (t.get("transform") != plain or ca is not None):
            which = "first member" if i == 0 else f"member {i + 1} (a pair's first)"
            raise ValueError(f"{b}: the gate's {which} must be a plain network (transform {plain})")
        if i % 2 == 1 and (t.get("transform") != anchored or not ca):
            which = "second member" if i == 1 else f"member {i + 1} (a pair's second)"
            raise ValueError(f"{b}: the gate's {which} must be cost-anchored (--cost-anchor, transform {anchored})")
        if (t.get("min"), t.get("max")) != (t0.get("min"), t0.get("max")):
            raise ValueError(f"{b}: target range {t} differs from {bundles[0]}'s {t0}")
        if i % 2 == 1 and ca != ms[1]["training"]["cost_anchor"]:
            raise ValueError(f"{b}: cost anchor {ca} differs from {bundles[1]}'s {ms[1]['training']['cost_anchor']}")


def kind_name(members, gated):
    """The name of an ensemble of members in its model id and predictions
    file: xM (a mean), gated (one pair), gated-xP (P pairs)."""
    if not gated:
        return f"x{members}"
    return "gated" if members == 2 else f"gated-x{members // 2}"


def gate_weight(plan, gate):
    """The anchored member's weight per query, (B,) from plan (B, PLAN)."""
    x = plan[:, GATE_INPUTS[gate["input"]]].astype(np.float64) * EST_SCALE
    return 1 / (1 + np.exp(-(x - gate["x_gate"]) / gate["width"]))


def merge_onnx(paths, out_path, gate=None):
    """One ONNX graph: every member under its own name prefix, the shared
    inputs, y = Mean of the members' outputs, or with gate (x_gate, width,
    input) y = y0 + g (y1 - y0), g = Sigmoid((plan[:, c] EST_SCALE - x_gate) / width)
    for the plan column c of the input, y0 the mean of the even members
    (plain), y1 that of the odd ones (anchored)."""
    import onnx
    from onnx import TensorProto, compose, helper

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
    if gate is None:
        nodes.append(helper.make_node("Mean", outs, [out_name], name="ensemble_mean"))
    else:
        col, x_gate, width = GATE_INPUTS[gate["input"]], gate["x_gate"], gate["width"]
        if "plan" not in [x.name for x in first.graph.input]:
            raise ValueError(f"{paths[0]}: a gate needs the plan input")
        const = lambda name, v, dt=TensorProto.FLOAT: inits.append(helper.make_tensor(name, dt, [len(v)], v))
        const("gate_start", [col], TensorProto.INT64)
        const("gate_end", [col + 1], TensorProto.INT64)
        const("gate_axis", [1], TensorProto.INT64)
        const("gate_scale", [EST_SCALE / width])
        const("gate_shift", [x_gate / width])
        nodes += [
            helper.make_node("Slice", ["plan", "gate_start", "gate_end", "gate_axis"], ["gate_plan0"], name="gate_x"),
            helper.make_node("Mul", ["gate_plan0", "gate_scale"], ["gate_scaled"], name="gate_scale"),
            helper.make_node("Sub", ["gate_scaled", "gate_shift"], ["gate_z"], name="gate_shift"),
            helper.make_node("Sigmoid", ["gate_z"], ["gate_g"], name="gate_sigmoid"),
        ]
        sides = []
        for name, side in (("plain", outs[0::2]), ("anchored", outs[1::2])):
            if len(side) == 1:
                sides.append(side[0])
            else:
                nodes.append(helper.make_node("Mean", side, [f"gate_{name}"], name=f"gate_{name}_mean"))
                sides.append(f"gate_{name}")
        y0, y1 = sides
        nodes += [
            helper.make_node("Sub", [y1, y0], ["gate_d"], name="gate_diff"),
            helper.make_node("Mul", ["gate_g", "gate_d"], ["gate_gd"], name="gate_mul"),
            helper.make_node("Add", [y0, "gate_gd"], [out_name], name="gate_out"),
        ]
    graph = helper.make_graph(nodes, "prestroid_ensemble", list(first.graph.input), list(first.graph.output), inits)
    merged = helper.make_model(graph, opset_imports=list(first.opset_import), producer_name="prestroid-ensemble")
    merged.ir_version = first.ir_version
    onnx.checker.check_model(merged)
    onnx.save(merged, out_path)


def build(bundles, out, workdir=None, log=sys.stderr, gate=False, gate_quantile=GATE_QUANTILE, gate_width=GATE_WIDTH,
          gate_input=GATE_INPUT):
    """Write the ensemble bundle of bundles to out (replaced only on success).
    With gate, bundles are pairs (plain, cost-anchored) and workdir is required."""
    ms = check_members(bundles, same_target=not gate)
    g = None
    if gate:
        check_gate_members(ms, bundles)
        if not workdir:
            raise ValueError("a gate needs --workdir (its threshold is a quantile of the training plans' gate input)")
        if not (0 < gate_quantile < 1) or not gate_width > 0:
            raise ValueError(f"gate quantile {gate_quantile} must lie in (0, 1) and width {gate_width} be > 0")
        if gate_input not in GATE_INPUTS:
            raise ValueError(f"gate input {gate_input!r}: want one of {sorted(GATE_INPUTS)}")
        x = load_npz(os.path.join(workdir, "train.npz"))["plan"][:, GATE_INPUTS[gate_input]].astype(np.float64) * EST_SCALE
        g = {"input": gate_input, "x_gate": float(np.quantile(x, gate_quantile)), "quantile": gate_quantile,
             "width": gate_width}
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        return _build(bundles, ms, tmp, out, workdir, log, g)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)     # gone already after a successful swap


def combine(outputs, plan, gate):
    """The members' outputs combined as the graph does: (M, B) -> (B,)."""
    if gate is None:
        return np.mean(outputs, 0)
    g = gate_weight(plan, gate)
    y0, y1 = np.mean(outputs[0::2], 0), np.mean(outputs[1::2], 0)
    return y0 + g * (y1 - y0)


def _build(bundles, ms, tmp, out, workdir, log, gate):
    for name in VOCAB_FILES:
        shutil.copyfile(os.path.join(bundles[0], name), os.path.join(tmp, name))
    text = ms[0].get("text")
    if text:
        shutil.copyfile(os.path.join(bundles[0], text["model"]), os.path.join(tmp, text["model"]))
    model_path = os.path.join(tmp, "model.onnx")
    merge_onnx([os.path.join(b, "model.onnx") for b in bundles], model_path, gate)

    # golden cases: the first member's inputs; expected = the ensemble's output,
    # checked against the members' PyTorch outputs combined (mean or gate)
    goldens = [dict(np.load(os.path.join(b, "golden.npz"))) for b in bundles]
    g = goldens[0]
    for b, o in zip(bundles[1:], goldens[1:]):
        if any(not np.array_equal(g[k], o[k]) for k in ms[0]["inputs"]):
            raise ValueError(f"{b}: golden inputs differ from {bundles[0]}'s (members of one workdir share them)")
    got = onnx_predict(model_path, g)
    want = combine(np.array([o["expected"] for o in goldens], np.float64), g["plan"], gate)
    diff = float(np.max(np.abs(got - want))) if len(want) else 0.0
    if diff > PARITY_TOL:
        raise ValueError(f"ensemble vs the members' {'gate' if gate else 'mean'} on the golden cases: |diff| {diff:.2e} > {PARITY_TOL}")
    g["expected"] = got.astype(np.float32)
    np.savez_compressed(os.path.join(tmp, "golden.npz"), **g)

    m0 = ms[0]
    created = datetime.now(timezone.utc).replace(microsecond=0)
    members = [m["model_id"] for m in ms]
    tag = hashlib.sha256("|".join(members).encode()).hexdigest()[:6]
    man = {k: v for k, v in m0.items() if k not in ("model_id", "created", "metrics", "training")}
    kind = kind_name(len(bundles), gate is not None)
    man["model_id"] = (f"subtree-{m0['N']}-{m0['K']}-{m0['Pf']}-{kind}-{created:%Y%m%dT%H%M%SZ}-"
                       f"{m0['training_data_sha256'][:8]}-{tag}")
    if gate is not None:
        man["target"] = ms[1]["target"]
    man["created"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    training = {k: v for k, v in m0.get("training", {}).items() if k not in ("seed", "epochs")}
    training["ensemble"] = [{"model_id": m["model_id"], "seed": m.get("training", {}).get("seed"),
                             "epochs": m.get("training", {}).get("epochs"), "test": (m.get("metrics") or {}).get("test")}
                            for m in ms]
    if gate is not None:
        training["gate"] = gate
        training["cost_anchor"] = ms[1]["training"]["cost_anchor"]
    man["training"] = training
    man["metrics"] = {}
    report = {"golden_max_abs_diff": diff}
    if workdir:
        te = load_npz(os.path.join(workdir, "test.npz"))
        p = onnx_predict(model_path, te)
        want = combine(np.array([onnx_predict(os.path.join(b, "model.onnx"), te) for b in bundles], np.float64), te["plan"], gate)
        tdiff = float(np.max(np.abs(p - want))) if len(p) else 0.0
        if tdiff > PARITY_TOL:
            raise ValueError(f"ensemble vs the members' {'gate' if gate else 'mean'} on the test split: |diff| {tdiff:.2e} > {PARITY_TOL}")
        lo, hi, tf = man["target"]["min"], man["target"]["max"], man["target"]["transform"]
        man["metrics"] = {"test": metrics(te["target"] * (hi - lo) + lo, denormalize(p, lo, hi, transform=tf), lo, hi)}
        report.update(test_queries=int(len(p)), **{f"test_max_abs_diff_vs_member_{'gate' if gate else 'mean'}": tdiff})
        t = man["metrics"]["test"]
        print(f"ensemble: test mse {t['mse']:.5f} q-error p50 {t['qerror_p50']:.2f} p95 {t['qerror_p95']:.2f} "
              f"({len(p)} queries; members: " + ", ".join(f"{(m.get('metrics') or {}).get('test', {}).get('mse', float('nan')):.5f}"
                                                 for m in ms) + ")", file=log)
        with open(os.path.join(workdir, f"predictions_test_prestroid_{m0['N']}_{m0['K']}_{m0['Pf']}_{kind}.json"), "w") as f:
            json.dump(dict(zip(read_keys(os.path.join(workdir, "test.keys.txt")), denormalize(p, lo, hi, transform=tf).tolist())), f)
    man["ensemble_check"] = report
    swap_in_bundle(tmp, out, man)
    how = f"{len(bundles)} members" if gate is None else f"{len(bundles) // 2} pair(s), gate at {gate['input']} {gate['x_gate']:.2f} (quantile {gate['quantile']}), width {gate['width']}"
    print(f"ensemble: bundle {man['model_id']} ({how}, golden |diff| {diff:.2e}) -> {out}", file=log)
    return man


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="bundle directory to write (replaced)")
    ap.add_argument("--workdir", help="the members' prestroid train workdir: test metrics and parity on its test split")
    ap.add_argument("--gate", action="store_true", help="pairs of members, plain then cost-anchored: the anchored ones' weight grows with the plan's size")
    ap.add_argument("--gate-quantile", type=float, default=GATE_QUANTILE, help="the gate's centre: this quantile of the training plans' gate input")
    ap.add_argument("--gate-width", type=float, default=GATE_WIDTH, help="the gate's width in ln units")
    ap.add_argument("--gate-input", default=GATE_INPUT, choices=sorted(GATE_INPUTS),
                    help="what the gate reads: ln(1 + Σ cpuCost) (cost) or ln of the largest row estimate (rows)")
    ap.add_argument("bundles", nargs="+", help="member bundles (two or more; with --gate: plain, cost-anchored, in pairs)")
    a = ap.parse_args(argv)
    try:
        build(a.bundles, a.out, a.workdir, gate=a.gate, gate_quantile=a.gate_quantile, gate_width=a.gate_width,
              gate_input=a.gate_input)
    except (ValueError, OSError) as e:
        sys.exit(f"ensemble: {e}")


if __name__ == "__main__":
    main()
