"""Beyond CPU: peak memory and elapsed time from the same plan features
(models/README.md, "Beyond CPU: peak memory and elapsed time").

The bundle's CPU networks stay bit-identical: the new heads sit on the
frozen trunk of the shipped graph. For every query of a training workdir
(the tensors `prestroid train` wrote) the bundle's model.onnx gives, beside
its output y (the CPU), the plain member's pooled sub-tree features joined
with the plan vector (the input of its dense layers) and the cost-anchored
member's; a small network per target reads those and y and predicts the
target's ln, min-max normalized over training (the transform is "open": the
output is not bounded). The heads are trained on the training split,
early-stopped on the validation split, and spliced into the bundle's graph
as extra outputs (y_memory, y_elapsed): y and every node that computes it
are the ones of the input bundle. Each target's sigma is the standard
deviation of its ln residuals on the validation split (the serving side's
log-normal Quantity{Median, Sigma}).

The text stage gets the same two targets: quantile networks trained the way
trainer.text trains the CPU one (pinball loss, conformal margin on the
validation templates) on the text tensors of the workdir, merged into
text.onnx as extra outputs q_memory and q_elapsed beside the untouched q.

Labels come from the records themselves (stats.peak_memory_bytes,
stats.elapsed_ms; memory below 1 KiB counts as 1 KiB, elapsed below 1 ms as
1 ms), joined on the workdir's keys; so do Trino's own memory estimates (the
plan's memoryCost, summed over its nodes) for the baselines.

    python -m trainer.targets --workdir W --bundle models/default --out NEW.bundle \
        --results models/results/targets [--baselines logbin,tfidf_gbr]

Evaluates, per target, on the workdir's test split (held-out templates) and
on the largest scale held out (every query at that scale tests; the heads
and baselines are refitted without it: the CPU trunk itself is the
bundle's, trained on the template split), the heads beside the baselines:
the training median, Trino's memoryCost (memory) or cpuCost (elapsed) with
a log-linear fit on train, a log-linear fit on the bundle's own CPU
prediction, and trainer.baselines' log binning and TF-IDF + GBR refitted per
target. Writes --results/{template-split,scale-split}.json and report.md.
"""
import argparse
import copy
import gzip
import hashlib
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch

from . import baselines as B
from . import text as T
from .metrics import clean, qerrors

# The targets beyond CPU, by their estimate.Target label (estimate/targets.go).
TARGETS = {
    "peak_memory": {"label": "peak_memory_bytes", "scale": 1.0, "floor": 1024.0, "output": "y_memory",
                    "text_output": "q_memory", "transform": "ln_bytes_minmax_open", "unit": "bytes"},
    "elapsed": {"label": "elapsed_ms", "scale": 1e-3, "floor": 1e-3, "output": "y_elapsed",
                "text_output": "q_elapsed", "transform": "ln_seconds_minmax_open", "unit": "seconds"},
}
# The trunk tensors of the gated graph (trainer.ensemble: member i under the
# prefix m{i}_) the heads read: each member's input to its dense layers.
TRUNK = ("m0_/Concat_7_output_0", "m1_/Concat_9_output_0")
PARITY_TOL = 1e-5
HIDDEN = (8, 32)           # head widths tried; validation MSE picks
SKIP = (False, True)       # with or without a linear path beside the hidden layer; validation MSE picks
SEEDS = (1, 2, 3)          # heads per target, averaged


# ------------------------------------------------------------------ data

def read_labels(workdir, root):
    """{key: {target: ln value, "memcost": Σ memoryCost, "memknown": n}} from
    the record files the workdir was featurized from (meta.json)."""
    with open(os.path.join(workdir, "meta.json")) as f:
        files = json.load(f)["files"]
    out = {}
    for path in files:
        with gzip.open(os.path.join(root, path), "rt") as f:
            for line in f:
                r = json.loads(line)
                st = r.get("stats") or {}
                row = {}
                for name, t in TARGETS.items():
                    v = st.get(t["label"])
                    if isinstance(v, (int, float)) and v >= 0:
                        row[name] = math.log(max(v * t["scale"], t["floor"]))
                costs = []
                _memory_costs((r.get("plan") or {}).get("json"), costs)
                row["memcost"], row["memknown"] = float(sum(costs)), len(costs)
                out[r["key"]] = row
    return out


def _memory_costs(node, acc):
    """Every finite memoryCost of an EXPLAIN (TYPE DISTRIBUTED, FORMAT JSON)
    plan: a map of fragments, each a tree of nodes with estimates."""
    if isinstance(node, dict) and "id" not in node and "children" not in node:
        for v in node.values():
            _memory_costs(v, acc)
        return
    if not isinstance(node, dict):
        return
    for e in node.get("estimates") or []:
        v = e.get("memoryCost")
        if isinstance(v, (int, float)) and math.isfinite(v):
            acc.append(float(v))
    for c in node.get("children") or []:
        _memory_costs(c, acc)


def trunk_session(model_path, extra=TRUNK):
    """An ONNX Runtime session of model_path that also returns the trunk
    tensors."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    m = onnx.load(model_path)
    have = {o for n in m.graph.node for o in n.output}
    for name in extra:
        if name not in have:
            raise SystemExit(f"targets: {model_path} has no tensor {name!r}: the heads need a gated graph "
                             f"(trainer.ensemble --gate)")
        m.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def embed(sess, z, batch=256):
    """(features (n, d): the trunk tensors joined, y (n,), the width of
    each trunk tensor) of the queries of z."""
    names = [i.name for i in sess.get_inputs()]
    n = z["op"].shape[0]
    feats, ys = [], []
    for lo in range(0, n, batch):
        feed = {k: np.ascontiguousarray(z[k][lo:lo + batch]) for k in names}
        y, *tr = sess.run(["y", *TRUNK], feed)
        ys.append(y.reshape(-1))
        feats.append(np.concatenate([t.reshape(t.shape[0], -1) for t in tr], 1))
    widths = [int(np.prod(t.shape[1:])) for t in tr]
    return np.concatenate(feats).astype(np.float32), np.concatenate(ys).astype(np.float32), widths


def cache_path(cache, bundle, split):
    """Where the trunk features of bundle on split are kept in cache: named
    by the model graph's hash, so that another bundle (a retrain, an
    ensemble of other members) on the same workdir never reads them."""
    h = hashlib.sha256()
    with open(os.path.join(bundle, "model.onnx"), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return os.path.join(cache, f"emb_{split}_{h.hexdigest()[:16]}.npz")


def load_workdir(workdir, bundle, cache=None):
    """Per split: keys, trunk features, the bundle's y, the queries.jsonl rows
    (the features kept in cache, per bundle, when it is given)."""
    from .data import read_keys
    queries = {}
    with open(os.path.join(workdir, "queries.jsonl")) as f:
        for line in f:
            q = json.loads(line)
            queries[q["key"]] = q
    sess = trunk_session(os.path.join(bundle, "model.onnx"))
    parts = {}
    for split in ("train", "val", "test"):
        keys = read_keys(os.path.join(workdir, f"{split}.keys.txt"))
        path = cache and cache_path(cache, bundle, split)
        if path and os.path.exists(path):
            with np.load(path) as c:
                feat, y, widths = c["feat"], c["y"], list(c["widths"])
        else:
            with np.load(os.path.join(workdir, f"{split}.npz")) as z:
                feat, y, widths = embed(sess, z)
            if path:
                np.savez(path, feat=feat, y=y, widths=np.array(widths))
        if len(keys) != len(y):
            raise SystemExit(f"targets: {split}: {len(keys)} keys, {len(y)} tensors")
        parts[split] = {"keys": keys, "feat": feat, "y": y, "q": [queries[k] for k in keys], "widths": widths}
    return parts


def trunk_layout(widths, k, plan_dim=6):
    """Per trunk tensor (K, channels, plan width): each is K·C pooled
    sub-tree features followed by its plan part."""
    out = []
    for w in widths:
        c, r = divmod(int(w) - plan_dim, k)
        if r:
            raise SystemExit(f"targets: a trunk tensor of width {w} is not K={k} sub-trees of C channels + {plan_dim}")
        out.append((k, c, plan_dim))
    return out


# ------------------------------------------------------------------ heads

class Pool(torch.nn.Module):
    """The trunk tensors → a compact, position-free summary: per member the
    maximum and the mean over the K sub-trees of its pooled channels, its
    plan part, and the CPU output. (The members' own dense layers read the
    K·C features tied to sub-tree positions; a head on those overfits the
    training templates: models/README.md.)"""

    def __init__(self, layout):
        super().__init__()
        self.layout = [tuple(x) for x in layout]   # per member (K, C, plan width)

    def forward(self, feat, y):
        parts, at = [], 0
        for k, c, p in self.layout:
            h = feat[:, at:at + k * c].reshape(-1, k, c)
            parts += [h.amax(1), h.mean(1), feat[:, at + k * c:at + k * c + p]]
            at += k * c + p
        return torch.cat(parts + [y], 1)


class Head(torch.nn.Module):
    """Pool → standardize → Linear → ReLU → Dropout → Linear: one normalized
    ln target; with skip, plus a linear function of the standardized
    inputs (initialized to 0)."""

    def __init__(self, pool, mean, std, hidden, dropout=0.2, skip=False):
        super().__init__()
        self.pool = pool
        self.register_buffer("mean", torch.from_numpy(mean).float())
        self.register_buffer("scale", torch.from_numpy(1.0 / std).float())
        self.net = torch.nn.Sequential(torch.nn.Linear(len(mean), hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
                                       torch.nn.Linear(hidden, 1))
        self.lin = None
        if skip:
            self.lin = torch.nn.Linear(len(mean), 1)
            torch.nn.init.zeros_(self.lin.weight)
            torch.nn.init.zeros_(self.lin.bias)

    def forward(self, feat, y):
        x = (self.pool(feat, y) - self.mean) * self.scale
        if self.lin is None:
            return self.net(x)
        return self.net(x) + self.lin(x)


class Mean(torch.nn.Module):
    """The mean of several heads (seeds) of one target."""

    def __init__(self, heads):
        super().__init__()
        self.heads = torch.nn.ModuleList(heads)

    def forward(self, feat, y):
        return torch.stack([h(feat, y) for h in self.heads], 0).mean(0)


def head_inputs(part):
    return part["feat"], part["y"].reshape(-1, 1)


def fit_head(layout, train_x, train_y, val_x, val_y, hidden, seed=1, epochs=300, patience=20, lr=1e-3, batch=128,
             skip=False):
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    pool = Pool(layout)
    with torch.no_grad():
        xs = pool(torch.from_numpy(train_x[0]), torch.from_numpy(train_x[1])).numpy()
    mean, std = xs.mean(0), xs.std(0)
    std[std < 1e-6] = 1.0
    model = Head(pool, mean, std, hidden, skip=skip)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-4)
    tf, ty, tt = (torch.from_numpy(a) for a in (*train_x, train_y.astype(np.float32)))
    vf, vy, vt = (torch.from_numpy(a) for a in (*val_x, val_y.astype(np.float32)))
    best, best_loss, since, n_ep = None, float("inf"), 0, 0
    for epoch in range(epochs):
        model.train()
        perm = torch.from_numpy(rng.permutation(len(tt)))
        for lo in range(0, len(perm), batch):
            idx = perm[lo:lo + batch]
            loss = torch.mean((model(tf[idx], ty[idx]).squeeze(1) - tt[idx]) ** 2)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            vl = float(torch.mean((model(vf, vy).squeeze(1) - vt) ** 2))
        n_ep = epoch + 1
        if vl < best_loss - 1e-7:
            best, best_loss, since = copy.deepcopy(model.state_dict()), vl, 0
        else:
            since += 1
            if since >= patience:
                break
    model.load_state_dict(best)
    return model.eval(), best_loss, n_ep


def head_predict(model, x):
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x[0]), torch.from_numpy(x[1])).squeeze(1).numpy()


def train_target(parts, layout, target, lo, hi, log, seeds=SEEDS):
    """The head of one target: the mean of len(seeds) heads, the width
    and the linear path (HIDDEN × SKIP) picked on validation MSE, and its
    validation sigma; parts are train/val/test with "ln" per query."""
    norm = lambda v: (v - lo) / (hi - lo)
    tr, va = parts["train"], parts["val"]
    best = None
    for h in HIDDEN:
        for skip in SKIP:
            heads, eps = [], []
            for seed in seeds:
                m, _, ep = fit_head(layout, head_inputs(tr), norm(tr["ln"]), head_inputs(va), norm(va["ln"]), h, seed,
                                    skip=skip)
                heads.append(m)
                eps.append(ep)
            model = Mean(heads).eval()
            loss = float(np.mean((head_predict(model, head_inputs(va)) - norm(va["ln"])) ** 2))
            log(f"  {target}: hidden {h}{' + linear' if skip else ''}, {len(seeds)} seeds ({eps} epochs): "
                f"validation MSE {loss:.5f}")
            if best is None or loss < best[1]:
                best = (model, loss, eps, h, skip)
    m, loss, eps, h, skip = best
    res = lo + head_predict(m, head_inputs(va)) * (hi - lo) - va["ln"]
    return m, {"hidden": h, "linear": skip, "seeds": list(seeds), "epochs": eps, "val_mse": loss,
               "sigma": float(np.std(res))}


# ------------------------------------------------------------------ baselines

def loglinear(x_train, y_train, x_test):
    a, b = np.polyfit(np.asarray(x_train, float), np.asarray(y_train, float), 1)
    return a * np.asarray(x_test, float) + b


def trino_baseline(train, test, target):
    """Trino's own estimate, log-linear on train: Σ memoryCost for memory,
    Σ cpuCost for elapsed (Trino has no time estimate); a query without one
    gets the training mean."""
    field, known = ("memcost", "memknown") if target == "peak_memory" else ("trino_cpu_cost", "trino_cost_known")
    ok = lambda p: np.array([q[known] > 0 and q[field] > 0 for q in p["q"]])
    x = lambda p: np.log1p([q[field] for q in p["q"]])
    kt = ok(train)
    pred = np.full(len(test["ln"]), float(train["ln"].mean()))
    ks = ok(test)
    if kt.sum() >= 2 and ks.any():
        pred[ks] = loglinear(x(train)[kt], train["ln"][kt], x(test)[ks])
    return pred, {"with_estimates": f"{int(ks.sum())}/{len(ks)}"}


def run_baselines(parts, target, cpu_ln, which, log):
    tr, va, te = parts["train"], parts["val"], parts["test"]
    out = {"median of training": (np.full(len(te["ln"]), float(np.median(tr["ln"]))), {})}
    name = "Trino memoryCost (log-linear)" if target == "peak_memory" else "Trino cpuCost (log-linear)"
    out[name] = trino_baseline(tr, te, target)
    out["log-linear on the model's CPU"] = (loglinear(cpu_ln["train"], tr["ln"], cpu_ln["test"]), {})
    lo, hi = float(tr["ln"].min()), float(tr["ln"].max())
    relabel = lambda p: [dict(q, ln_cpu_s=float(v)) for q, v in zip(p["q"], p["ln"])]
    qs = {s: relabel(parts[s]) for s in ("train", "val", "test")}
    for b in which:
        t0 = time.time()
        fn = {"logbin": B.logbin, "tfidf_gbr": B.tfidf_gbr, "svr": B.svr}[b]
        pred, info = fn(qs["train"], qs["val"], qs["test"], lo, hi)
        out[{"logbin": "log binning", "tfidf_gbr": "SQL TF-IDF + GBR", "svr": "SVR"}[b]] = (np.asarray(pred), info)
        log(f"  {target}: baseline {b} in {time.time() - t0:.0f} s")
    return out


def qsummary(y, p, sigma=None):
    q = qerrors(y, p)
    s = {"n": int(len(y)), "qerror_p50": float(np.median(q)), "qerror_p90": float(np.percentile(q, 90)),
         "qerror_p95": float(np.percentile(q, 95)), "qerror_max": float(q.max())}
    if sigma is not None:
        z = 1.2815515655446004  # the 80% interval
        s["coverage_80"] = float(np.mean(np.abs(np.asarray(y) - np.asarray(p)) <= z * sigma))
    return s


# ------------------------------------------------------------------ splits

def attach(parts, labels, target):
    """parts with "ln" of target; queries without the label are dropped."""
    out = {}
    for s, p in parts.items():
        keep = np.array([target in labels.get(k, {}) for k in p["keys"]])
        out[s] = {"keys": [k for k, ok in zip(p["keys"], keep) if ok], "feat": p["feat"][keep], "y": p["y"][keep],
                  "q": [dict(q, **{f: labels[q["key"]][f] for f in ("memcost", "memknown")})
                        for q, ok in zip(p["q"], keep) if ok],
                  "ln": np.array([labels[k][target] for k, ok in zip(p["keys"], keep) if ok], np.float64)}
    return out


def scale_factor(scale):
    if scale == "tiny":
        return 0.01
    try:
        return float(scale[2:]) if scale.startswith("sf") else -1
    except ValueError:
        return -1


def scale_split(parts):
    """training.ApplyScaleSplit with "largest": every query at the largest
    scale tests; the others keep train/val, test templates train."""
    held = max((q["scale"] for p in parts.values() for q in p["q"] if q.get("scale")), key=scale_factor)
    cat = lambda f, sel: np.concatenate([f(parts[s])[sel[s]] for s in parts])
    sel = {}
    for name in ("train", "val", "test"):
        sel[name] = {}
        for s, p in parts.items():
            at = np.array([q.get("scale") == held for q in p["q"]])
            if name == "test":
                sel[name][s] = at
            elif name == "val":
                sel[name][s] = ~at if s == "val" else np.zeros(len(at), bool)
            else:
                sel[name][s] = ~at if s in ("train", "test") else np.zeros(len(at), bool)
    out = {}
    for name in ("train", "val", "test"):
        m = sel[name]
        out[name] = {"feat": cat(lambda p: p["feat"], m), "y": cat(lambda p: p["y"], m),
                     "ln": cat(lambda p: p["ln"], m),
                     "keys": [k for s in parts for k, ok in zip(parts[s]["keys"], m[s]) if ok],
                     "q": [q for s in parts for q, ok in zip(parts[s]["q"], m[s]) if ok]}
    return out, held


# ------------------------------------------------------------------ graphs

def export_head(model, d, path):
    kw = dict(input_names=["feat", "ycpu"], output_names=["out"],
              dynamic_axes={"feat": {0: "B"}, "ycpu": {0: "B"}, "out": {0: "B"}}, opset_version=17)
    sample = (torch.zeros((2, d)), torch.zeros((2, 1)))
    try:
        torch.onnx.export(model, sample, path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, sample, path, **kw)


def splice(base_path, extra, out_path, inputs_map):
    """base_path's graph plus each (prefix, onnx path, output name) of extra,
    its inputs renamed by inputs_map (head input → a tensor of base), its
    single output renamed to output name; base's nodes and outputs unchanged."""
    import onnx
    from onnx import compose, helper
    base = onnx.load(base_path)
    g = base.graph
    for prefix, path, out_name, feeds in extra:
        h = onnx.load(path)
        ops = lambda m: sorted((o.domain, o.version) for o in m.opset_import)
        if ops(h) != ops(base):
            raise SystemExit(f"targets: {path}: opset {h.opset_import} differs from the bundle's")
        p = compose.add_prefix(h, prefix, rename_inputs=False)
        ren = {n: feeds[n] for n in [i.name for i in p.graph.input]}
        ren[p.graph.output[0].name] = out_name
        for node in p.graph.node:
            node.input[:] = [ren.get(x, x) for x in node.input]
            node.output[:] = [ren.get(x, x) for x in node.output]
        g.node.extend(p.graph.node)
        g.initializer.extend(p.graph.initializer)
        o = copy.deepcopy(p.graph.output[0])
        o.name = out_name
        g.output.append(o)
    onnx.checker.check_model(base)
    onnx.save(base, out_path)


def concat_feat_node(base_path, tmp_path):
    """base_path with one more node: targets_feat = Concat(TRUNK..., axis 1)
    after flattening each to (B, ·) — the heads' trunk input."""
    import onnx
    from onnx import TensorProto, helper
    m = onnx.load(base_path)
    flat = []
    for i, name in enumerate(TRUNK):
        m.graph.initializer.append(helper.make_tensor(f"targets_shape{i}", TensorProto.INT64, [2], [0, -1]))
        m.graph.node.append(helper.make_node("Reshape", [name, f"targets_shape{i}"], [f"targets_flat{i}"],
                                             name=f"targets_flat{i}"))
        flat.append(f"targets_flat{i}")
    m.graph.node.append(helper.make_node("Concat", flat, ["targets_feat"], axis=1, name="targets_feat"))
    onnx.save(m, tmp_path)


def run_onnx(path, feed, outputs):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return s.run(outputs, feed)


def onnx_outputs(path, z, outputs, batch=256):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    n = z["op"].shape[0]
    got = [[] for _ in outputs]
    for lo in range(0, n, batch):
        r = s.run(outputs, {k: np.ascontiguousarray(z[k][lo:lo + batch]) for k in names})
        for i, a in enumerate(r):
            got[i].append(a.reshape(-1))
    return [np.concatenate(g) for g in got]


# ------------------------------------------------------------------ text

def text_targets(workdir, labels, manifest_text, log, seed=3):
    """The text stage's quantile networks per target (trainer.text.fit with
    the CPU model's settings), calibrated on validation; returns {target:
    (model, section)} and the text parts."""
    parts = {s: T.load(workdir, s) for s in ("train", "val", "test")}
    tr = manifest_text.get("training", {})
    out = {}
    for name in TARGETS:
        p = {}
        for s, part in parts.items():
            keep = np.array([name in labels.get(k, {}) for k in part["keys"]])
            p[s] = {"x": part["x"][keep], "keys": [k for k, ok in zip(part["keys"], keep) if ok],
                    "y": np.array([labels[k][name] for k, ok in zip(part["keys"], keep) if ok], np.float32)}
        t0 = time.time()
        model, hist, best = T.fit(p["train"], p["val"], p["train"]["x"].shape[1], seed, 200, 15, 1e-3, 64,
                                  tr.get("hidden", 64), tr.get("dropout", 0.2))
        margin = T.calibrate(p["val"]["y"], T.predict(model, p["val"]["x"]), manifest_text.get("coverage_target", 0.8))
        model = T.Calibrated(model, margin).eval()
        mets = {}
        for s in ("val", "test"):
            q = T.predict(model, p[s]["x"])
            m = qsummary(p[s]["y"], q[:, 1])
            m.update(T.interval_metrics(p[s]["y"], q))
            mets[s] = m
        log(f"  text {name}: {len(hist)} epochs in {time.time() - t0:.0f} s; test median q-error "
            f"{mets['test']['qerror_p50']:.3f}, [q10, q90] covers {mets['test']['coverage_10_90']:.2f}")
        out[name] = (model, {"output": TARGETS[name]["text_output"], "unit": "ln " + TARGETS[name]["unit"],
                             "conformal_margin_ln": margin, "training": {"epochs": len(hist), "seed": seed},
                             "metrics": mets}, p)
    return out, parts


# ------------------------------------------------------------------ text blend

BLEND_GRID = np.round(np.arange(0.0, 1.0001, 0.05), 2)   # the text stage's weights tried


def fit_text_blend(y, head, text, grid=BLEND_GRID):
    """The weight w of the text stage's median in the served number
    (1 − w)·ln head + w·ln text that minimizes the mean absolute ln error
    on (validation) queries y (the median q-error is exp of the median
    absolute ln error; their mean is the smoother statistic of the same
    errors), the smallest such w on ties, and the blend's sigma (the
    standard deviation of its ln residuals there)."""
    y, head, text = (np.asarray(a, np.float64) for a in (y, head, text))
    maes = [float(np.mean(np.abs((1 - w) * head + w * text - y))) for w in grid]
    w = float(grid[int(np.argmin(maes))])
    return w, float(np.std((1 - w) * head + w * text - y)), dict(zip((float(g) for g in grid), maes))


def text_fit(x_train, y_train, x_val, y_val, manifest_text, seed=3):
    """One text-stage quantile network of a target, as text_targets trains
    it (trainer.text.fit with the CPU model's settings), calibrated on
    (x_val, y_val)."""
    tr = manifest_text.get("training", {})
    model, hist, _ = T.fit({"x": x_train, "y": y_train}, {"x": x_val, "y": y_val}, x_train.shape[1], seed, 200, 15,
                           1e-3, 64, tr.get("hidden", 64), tr.get("dropout", 0.2))
    margin = T.calibrate(y_val, T.predict(model, x_val), manifest_text.get("coverage_target", 0.8))
    return T.Calibrated(model, margin).eval(), len(hist), margin


FAR_LN_ROWS = 1.0   # estimator's farLnRows: beyond the largest training table by e^1


def text_tables(workdir, split, n):
    """Per query of the text split (n of them), the sizes of the tables it
    names (text_<split>.tables.jsonl: [{"rows", "bytes", "known"}, ...]);
    none for each when the text stage reads the text alone (the text step
    ran without --table-stats and wrote no such file): such a stage is never
    far from its training (estimator.textEstimate)."""
    path = os.path.join(workdir, f"text_{split}.tables.jsonl")
    if not os.path.exists(path):
        return [[] for _ in range(n)]
    with open(path) as f:
        tables = [json.loads(line) for line in f if line.strip()]
    if len(tables) != n:
        raise SystemExit(f"targets: {path} holds {len(tables)} queries, the text split {n}")
    return tables


def max_ln_rows(tables):
    """featurize.MaxLnRows: the largest ln(1 + rows) of a statement's known tables."""
    return max([math.log1p(t["rows"]) for t in tables if t.get("known") and (t.get("rows") or 0) > 0], default=0.0)


def text_far(tables, max_train):
    """The serving side's textFar (estimator.tableStats): a named table's size
    unknown, or larger by e^FAR_LN_ROWS than any the text model trained on."""
    return any(not t.get("known") for t in tables) or (max_train > 0 and max_ln_rows(tables) > max_train + FAR_LN_ROWS)


def served_blend(head, text, w, far):
    """The model stage's served number (estimator.blendTextTargets): the
    blend where the text stage is in its range, the head alone where far."""
    far = np.asarray(far, bool)
    return np.where(far, head, (1 - w) * head + w * text)


def blend_rows(y, head, text, w, sigma, head_sigma, text_q=None, far=None):
    """The result rows of the served blend and of its two parts."""
    far = np.zeros(len(y), bool) if far is None else np.asarray(far, bool)
    served = qsummary(y, served_blend(head, text, w, far))
    y = np.asarray(y, np.float64)
    served["coverage_80"] = float(np.mean(np.abs(y - served_blend(head, text, w, far))
                                          <= 1.2815515655446004 * np.where(far, head_sigma, min(sigma, head_sigma))))
    rows = {"Prestroid served: plan head + text stage (weight on val; head alone where the text is far)":
            dict(served, text_weight=w, far=int(far.sum())),
            "plan head alone": qsummary(y, head, head_sigma),
            "text stage alone": qsummary(y, text)}
    if text_q is not None:
        rows["text stage alone"].update(T.interval_metrics(np.asarray(y, np.float32), text_q))
    return rows


def blend(a, log):
    """--blend: the text-stage weight of every target of a targets bundle,
    fitted on the validation templates (the bundle's own heads and text
    outputs), written into its manifest (targets.<label>.text_blend), and
    evaluated beside the heads alone on the test templates and with the
    largest scale held out (heads and text models refitted without it, the
    weight fitted on the rest of validation)."""
    path = os.path.join(a.blend, "manifest.json")
    with open(path) as f:
        manifest = json.load(f)
    if not manifest.get("targets") or not (manifest.get("text") or {}).get("targets"):
        raise SystemExit(f"targets: {a.blend} has no targets of both the model and the text stage")
    labels = read_labels(a.workdir, a.records_root)
    tparts = {s: T.load(a.workdir, s) for s in ("train", "val", "test")}
    for s, part in tparts.items():
        part["tables"] = text_tables(a.workdir, s, len(part["keys"]))
    max_train = float(manifest["text"].get("max_ln_rows", 0))
    outs = {name: [TARGETS[name]["output"], TARGETS[name]["text_output"]] for name in TARGETS}
    pred = {}
    for s in ("val", "test"):
        from .data import read_keys
        keys = read_keys(os.path.join(a.workdir, f"{s}.keys.txt"))
        if keys != tparts[s]["keys"]:
            raise SystemExit(f"targets: {s}: the plan and text splits hold other queries")
        with np.load(os.path.join(a.workdir, f"{s}.npz")) as z:
            got = onnx_outputs(os.path.join(a.blend, "model.onnx"), z, [o[0] for o in outs.values()])
        txt = run_onnx(os.path.join(a.blend, "text.onnx"), {"x": np.ascontiguousarray(tparts[s]["x"])},
                       [o[1] for o in outs.values()])
        for i, name in enumerate(TARGETS):
            t = manifest["targets"][name]
            keep = np.array([name in labels.get(k, {}) for k in keys])
            head = t["min"] + np.clip(got[i].astype(np.float64), -0.5, 1.5) * (t["max"] - t["min"])
            pred[(s, name)] = {"y": np.array([labels[k][name] for k, ok in zip(keys, keep) if ok]),
                               "head": head[keep], "text": txt[i][keep][:, 1].astype(np.float64),
                               "text_q": txt[i][keep],
                               "far": np.array([text_far(tb, max_train) for tb in tparts[s]["tables"]])[keep]}
    results = {}
    res = {"description": "the held-out templates of data/split.json (the workdir's test split): the bundle's "
                          "plan heads and text stage, the weight fitted on the validation templates", "targets": {}}
    for name in TARGETS:
        v, te = pred[("val", name)], pred[("test", name)]
        near = ~v["far"]
        w, sigma, maes = fit_text_blend(v["y"][near], v["head"][near], v["text"][near])
        log(f"targets: {name}: text weight {w} (validation mean |ln error| {maes[w]:.4f}, heads alone "
            f"{maes[0.0]:.4f}), sigma {sigma:.3f}")
        manifest["targets"][name]["text_blend"] = {
            "weight": w, "sigma": sigma,
            "validation": {"n": int(near.sum()), "far": int((~near).sum()), "mean_abs_ln_error": maes[w],
                           "heads_alone": maes[0.0],
                           "served": qsummary(v["y"], served_blend(v["head"], v["text"], w, v["far"]), sigma),
                           "plan head alone": qsummary(v["y"], v["head"], manifest["targets"][name]["sigma"])}}
        res["targets"][name] = blend_rows(te["y"], te["head"], te["text"], w, sigma,
                                          manifest["targets"][name]["sigma"], te["text_q"], te["far"])
    results["template split"] = res
    if not a.skip_scale:
        results["scale split"] = blend_scale(a, manifest, labels, tparts, log)
    log(fmt_table(results, targets_order=tuple(TARGETS)))
    if a.results:
        os.makedirs(a.results, exist_ok=True)
        with open(os.path.join(a.results, "blend.json"), "w") as f:
            json.dump(clean(results), f, indent=2)
            f.write("\n")
    with open(path, "w") as f:
        json.dump(clean(manifest), f, indent=2)
        f.write("\n")
    log(f"targets: wrote {path}")


def blend_scale(a, manifest, labels, tparts, log):
    """The blend with the largest scale held out: per target the heads
    (train_target, the bundle's width) and the text model refitted on the
    other scales, the weight fitted on the rest of validation."""
    parts = load_workdir(a.workdir, a.bundle or a.blend, a.cache)
    layout = trunk_layout(parts["train"]["widths"], manifest["K"])
    res = {"description": "", "targets": {}}
    for name in TARGETS:
        p, held = scale_split(attach(parts, labels, name))
        res["description"] = (f"every query at {held}, the largest scale, held out: heads, text models and the "
                              f"weight refitted without it (the CPU trunk is the bundle's)")
        lo, hi = float(p["train"]["ln"].min()), float(p["train"]["ln"].max())
        global HIDDEN, SKIP
        keep, HIDDEN, SKIP = (HIDDEN, SKIP), (manifest["targets"][name]["head"]["hidden"],), \
            (bool(manifest["targets"][name]["head"].get("linear")),)
        try:
            model, info = train_target(p, layout, name, lo, hi, log)
        finally:
            HIDDEN, SKIP = keep
        head = {s: lo + head_predict(model, head_inputs(p[s])) * (hi - lo) for s in ("val", "test")}
        xrow = {k: (s, i) for s in tparts for i, k in enumerate(tparts[s]["keys"])}
        x = {s: np.stack([tparts[xrow[k][0]]["x"][xrow[k][1]] for k in p[s]["keys"]]) for s in p}
        ys = {s: p[s]["ln"].astype(np.float32) for s in p}
        t0 = time.time()
        tm, eps, margin = text_fit(x["train"], ys["train"], x["val"], ys["val"], manifest["text"])
        log(f"  text {name} without {held}: {eps} epochs in {time.time() - t0:.0f} s")
        tq = {s: T.predict(tm, x[s]) for s in ("val", "test")}
        tables = {s: [tparts[xrow[k][0]]["tables"][xrow[k][1]] for k in p[s]["keys"]] for s in p}
        max_train = max(max_ln_rows(tb) for tb in tables["train"])
        near = ~np.array([text_far(tb, max_train) for tb in tables["val"]])
        w, sigma, _ = fit_text_blend(p["val"]["ln"][near], head["val"][near], tq["val"][near, 1])
        far = np.array([text_far(tb, max_train) for tb in tables["test"]])
        res["targets"][name] = blend_rows(p["test"]["ln"], head["test"], tq["test"][:, 1].astype(np.float64), w, sigma,
                                          info["sigma"], tq["test"], far)
    return res


# ------------------------------------------------------------------ main

def fmt_table(res, targets_order=("cpu", "peak_memory", "elapsed")):
    lines = []
    for split, r in res.items():
        lines.append(f"### {split} ({r['description']})\n")
        lines.append("| model | " + " | ".join(f"{t} median / p90 (n)" for t in targets_order) + " |")
        lines.append("|---|" + "---|" * len(targets_order))
        rows = {}
        for t in targets_order:
            for model, m in r["targets"].get(t, {}).items():
                rows.setdefault(model, {})[t] = m
        for model, by in rows.items():
            cells = [f"{by[t]['qerror_p50']:.2f} / {by[t]['qerror_p90']:.2f} ({by[t]['n']})" if t in by else ""
                     for t in targets_order]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    global HIDDEN, SKIP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--bundle", help="the gated bundle whose trunk the heads read (not modified)")
    ap.add_argument("--out", help="write the bundle with the new outputs here (replaced whole)")
    ap.add_argument("--results", help="directory for the evaluation JSON and report.md")
    ap.add_argument("--records-root", default=".", help="the directory meta.json's record paths are relative to")
    ap.add_argument("--baselines", default="logbin,tfidf_gbr", help="trainer.baselines refitted per target ('' none)")
    ap.add_argument("--cache", help="directory to keep the trunk features in between runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-scale", action="store_true", help="no scale hold-out evaluation")
    ap.add_argument("--blend", metavar="BUNDLE", help="fit the text-stage weight of every target of this targets "
                    "bundle on validation and write it into its manifest (--bundle: the CPU-only bundle, for the "
                    "scale hold-out's trunk features; default BUNDLE itself)")
    ap.add_argument("--hidden", default=",".join(map(str, HIDDEN)), help="the head widths tried")
    ap.add_argument("--linear", choices=("both", "yes", "no"), default="both",
                    help="heads with a linear path beside the hidden layer, without, or both tried")
    a = ap.parse_args(argv)
    HIDDEN = tuple(int(h) for h in a.hidden.split(","))
    SKIP = {"both": (False, True), "yes": (True,), "no": (False,)}[a.linear]
    torch.set_num_threads(a.threads)
    log = lambda s: print(s, file=sys.stderr, flush=True)
    which = [b for b in a.baselines.split(",") if b]
    if a.cache:
        os.makedirs(a.cache, exist_ok=True)
    if a.blend:
        return blend(a, log)
    if not a.bundle:
        ap.error("--bundle is required (without --blend)")

    t0 = time.time()
    labels = read_labels(a.workdir, a.records_root)
    parts = load_workdir(a.workdir, a.bundle, a.cache)
    log(f"targets: labels of {len(labels)} records, trunk features {parts['train']['feat'].shape[1]} "
        f"({time.time() - t0:.0f} s)")
    with open(os.path.join(a.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    if manifest.get("targets"):
        raise SystemExit(f"targets: {a.bundle} already has targets: start from its CPU-only bundle")
    tgt = manifest["target"]
    cpu_ln = lambda y: T_denorm(y, tgt)
    layout = trunk_layout(parts["train"]["widths"], manifest["K"])

    results, heads, sections = {}, {}, {}
    splits = [("template split", "the held-out templates of data/split.json (the workdir's test split)", None)]
    if not a.skip_scale:
        splits.append(("scale split", "", "largest"))
    for split_name, desc, scale in splits:
        res = {"description": desc, "targets": {}}
        for name in TARGETS:
            p = attach(parts, labels, name)
            if scale:
                p, held = scale_split(p)
                res["description"] = (f"every query at {held}, the largest scale, held out: heads and baselines "
                                      f"refitted without it; the CPU trunk is the bundle's, trained on the "
                                      f"template split (it saw {held} queries of its training templates)")
            lo, hi = float(p["train"]["ln"].min()), float(p["train"]["ln"].max())
            log(f"targets: {split_name}: {name}: train {len(p['train']['ln'])}, val {len(p['val']['ln'])}, "
                f"test {len(p['test']['ln'])}")
            model, info = train_target(p, layout, name, lo, hi, log)
            pred = lo + head_predict(model, head_inputs(p["test"])) * (hi - lo)
            rows = {"Prestroid (this bundle)": dict(qsummary(p["test"]["ln"], pred, info["sigma"]), **info)}
            cl = {s: cpu_ln(p[s]["y"]) for s in ("train", "val", "test")}
            for bname, (bp, binfo) in run_baselines(p, name, cl, which, log).items():
                rows[bname] = dict(qsummary(p["test"]["ln"], bp), **binfo)
            res["targets"][name] = rows
            if "cpu" not in res["targets"]:
                ycpu = np.array([q["ln_cpu_s"] for q in p["test"]["q"]])
                res["targets"]["cpu"] = {"Prestroid (this bundle)": qsummary(ycpu, cl["test"])}
            if scale is None:
                heads[name] = (model, lo, hi, info)
        results[split_name] = res
        log(fmt_table({split_name: res}))

    if a.results:
        os.makedirs(a.results, exist_ok=True)
        for split_name, res in results.items():
            with open(os.path.join(a.results, split_name.replace(" ", "-") + ".json"), "w") as f:
                json.dump(clean(res), f, indent=2)
                f.write("\n")
        with open(os.path.join(a.results, "report.md"), "w") as f:
            f.write("# Beyond CPU: q-error per target (python -m trainer.targets)\n\n" + fmt_table(results) + "\n")
    if a.out:
        build(a, manifest, heads, labels, parts, log)


def T_denorm(y, tgt):
    from .metrics import denormalize
    return denormalize(y, tgt["min"], tgt["max"], transform=tgt["transform"])


def build(a, manifest, heads, labels, parts, log):
    """The bundle with the heads spliced into model.onnx and the text
    targets into text.onnx; checks that y and q are unchanged."""
    tmp = a.out.rstrip("/") + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    shutil.copytree(a.bundle, tmp)
    base = os.path.join(a.bundle, "model.onnx")
    feat_path = os.path.join(tmp, "feat.onnx")
    concat_feat_node(base, feat_path)
    extra = []
    d = parts["train"]["feat"].shape[1]
    for name, (model, lo, hi, info) in heads.items():
        hp = os.path.join(tmp, f"head_{name}.onnx")
        export_head(model, d, hp)
        extra.append((f"t_{name}_", hp, TARGETS[name]["output"], {"feat": "targets_feat", "ycpu": "y"}))
    out_model = os.path.join(tmp, "model.onnx")
    splice(feat_path, extra, out_model, None)
    for f in [feat_path] + [e[1] for e in extra]:
        os.remove(f)

    # CPU unchanged, heads equal to PyTorch, on the whole test split.
    outs = ["y"] + [TARGETS[n]["output"] for n in heads]
    with np.load(os.path.join(a.workdir, "test.npz")) as z:
        new = onnx_outputs(out_model, z, outs)
        old = onnx_outputs(base, z, ["y"])[0]
    check = {"test_queries": int(len(old)), "cpu_max_abs_diff_vs_input_bundle": float(np.max(np.abs(new[0] - old)))}
    if check["cpu_max_abs_diff_vs_input_bundle"] != 0.0:
        raise SystemExit(f"targets: the CPU output changed (max |diff| {check['cpu_max_abs_diff_vs_input_bundle']:.2e})")
    te = parts["test"]
    for i, name in enumerate(heads):
        ref = head_predict(heads[name][0], head_inputs(te))
        diff = float(np.max(np.abs(new[i + 1] - ref)))
        check[f"{name}_onnx_vs_torch_max_abs_diff"] = diff
        if diff > PARITY_TOL:
            raise SystemExit(f"targets: {name}: ONNX Runtime differs from PyTorch by {diff:.2e}")

    # golden.npz: the expected output of every target on the golden cases.
    gpath = os.path.join(tmp, "golden.npz")
    with np.load(gpath) as g:
        gold = {k: g[k] for k in g.files}
    got = onnx_outputs(out_model, gold, outs)
    if float(np.max(np.abs(got[0] - gold["expected"]))) > 1e-6:
        raise SystemExit("targets: golden CPU predictions changed")
    for i, name in enumerate(heads):
        gold["expected_" + name] = got[i + 1].astype(np.float32)
    np.savez_compressed(gpath, **gold)

    # The manifest's targets section.
    manifest = copy.deepcopy(manifest)
    manifest["targets"] = {}
    for name, (model, lo, hi, info) in heads.items():
        t = TARGETS[name]
        manifest["targets"][name] = {"output": t["output"], "transform": t["transform"], "min": lo, "max": hi,
                                     "sigma": info["sigma"], "golden": "expected_" + name,
                                     "head": {"hidden": info["hidden"], "linear": info["linear"], "seeds": info["seeds"],
                                              "epochs": info["epochs"], "val_mse": info["val_mse"],
                                              "inputs": list(TRUNK) + ["y"]}}
    manifest["targets_check"] = check
    manifest["model_id"] = manifest["model_id"] + "-targets"

    # The text stage's targets.
    if manifest.get("text"):
        text_models, tparts = text_targets(a.workdir, labels, manifest["text"], log)
        text_path = os.path.join(tmp, "text.onnx")
        extra = []
        for name, (model, section, _) in text_models.items():
            hp = os.path.join(tmp, f"text_{name}.onnx")
            T.export(model, tparts["train"]["x"].shape[1], hp)
            extra.append((f"t_{name}_", hp, section["output"], {"x": "x"}))
        old_q = T.onnx_predict(text_path, tparts["test"]["x"])
        splice(text_path, extra, text_path + ".new", None)
        for e in extra:
            os.remove(e[1])
        os.replace(text_path + ".new", text_path)
        outs = ["q"] + [s["output"] for _, s, _ in text_models.values()]
        got = run_onnx(text_path, {"x": np.ascontiguousarray(tparts["test"]["x"])}, outs)
        if float(np.max(np.abs(got[0] - old_q))) != 0.0:
            raise SystemExit("targets: the text stage's CPU output q changed")
        n_gold = len(manifest["text"].get("golden", []))
        gold_keys = [c["name"] for c in manifest["text"].get("golden", [])]
        if gold_keys != tparts["test"]["keys"][:n_gold]:
            raise SystemExit("targets: the text golden cases are not the first test queries")
        manifest["text"]["targets"] = {}
        for i, (name, (model, section, p)) in enumerate(text_models.items()):
            full = got[i + 1]
            ref = T.predict(model, tparts["test"]["x"])
            diff = float(np.max(np.abs(full - ref)))
            if diff > 1e-4:
                raise SystemExit(f"targets: text {name}: ONNX Runtime differs from PyTorch by {diff:.2e}")
            section["onnx_parity_max_abs_diff"] = diff
            manifest["text"]["targets"][name] = section
            for j, c in enumerate(manifest["text"].get("golden", [])):
                c.setdefault("expected_targets", {})[name] = [float(v) for v in full[j]]
    with open(os.path.join(tmp, "manifest.json"), "w") as f:
        json.dump(clean(manifest), f, indent=2)
        f.write("\n")
    if os.path.exists(a.out):
        shutil.rmtree(a.out)
    os.replace(tmp, a.out)
    log(f"targets: wrote {a.out} ({json.dumps(check)})")


if __name__ == "__main__":
    main()
