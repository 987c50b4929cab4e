"""The text stage's model (docs/design.md §5.1): quantiles of ln(CPU seconds) from the
statement's SQL text and session alone, no plan, for the cascade's
microsecond stage (route at once when the interval lies inside one class).

Input: the hashed token vectors Go writes (`prestroid train --steps text`,
featurize.EncodeText): WORKDIR/text_{train,val,test}.npz with x float32
(n, dim) and y float32 (n,) ln CPU seconds, optionally warm (n,) (1: the
shape had run on that Trino JVM before, 0: its first run there, -1:
unknown) and w (n,) each row's weight in the loss (`--warm-labels`),
text_{split}.keys.txt, and queries.jsonl for the golden cases' SQL.

    python -m trainer.text --workdir W --out models/default

The network: dim → hidden → hidden/4 → 3, the three outputs made monotone
(q10 = a, q50 = a + softplus(b), q90 = q50 + softplus(c)) so the quantiles
never cross; pinball loss on ln CPU seconds, Adam, early stopping on the
validation loss. Adds to the bundle in --out: text.onnx (input "x" (B, dim),
output "q" (B, 3) ln CPU seconds) and the manifest's "text" section (dim,
quantiles, test metrics, golden cases as SQL the Go loader re-encodes and
re-scores). Writes WORKDIR/text_report.json and
predictions_test_text.json ({key: q50}).
"""
import argparse
import copy
import json
import os
import random
import time

import numpy as np
import torch
import torch.nn.functional as F

from .metrics import clean, metrics

QUANTILES = (0.1, 0.5, 0.9)
GOLDEN_CASES = 8
PARITY_TOL = 1e-4
FEATURIZER = "hashed-tokens-v1"     # featurize.EncodeText; bump both together
FEATURIZER_STATS = "hashed-tokens-tablestats-v2"  # featurize.EncodeTextStats (+ table statistics)


class TextQuantiles(torch.nn.Module):
    """x (B, dim) → (B, 3) ln CPU seconds at QUANTILES, non-crossing."""

    def __init__(self, dim, hidden=64, dropout=0.2):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(dim, hidden), torch.nn.ReLU(), torch.nn.Dropout(dropout),
            torch.nn.Linear(hidden, hidden // 4), torch.nn.ReLU(),
            torch.nn.Linear(hidden // 4, 3))

    def forward(self, x):
        o = self.net(x)
        q10 = o[:, 0:1]
        q50 = q10 + F.softplus(o[:, 1:2])
        q90 = q50 + F.softplus(o[:, 2:3])
        return torch.cat([q10, q50, q90], dim=1)


class Calibrated(torch.nn.Module):
    """Widens a model's [q10, q90] by the conformal margin (CQR): q10 - m,
    q50, q90 + m, with m fitted on held-out templates (calibrate)."""

    def __init__(self, model, margin):
        super().__init__()
        self.model = model
        self.register_buffer("shift", torch.tensor([[-margin, 0.0, margin]], dtype=torch.float32))

    def forward(self, x):
        return self.model(x) + self.shift


def calibrate(y, q, coverage):
    """The conformalized-quantile-regression margin (Romano et al. 2019):
    the ceil((n+1)·coverage)/n quantile of max(q10 - y, y - q90) over
    queries of templates the model was not trained on, so that
    [q10 - m, q90 + m] covers about `coverage` of such queries. Never
    negative: an interval is only widened."""
    if len(y) == 0:
        return 0.0
    s = np.maximum(q[:, 0] - y, y - q[:, 2])
    level = min(1.0, np.ceil((len(y) + 1) * coverage) / len(y))
    return max(0.0, float(np.quantile(s, level, method="higher")))


def pinball(pred, y, w=None):
    """Mean pinball loss over QUANTILES; pred (B, 3), y (B,); w (B,) row
    weights (None: all 1), the mean then weighted."""
    q = torch.tensor(QUANTILES, dtype=pred.dtype, device=pred.device)
    d = y.unsqueeze(1) - pred
    per = torch.maximum(q * d, (q - 1) * d).mean(dim=1)
    if w is None:
        return per.mean()
    return (per * w).sum() / torch.clamp(w.sum(), min=1e-12)


def load(workdir, split):
    path = os.path.join(workdir, f"text_{split}.npz")
    if not os.path.exists(path):
        return None
    with np.load(path) as z:
        x, y = z["x"].astype(np.float32), z["y"].astype(np.float32)
        warm = z["warm"].astype(np.float32) if "warm" in z.files else np.full(len(y), -1, np.float32)
        w = z["w"].astype(np.float32) if "w" in z.files else None
    with open(os.path.join(workdir, f"text_{split}.keys.txt")) as f:
        keys = [line.strip() for line in f if line.strip()]
    if len(keys) != len(y):
        raise ValueError(f"{path}: {len(y)} rows, {len(keys)} keys")
    return {"x": x, "y": y, "keys": keys, "warm": warm, "w": w}


def predict(model, x, batch=1024):
    model.eval()
    out = []
    with torch.no_grad():
        for lo in range(0, len(x), batch):
            out.append(model(torch.from_numpy(x[lo:lo + batch])).numpy())
    return np.concatenate(out) if out else np.zeros((0, 3), np.float32)


def fit(train, val, dim, seed, epochs, patience, lr, batch, hidden, dropout):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
    model = TextQuantiles(dim, hidden, dropout)
    opt = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=1e-5)
    xt, yt = torch.from_numpy(train["x"]), torch.from_numpy(train["y"])
    wt = torch.from_numpy(train["w"]) if train.get("w") is not None else None
    vx, vy = (torch.from_numpy(val["x"]), torch.from_numpy(val["y"])) if val else (xt, yt)
    vw = wt
    if val:
        vw = torch.from_numpy(val["w"]) if val.get("w") is not None else None
    best, best_loss, since, history = None, float("inf"), 0, []
    rng = np.random.default_rng(seed)
    for epoch in range(epochs):
        model.train()
        perm = rng.permutation(len(yt))
        total = 0.0
        for lo in range(0, len(perm), batch):
            idx = torch.from_numpy(perm[lo:lo + batch])
            loss = pinball(model(xt[idx]), yt[idx], None if wt is None else wt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        model.eval()
        with torch.no_grad():
            vl = float(pinball(model(vx), vy, vw))
        history.append({"epoch": epoch + 1, "train": total / len(yt), "val": vl})
        if vl < best_loss - 1e-6:
            best, best_loss, since = copy.deepcopy(model.state_dict()), vl, 0
        else:
            since += 1
            if since >= patience:
                break
    model.load_state_dict(best)
    return model.eval(), history, best_loss


BOUNDARIES = (1.0, 10.0, 30.0)   # class bounds in CPU seconds the routing view is reported for


def routing_view(y, q, bounds=BOUNDARIES):
    """Per class bound b (two classes: <= b, > b): the share of queries whose
    interval lies on one side (decidable without a plan), the share of
    those on the right side (vs the actual CPU), and the q50's class
    accuracy over all queries."""
    out = {}
    if len(y) == 0:
        return out
    for b in bounds:
        lb = np.log(b)
        inside = (q[:, 2] <= lb) | (q[:, 0] > lb)
        right = ((q[:, 2] <= lb) & (y <= lb)) | ((q[:, 0] > lb) & (y > lb))
        out[f"{b:g}s"] = {"decided": float(inside.mean()),
                          "decided_right": float(right.sum() / max(1, inside.sum())),
                          "q50_right": float(np.mean((q[:, 1] <= lb) == (y <= lb))),
                          "actual_above": float(np.mean(y > lb))}
    return out


def interval_metrics(y, q):
    """Coverage and width of the [q10, q90] interval, ln CPU seconds."""
    if len(y) == 0:
        return {}
    inside = (y >= q[:, 0]) & (y <= q[:, 2])
    width = np.exp(q[:, 2] - q[:, 0])
    return {"coverage_10_90": float(inside.mean()), "width_ratio_p50": float(np.median(width)),
            "width_ratio_p90": float(np.percentile(width, 90))}


def by_warmth(part, q, lo, hi):
    """The metrics of the rows of part that ran warm, cold and of unknown
    warmth apart (part["warm"]: 1, 0, -1), each with its count."""
    out = {}
    for name, code in (("warm", 1), ("cold", 0), ("unknown", -1)):
        sel = part["warm"] == code
        if sel.sum() < 2:
            continue
        m = metrics(part["y"][sel], q[sel, 1], lo, hi)
        m.update(interval_metrics(part["y"][sel], q[sel]))
        m["n"] = int(sel.sum())
        # the q50's median bias, ln(estimate / actual): > 0 too high
        m["median_ln_ratio"] = float(np.median(q[sel, 1] - part["y"][sel]))
        out[name] = m
    return out


def export(model, dim, path):
    model = model.cpu().eval()
    kw = dict(input_names=["x"], output_names=["q"], dynamic_axes={"x": {0: "B"}, "q": {0: "B"}},
              opset_version=17)
    sample = torch.zeros((2, dim), dtype=torch.float32)
    try:
        torch.onnx.export(model, (sample,), path, dynamo=False, **kw)
    except TypeError:
        torch.onnx.export(model, (sample,), path, **kw)


def onnx_predict(path, x):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return sess.run(["q"], {"x": np.ascontiguousarray(x)})[0]


def golden_cases(workdir, part, q, n=GOLDEN_CASES, split=None):
    """The first n queries of part as SQL + context + expected quantiles
    (+ the statistics of the tables each names, for the v2 encoding: the
    split's text_{split}.tables.jsonl)."""
    want = {k: i for i, k in enumerate(part["keys"][:n])}
    cases = [None] * len(want)
    tables = None
    if split is not None:
        path = os.path.join(workdir, f"text_{split}.tables.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                tables = [json.loads(line) for _, line in zip(range(n), f)]
    with open(os.path.join(workdir, "queries.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            i = want.get(r["key"])
            if i is None:
                continue
            cases[i] = {"name": r["key"], "sql": r["sql"], "catalog": r.get("catalog", ""),
                        "schema": r.get("schema", ""), "session": r.get("session") or {},
                        "expected": [float(v) for v in q[i]]}
            if tables is not None:
                cases[i]["tables"] = tables[i]
    return [c for c in cases if c is not None]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--out", required=True, help="the bundle directory the text model is added to")
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--patience", type=int, default=15)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=64,
                    help="first hidden layer (64: the default bundle's; 256 read 4x the weights per statement)")
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--featurizer", default=FEATURIZER, choices=(FEATURIZER, FEATURIZER_STATS),
                    help="the encoding the Go step wrote (with table statistics: " + FEATURIZER_STATS + ")")
    ap.add_argument("--max-ln-rows", type=float, default=0.0,
                    help="largest ln(1+rows) of a table named in training (the serving stage defers beyond it)")
    ap.add_argument("--coverage", type=float, default=0.8,
                    help="conformal calibration target for [q10, q90] on the validation templates (0: off)")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    manifest_path = os.path.join(a.out, "manifest.json")
    if not os.path.exists(manifest_path):
        raise SystemExit(f"text: {manifest_path} not found: run the train step first (the text model joins a bundle)")
    train, val, test = (load(a.workdir, s) for s in ("train", "val", "test"))
    if train is None or len(train["y"]) == 0:
        raise SystemExit("text: no training queries (text_train.npz)")
    if train["x"].shape[1] != a.dim:
        raise SystemExit(f"text: text_train.npz has dimension {train['x'].shape[1]}, --dim is {a.dim}")

    t0 = time.time()
    model, history, best_val = fit(train, val, a.dim, a.seed, a.epochs, a.patience, a.lr, a.batch, a.hidden,
                                   a.dropout)
    secs = time.time() - t0
    lo, hi = float(train["y"].min()), float(max(train["y"].max(), train["y"].min() + 1))
    report = {"epochs": len(history), "seconds": secs, "best_val_pinball": best_val, "history": history}
    if train.get("w") is not None:
        report["train_weights"] = {"rows": int(len(train["w"])), "sum": float(train["w"].sum()),
                                   "below_one": int((train["w"] < 1).sum())}
    margin = 0.0
    if a.coverage > 0 and val is not None and len(val["y"]):
        raw = predict(model, val["x"])
        margin = calibrate(val["y"], raw, a.coverage)
        if test is not None and len(test["y"]):
            report["test_uncalibrated"] = interval_metrics(test["y"], predict(model, test["x"]))
    model = Calibrated(model, margin).eval()
    report["conformal_margin_ln"] = margin
    mets = {}
    for name, part in (("val", val), ("test", test)):
        if part is None or len(part["y"]) == 0:
            continue
        q = predict(model, part["x"])
        m = metrics(part["y"], q[:, 1], lo, hi)
        m.update(interval_metrics(part["y"], q))
        m["routing"] = routing_view(part["y"], q)
        m["by_warmth"] = by_warmth(part, q, lo, hi)
        mets[name] = m
        if name == "test":
            with open(os.path.join(a.workdir, "predictions_test_text.json"), "w") as f:
                json.dump({k: float(v) for k, v in zip(part["keys"], q[:, 1])}, f)
    report["metrics"] = mets

    onnx_path = os.path.join(a.out, "text.onnx")
    tmp = onnx_path + ".tmp"
    export(model, a.dim, tmp)
    gold_split = "test" if test is not None and len(test["y"]) else "train"
    gold_part = test if gold_split == "test" else train
    ref = predict(model, gold_part["x"][:GOLDEN_CASES])
    got = onnx_predict(tmp, gold_part["x"][:GOLDEN_CASES])
    diff = float(np.max(np.abs(got - ref))) if len(ref) else 0.0
    if diff > PARITY_TOL:
        os.remove(tmp)
        raise SystemExit(f"text: ONNX Runtime differs from PyTorch by {diff:.2e} (tolerance {PARITY_TOL})")
    report["onnx_parity_max_abs_diff"] = diff
    os.replace(tmp, onnx_path)

    with open(manifest_path) as f:
        manifest = json.load(f)
    manifest["text"] = {
        "model": "text.onnx", "featurizer": a.featurizer, "dim": a.dim, "quantiles": list(QUANTILES),
        "input": "x", "output": "q",
        "conformal_margin_ln": margin, "coverage_target": a.coverage,
        "training": {"queries": int(len(train["y"])), "epochs": len(history), "seed": a.seed,
                     "hidden": a.hidden, "dropout": a.dropout, "torch": torch.__version__},
        "metrics": clean(mets),
        "golden": golden_cases(a.workdir, gold_part, ref,
                               split=gold_split if a.featurizer == FEATURIZER_STATS else None),
    }
    if a.featurizer == FEATURIZER_STATS and a.max_ln_rows > 0:
        manifest["text"]["max_ln_rows"] = a.max_ln_rows
    with open(manifest_path + ".tmp", "w") as f:
        json.dump(manifest, f, indent=2)
        f.write("\n")
    os.replace(manifest_path + ".tmp", manifest_path)
    with open(os.path.join(a.workdir, "text_report.json"), "w") as f:
        json.dump(clean(report), f, indent=2)
    t = mets.get("test", {})
    print(f"text: {len(history)} epochs in {secs:.0f} s; test q50 {t.get('qerror_p50', float('nan')):.3f} "
          f"p95 {t.get('qerror_p95', float('nan')):.3f}, [q10, q90] covers {t.get('coverage_10_90', float('nan')):.2f}; "
          f"(conformal margin x{np.exp(margin):.2f}); ONNX parity {diff:.1e}; wrote {onnx_path}")


if __name__ == "__main__":
    main()
