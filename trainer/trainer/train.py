"""Train the Tree-CNN cost model, export it to ONNX, check parity, write the
model bundle (estimator/BUNDLE.md).

Reads the workdir written by `prestroid train` (steps featurize, w2v,
tensors): {train,val,test}.npz, *.keys.txt, ops.json, tables.json,
tokens.vec, target.json, tensors.json, meta.json, and with --full the
full-tree chunks full_{part}_NNN.npz.

    python -m trainer.train --workdir W --out models/default            # sub-tree model
    python -m trainer.train --workdir W --out B --full --epochs 100     # + full-tree models

Writes the bundle to --out (replaced whole), and to the workdir:
train_report.json (history and test metrics per model) and
predictions_test_<model>.json ({key: predicted ln CPU seconds}), which
`prestroid eval` picks up for the full-tree models.
"""
import argparse
import copy
import hashlib
import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, asdict, replace
from datetime import datetime, timezone

import numpy as np
import torch
import torch.nn.functional as F

from .data import BASE_INPUTS, EST, EST_SCALE, FORMAT_VERSION, INPUTS, PLAN, load_npz, load_full, pad_full, pack_full, read_keys
from .metrics import metrics, denormalize, clean, transform
from .model import POOLS, SLOPES, ModelConfig, TreeCNN, count_params

GOLDEN_CASES = 8
PARITY_TOL = 1e-5


@dataclass
class TrainConfig:
    lr: float = 1e-4          # Adam; the paper's rate
    batch: int = 64
    epochs: int = 200         # upper bound: early stopping on validation MSE decides
    patience: int = 25        # epochs without validation improvement before stopping
    seed: int = 1
    device: str = "auto"      # auto = CUDA when available
    huber_delta: float = 1.0
    lr_plateau: int = 0       # halve the rate after this many epochs without validation improvement (0: constant)
    ema: float = 0.0          # > 0: validate and keep an exponential moving average of the weights (this decay per step)


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("train: --device cuda but CUDA is not available")
    return torch.device(name)


# ------------------------------------------------------------------ batching
# A "feeder" turns query indices into model inputs; one per model kind.

class SubTreeFeeder:
    """Sub-tree tensors (or full trees padded to the longest tree of the
    whole set, the paper's setting), held on the device."""

    def __init__(self, z, device):
        self.t = {k: torch.from_numpy(np.ascontiguousarray(z[k])).to(device) for k in INPUTS}
        self.n = z["op"].shape[0]

    def inputs(self, idx):
        return tuple(self.t[k][idx] for k in INPUTS)

    def run(self, model, idx):
        return model(*self.inputs(idx))

    def nbytes(self, idx):
        return sum(v[idx].numel() * v.element_size() for v in self.t.values())


class PackedFeeder:
    """Full trees packed per batch without padding."""

    def __init__(self, trees, device):
        self.trees, self.device, self.n = trees, device, len(trees)

    def pack(self, idx):
        p = pack_full([self.trees[i] for i in idx.tolist()])
        return {k: torch.from_numpy(v).to(self.device) for k, v in p.items()}

    def run(self, model, idx):
        p = self.pack(idx)
        return model.forward_packed(*(p[k] for k in INPUTS), p["tree"], len(idx))

    def nbytes(self, idx):
        return sum(v.numel() * v.element_size() for v in self.pack(idx).values())


def predict(model, feeder, n, batch=256, device="cpu"):
    model.eval()
    out = []
    with torch.no_grad():
        for lo in range(0, n, batch):
            idx = torch.arange(lo, min(n, lo + batch), device=device)
            out.append(feeder.run(model, idx).reshape(-1).float().cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def fit(model, train, val, y_train, y_val, cfg, device, name="model", log=sys.stderr):
    """Adam + Huber loss, early stopping on validation MSE (normalized
    target). Returns the history; the model ends with its best weights.
    With cfg.ema > 0 the weights validated, kept and returned are an
    exponential moving average of the trained ones (updated after every
    step: avg = ema * avg + (1 - ema) * w; batch-norm statistics too), which
    smooths the step-to-step noise that otherwise moves the validation MSE
    by a factor of two from one epoch to the next."""
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    sched = (torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=cfg.lr_plateau - 1, threshold=1e-7,
                                                        threshold_mode="abs")
             if cfg.lr_plateau > 0 else None)
    yt = torch.from_numpy(y_train).to(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    best, best_state, bad, history = float("inf"), None, 0, []
    avg = copy.deepcopy(model) if cfg.ema > 0 else None
    judged = avg if avg is not None else model
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        perm = torch.randperm(train.n, generator=gen).to(device)
        total, seen = 0.0, 0
        for lo in range(0, train.n, cfg.batch):
            idx = perm[lo:lo + cfg.batch]
            if len(idx) < 2:          # batch norm needs two samples
                continue
            pred = train.run(model, idx).reshape(-1)
            loss = F.huber_loss(pred, yt[idx], delta=cfg.huber_delta)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if avg is not None:
                update_average(avg, model, cfg.ema)
            total += loss.item() * len(idx)
            seen += len(idx)
        pv = predict(judged, val, val.n, device=device) if val.n else np.zeros(0)
        val_mse = float(np.mean((pv - y_val) ** 2)) if val.n else total / max(seen, 1)
        history.append({"epoch": epoch, "train_huber": total / max(seen, 1), "val_mse": val_mse,
                        "lr": opt.param_groups[0]["lr"], "seconds": time.perf_counter() - t0})
        if sched is not None:
            sched.step(val_mse)
        if val_mse < best - 1e-7:
            best, best_state, bad = val_mse, copy.deepcopy(judged.state_dict()), 0
        else:
            bad += 1
        if epoch == 1 or epoch % 5 == 0:
            print(f"{name}: epoch {epoch} train huber {total / max(seen, 1):.5f} val mse {val_mse:.5f} "
                  f"({history[-1]['seconds']:.2f}s)", file=log)
        if bad >= cfg.patience:
            print(f"{name}: early stop at epoch {epoch}, best val mse {best:.5f}", file=log)
            break
    if best_state is not None:
        model.load_state_dict(best_state)
    elif avg is not None:
        model.load_state_dict(avg.state_dict())
    return history


def update_average(avg, model, decay):
    """avg = decay * avg + (1 - decay) * model, parameters and floating
    buffers (batch-norm statistics); integer buffers are copied."""
    with torch.no_grad():
        for a, w in zip(avg.parameters(), model.parameters()):
            a.lerp_(w, 1 - decay)
        for a, w in zip(avg.buffers(), model.buffers()):
            if a.is_floating_point():
                a.lerp_(w, 1 - decay)
            else:
                a.copy_(w)


# ------------------------------------------------------------------ export

def model_inputs(model):
    """The model's ONNX inputs (BUNDLE.md): the estimate inputs only when
    the model uses them."""
    return INPUTS if model.cfg.est or model.cfg.plan else BASE_INPUTS


def export_onnx(model, sample, path):
    """Export the sub-tree model: inputs as BUNDLE.md (batch axis dynamic)."""
    model = model.cpu().eval()
    names = model_inputs(model)
    args = tuple(torch.from_numpy(np.ascontiguousarray(sample[k][:2])) for k in names)
    axes = {k: {0: "B"} for k in names}
    axes["y"] = {0: "B"}
    kw = dict(input_names=list(names), output_names=["y"], dynamic_axes=axes, opset_version=17)
    try:
        # the TorchScript exporter: a plain graph with a dynamic batch axis
        torch.onnx.export(model, args, path, dynamo=False, **kw)
    except TypeError:                       # torch < 2.5 has no dynamo argument (Debian's 1.13)
        torch.onnx.export(model, args, path, **kw)


def onnx_predict(path, z, batch=256):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    n = z["op"].shape[0]
    out = []
    for lo in range(0, n, batch):
        feed = {k: np.ascontiguousarray(z[k][lo:lo + batch]) for k in names}
        out.append(sess.run(["y"], feed)[0].reshape(-1))
    return np.concatenate(out) if out else np.zeros(0, np.float32)


def write_bundle(out, workdir, model, test, test_keys, expected, manifest):
    """Write the bundle into a fresh directory and swap it in."""
    tmp = out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in ("ops.json", "tables.json", "tokens.vec"):
        shutil.copyfile(os.path.join(workdir, name), os.path.join(tmp, name))
    export_onnx(model, test, os.path.join(tmp, "model.onnx"))
    g = min(GOLDEN_CASES, test["op"].shape[0])
    golden = {k: np.ascontiguousarray(test[k][:g]) for k in INPUTS + ("kind", "subtrees")}
    golden["format_version"] = np.array(FORMAT_VERSION, np.int32)
    p = test["params"]
    golden["params"] = np.array([p["N"], p["K"], p["C"], p["Pf"], p["full"]], np.int32)
    if "target" in test:
        golden["target"] = test["target"][:g]
    golden["expected"] = expected[:g].astype(np.float32)
    golden["names"] = np.frombuffer("|".join(test_keys[:g]).encode(), dtype=np.uint8)
    np.savez_compressed(os.path.join(tmp, "golden.npz"), **golden)
    swap_in_bundle(tmp, out, manifest)


def swap_in_bundle(tmp, out, manifest):
    """Write manifest.json into the bundle being built in tmp, then put tmp
    in place of out."""
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(clean(manifest), f, indent=2)
        f.write("\n")
    if os.path.exists(out):
        shutil.rmtree(out)
    os.replace(tmp, out)


# ------------------------------------------------------------------ main

def build_model(cfg_model, device):
    model = TreeCNN(cfg_model)
    if cfg_model.anchor is not None:
        # start from the anchor's own fit: U and R at the training set's
        # typical fixed cost and rate, the weights (random, small) learn the rest
        with torch.no_grad():
            b = [cfg_model.anchor["u0"], cfg_model.anchor["r0"]]
            if cfg_model.anchor.get("slope"):       # slope 1 to start
                lo, hi = SLOPES
                b.append(float(np.log((1 - lo) / (hi - 1))))
            model.head[-1].bias.copy_(torch.tensor(b))
    return model.to(device)


def cost_anchor(z, lo, hi):
    """The cost anchor's constants from the training tensors: x_ref, the
    median x = ln(1 + Σ cpuCost) of plans whose costs are mostly known, and
    the starting U (the 10th percentile of ln CPU: a fixed cost) and R (the
    median ln CPU, the rate at x_ref), normalized."""
    y = z["target"].astype(np.float64)
    known = z["plan"][:, 5] > 0.5
    x = z["plan"][:, 0].astype(np.float64) * EST_SCALE
    if not known.any():
        raise ValueError("cost anchor: no training plan has known cpuCost estimates")
    return {"lo": float(lo), "hi": float(hi), "x_ref": float(np.median(x[known])),
            "u0": float(np.percentile(y, 10)), "r0": float(np.median(y[known]))}


def target_transform(mcfg):
    """The bundle's target transform (BUNDLE.md, metrics.transform)."""
    return transform(mcfg.anchor is not None)


def read_workdir_info(workdir):
    """(operator vocabulary size, table vocabulary size, target normalization) of a workdir."""
    with open(os.path.join(workdir, "ops.json")) as f:
        n_ops = len(json.load(f))
    with open(os.path.join(workdir, "tables.json")) as f:
        n_tables = len(json.load(f))
    with open(os.path.join(workdir, "target.json")) as f:
        target = json.load(f)
    return n_ops, n_tables, target


def add_training_args(ap):
    """The flags of the network and its training, shared with trainer.cv."""
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--patience", type=int, default=25)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--kernels", default="128,128,128")
    ap.add_argument("--dense", default="32,8")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--plan-skip", action="store_true",
                    help="a linear path from the plan vector straight to the output (needs the estimate features)")
    ap.add_argument("--ema", type=float, default=0.0,
                    help="validate and keep an exponential moving average of the weights with this decay per step (0: off)")
    ap.add_argument("--pool", default="concat", choices=POOLS,
                    help="sub-trees to the dense layers: concat (the paper's, per position) or sum-max (order-free)")
    ap.add_argument("--lr-plateau", type=int, default=0,
                    help="halve the learning rate after this many epochs without validation improvement (0: constant)")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for torch")
    ap.add_argument("--no-estimates", action="store_true",
                    help="leave out the optimizer-estimate features (the paper's model)")
    ap.add_argument("--scale-free", action="store_true",
                    help="with --cost-anchor: the network reads only ratios of the optimizer's estimates, the size "
                         "reaches the output through the anchor alone")
    ap.add_argument("--anchor-slope", action="store_true",
                    help="with --cost-anchor: the network also gives each plan its slope in ln cost (0.25-1.5; else 1)")
    ap.add_argument("--cost-anchor", action="store_true",
                    help="predict ln CPU = logaddexp(U, R + ln(1 + Σ cpuCost)): a fixed cost and a rate from the "
                         "network, the size from the optimizer's cost (extrapolates to larger tables)")


def check_training_args(ap, a):
    if not 0 <= a.ema < 1:
        ap.error(f"--ema {a.ema}: want a decay in [0, 1)")
    if a.cost_anchor and (a.no_estimates or a.plan_skip):
        ap.error("--cost-anchor needs the estimate features and replaces --plan-skip")
    if (a.scale_free or a.anchor_slope) and not a.cost_anchor:
        ap.error("--scale-free and --anchor-slope need --cost-anchor")


def training_config(a, seed):
    return TrainConfig(lr=a.lr, batch=a.batch, epochs=a.epochs, patience=a.patience, seed=seed, device=a.device,
                       lr_plateau=a.lr_plateau, ema=a.ema)


def subtree_config(a, n_ops, n_tables, params, train=None, target=None):
    """The sub-tree model's ModelConfig from the flags and the tensors'
    N/K/Pf; with --cost-anchor, the anchor from the training tensors and the
    target normalization."""
    est, plan = (0, 0) if a.no_estimates else (EST, PLAN)
    anchor = cost_anchor(train, target["min"], target["max"]) if getattr(a, "cost_anchor", False) else None
    if anchor is not None and getattr(a, "scale_free", False):
        anchor["scale_free"] = True
    if anchor is not None and getattr(a, "anchor_slope", False):
        anchor["slope"] = True
    return ModelConfig(n_ops=n_ops, n_tables=n_tables, pf=params["Pf"], k=params["K"],
                       kernels=tuple(int(x) for x in a.kernels.split(",")),
                       dense=tuple(int(x) for x in a.dense.split(",")),
                       dropout=a.dropout, est=est, plan=plan, plan_skip=a.plan_skip, pool=a.pool, anchor=anchor)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True, help="bundle directory (replaced)")
    ap.add_argument("--seed", type=int, default=1)
    add_training_args(ap)
    ap.add_argument("--full", action="store_true", help="also train the full-tree models (padded, packed)")
    ap.add_argument("--full-only", action="store_true", help="train only the full-tree models (no bundle)")
    ap.add_argument("--full-layouts", default="padded,packed",
                    help="full-tree models to train: padded, packed or both (the same function at different cost)")
    a = ap.parse_args(argv)
    check_training_args(ap, a)
    layouts = {x.strip() for x in a.full_layouts.split(",") if x.strip()}
    if not layouts or not layouts <= {"padded", "packed"}:
        ap.error(f"--full-layouts {a.full_layouts!r}: want padded, packed or padded,packed")
    torch.set_num_threads(a.threads)
    cfg = training_config(a, a.seed)
    device = pick_device(a.device)
    W = a.workdir
    suffix = "_paper" if a.no_estimates else ""     # model names in the report and predictions files

    n_ops, n_tables, target = read_workdir_info(W)
    with open(os.path.join(W, "tensors.json")) as f:
        tinfo = json.load(f)
    with open(os.path.join(W, "meta.json")) as f:
        meta = json.load(f)
    lo, hi = target["min"], target["max"]

    parts = {}
    for part in ("train", "val", "test"):
        path = os.path.join(W, part + ".npz")
        parts[part] = (load_npz(path), read_keys(os.path.join(W, part + ".keys.txt"))) if os.path.exists(path) else None
    if parts["train"] is None or parts["test"] is None:
        sys.exit("train: need train.npz and test.npz in the workdir (does the split have test queries?)")
    tr, va, te = (parts[p][0] if parts[p] else None for p in ("train", "val", "test"))
    if va is None:
        print("train: no validation queries: early stopping on the training loss", file=sys.stderr)
    P = tr["params"]
    base = subtree_config(a, n_ops, n_tables, P, tr, target)   # the full-tree models: the same with K = 1
    transform = target_transform(base)
    test_keys = parts["test"][1]
    report = {"records": meta, "config": asdict(cfg), "models": {}}
    if a.full_only:
        # keep the sub-tree results of an earlier run in the same workdir
        path = os.path.join(W, "train_report.json")
        if os.path.exists(path):
            with open(path) as f:
                report = json.load(f)

    def y_of(z):
        return z["target"] if z is not None else np.zeros(0, np.float32)

    def empty_like(z):
        return {k: v[:0] for k, v in z.items() if k != "params"}

    def run_model(name, mcfg, train_feed, val_feed, test_feed):
        set_seed(cfg.seed)
        model = build_model(mcfg, device)
        t0 = time.perf_counter()
        hist = fit(model, train_feed, val_feed, y_of(tr), y_of(va), cfg, device, name=name)
        secs = time.perf_counter() - t0
        p = predict(model, test_feed, test_feed.n, device=device)
        m = metrics(te["target"] * (hi - lo) + lo, denormalize(p, lo, hi, transform=transform), lo, hi)
        print(f"{name}: test mse {m['mse']:.5f} q-error p50 {m['qerror_p50']:.2f} p95 {m['qerror_p95']:.2f} "
              f"({len(hist)} epochs, {secs:.1f}s, {count_params(model)} parameters)", file=sys.stderr)
        report["models"][name] = {"test": m, "epochs": len(hist), "seconds": secs, "parameters": count_params(model),
                                  "history": hist, "kernels": list(mcfg.kernels), "dense": list(mcfg.dense)}
        with open(os.path.join(W, f"predictions_test_{name}.json"), "w") as f:
            json.dump(dict(zip(test_keys, denormalize(p, lo, hi, transform=transform).tolist())), f)
        save_report()
        return model, p, m, len(hist)

    def save_report():
        with open(os.path.join(W, "train_report.json"), "w") as f:
            json.dump(clean(report), f, indent=2)

    # --- the sub-tree model: the bundle's model
    if not a.full_only:
        name = f"prestroid_{P['N']}_{P['K']}_{P['Pf']}" + suffix
        mcfg = base
        model, p_torch, m, epochs = run_model(name, mcfg, SubTreeFeeder(tr, device),
                                              SubTreeFeeder(va if va is not None else empty_like(tr), device),
                                              SubTreeFeeder(te, device))

        # --- bundle, ONNX parity on the whole test split
        model = model.cpu().eval()
        p_cpu = predict(model, SubTreeFeeder(te, "cpu"), te["op"].shape[0])
        created = datetime.now(timezone.utc).replace(microsecond=0)
        model_id = f"subtree-{P['N']}-{P['K']}-{P['Pf']}-{created:%Y%m%dT%H%M%SZ}-{meta['training_data_sha256'][:8]}"
        w2v = {}
        if os.path.exists(os.path.join(W, "tokens.w2v.json")):
            with open(os.path.join(W, "tokens.w2v.json")) as f:
                w2v = json.load(f)
        manifest = {
            # 2: the manifest names the O-T-P tree's readings (tree_features)
            "format_version": 2 if meta.get("tree_features") else 1,
            **({"tree_features": meta["tree_features"]} if meta.get("tree_features") else {}),
            "model_id": model_id,
            "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "kind": "subtree",
            "N": P["N"], "K": P["K"], "C": P["C"], "Pf": P["Pf"],
            "slots": int(tr["op"].shape[2]),
            "tensor_format_version": FORMAT_VERSION,
            "target": {"transform": transform, "min": lo, "max": hi},
            "global_pred_vector": tinfo["global_pred_vector"],
            "training_data_sha256": meta["training_data_sha256"],
            "training": {"records": meta["usable"], "train": tinfo["counts"].get("train", 0),
                         "val": tinfo["counts"].get("val", 0), "test": tinfo["counts"].get("test", 0),
                         "epochs": epochs, "seed": cfg.seed, "device": str(device), "torch": torch.__version__,
                         "lr": cfg.lr, "lr_plateau": cfg.lr_plateau, "dropout": a.dropout, "plan_skip": a.plan_skip, "pool": a.pool,
                         "cost_anchor": base.anchor,
                         "ema": cfg.ema,
                         "batch": cfg.batch, "kernels": list(base.kernels), "dense": list(base.dense),
                         "estimate_features": bool(base.est or base.plan),
                         "word2vec": {k: w2v.get(k) for k in ("sg", "window", "effective_min_count", "tokens")},
                         **({"engines": meta["engines"]} if meta.get("engines") else {})},
            "metrics": {"test": m},
            "inputs": list(model_inputs(model)),
            "output": "y",
        }
        write_bundle(a.out, W, model, te, test_keys, p_cpu, manifest)
        p_onnx = onnx_predict(os.path.join(a.out, "model.onnx"), te)
        diff = float(np.max(np.abs(p_onnx - p_cpu))) if len(p_cpu) else 0.0
        report["parity"] = {"max_abs_diff": diff, "tolerance": PARITY_TOL, "queries": int(len(p_cpu)),
                            "device_vs_cpu_max_abs_diff": float(np.max(np.abs(p_torch - p_cpu))) if len(p_cpu) else 0.0}
        print(f"parity: ONNX Runtime vs PyTorch on {len(p_cpu)} test queries: max |diff| {diff:.2e}", file=sys.stderr)
        save_report()
        if diff > PARITY_TOL:
            sys.exit(f"train: ONNX parity {diff:.2e} > {PARITY_TOL}")

    # --- the full-tree models (the paper's Prestroid(Full-Pf)), padded and packed
    if a.full or a.full_only:
        ftr, ytr = load_full(W, "train")
        fva, yva = load_full(W, "val")
        fte, yte = load_full(W, "test")
        smax = max(len(t["op"]) for t in ftr + fva + fte)
        fcfg = replace(base, k=1)
        padded = lambda ts: SubTreeFeeder(pad_full(ts, smax) if ts else empty_like(tr), device)
        if "padded" in layouts:
            run_model(f"prestroid_full_{P['Pf']}_padded" + suffix, fcfg, padded(ftr), padded(fva), padded(fte))
        if "packed" in layouts:
            run_model(f"prestroid_full_{P['Pf']}_packed" + suffix, fcfg, PackedFeeder(ftr, device),
                      PackedFeeder(fva, device), PackedFeeder(fte, device))
        report["full_slots"] = smax
    save_report()
    if not a.full_only:
        print(f"train: bundle {model_id} -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
