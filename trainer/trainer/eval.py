"""Evaluate a model bundle and the baselines on the test split.

Reads the workdir written by `prestroid eval` (queries.jsonl for all splits,
test.npz + test.keys.txt encoded with the bundle) and the bundle itself; runs
the ONNX model with ONNX Runtime (what serving runs), fits the baselines on
the train/validation splits, and writes into --report:

    eval.json            {"models": [ {model, kind, n, mse, qerror_p50, ..., per_template}, ... ], ...}
    report.md            tables and plots
    pred_vs_actual.png   predicted vs actual CPU seconds, one panel per model
    qerror_cdf.png       q-error CDF, one line per model

    python -m trainer.eval --bundle models/default --workdir W --report R
"""
import argparse
import glob
import json
import os
import sys
import time

import numpy as np

from . import baselines as B
from .data import load_npz, load_queries, read_keys
from .ensemble import kind_name
from .metrics import metrics, denormalize, clean, qerrors


def pretty(name):
    """prestroid_15_9_50 -> prestroid(15-9-50); prestroid_full_50_padded -> prestroid(full-50)-padded;
    prestroid_15_9_50_paper -> prestroid(15-9-50)-paper (trained without the estimate features)."""
    parts = name.split("_")
    if parts[0] != "prestroid":
        return name
    if parts[1] == "full":
        return f"prestroid(full-{parts[2]})" + "".join("-" + p for p in parts[3:])
    nums = [p for p in parts[1:] if p.isdigit()]
    return "prestroid(" + "-".join(nums) + ")" + "".join("-" + p for p in parts[1 + len(nums):])


def per_template(keys, y, p, tmpl_of, lo, hi):
    out = {}
    for t in sorted({tmpl_of[k] for k in keys}):
        sel = [i for i, k in enumerate(keys) if tmpl_of[k] == t]
        m = metrics(y[sel], p[sel], lo, hi)
        out[t] = {k: m[k] for k in ("n", "mse", "qerror_p50", "qerror_max")}
    return out


def group_of(q):
    """The report's group of a query: storage/scale ("iceberg/sf1", "connector/tiny"; another engine
    than Trino prefixes it, "presto:connector/sf1"; live traffic: "live")."""
    if not q.get("scale"):
        return "live"
    g = f"{q.get('storage') or 'connector'}/{q['scale']}"
    engine = q.get("engine") or "trino"
    return g if engine == "trino" else f"{engine}:{g}"


def per_group(keys, y, p, grp_of, lo, hi):
    out = {}
    for g in sorted({grp_of[k] for k in keys}):
        sel = [i for i, k in enumerate(keys) if grp_of[k] == g]
        m = metrics(y[sel], p[sel], lo, hi)
        out[g] = {k: m[k] for k in ("n", "mse", "qerror_p50", "qerror_p90", "qerror_p95", "pearson_r")}
    return out


def plots(report, results, y_of):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(results)
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.4 * rows), squeeze=False)
    for ax, (name, keys, p) in zip(axes.flat, results):
        y = np.exp(y_of(keys))
        ax.scatter(y, np.exp(p), s=10, alpha=0.7)
        lim = [min(y.min(), np.exp(p).min()) * 0.8, max(y.max(), np.exp(p).max()) * 1.25]
        ax.plot(lim, lim, "k--", lw=0.8)
        ax.set_xscale("log"); ax.set_yscale("log")
        ax.set_xlim(lim); ax.set_ylim(lim)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("actual CPU s", fontsize=8); ax.set_ylabel("predicted CPU s", fontsize=8)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(os.path.join(report, "pred_vs_actual.png"), dpi=90)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, keys, p in results:
        q = np.sort(qerrors(y_of(keys), p))
        ax.plot(q, np.arange(1, len(q) + 1) / len(q), label=name, drawstyle="steps-post")
    ax.set_xscale("log"); ax.set_xlabel("q-error (CPU time)"); ax.set_ylabel("share of test queries")
    ax.grid(alpha=0.3); ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(os.path.join(report, "qerror_cdf.png"), dpi=90)
    plt.close(fig)


def markdown(out, manifest):
    cols = ["n", "mse", "qerror_p50", "qerror_p90", "qerror_p95", "qerror_p99", "qerror_max", "pearson_r",
            "over_provisioned_cpu", "under_provisioned_cpu"]
    f = lambda v: "" if v is None else (f"{v:.4f}" if isinstance(v, float) and abs(v) < 10 else
                                        f"{v:.1f}" if isinstance(v, float) else str(v))
    lines = [f"# Evaluation of `{manifest['model_id']}`", "",
             f"Records: {out['records']['records']} read, {out['records']['usable']} usable "
             f"(train {out['records']['per_split'].get('train', 0)}, val {out['records']['per_split'].get('val', 0)}, "
             f"test {out['records']['per_split'].get('test', 0)}); test templates: {out['test_templates']}. "
             f"Training data of the bundle: {manifest['training']['records']} usable records.", "",
             "MSE on the min-max normalized ln(CPU seconds) (the paper's metric); q-error on CPU time; "
             "Pearson r on ln(CPU seconds); over/under = CPU over-/under-provisioned as a share of the actual "
             "total CPU of the test queries.", "",
             "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for m in out["models"]:
        lines.append(f"| {m['model']} | " + " | ".join(f(m.get(c)) for c in cols) + " |")
    if out.get("missing"):
        lines += ["", "Not run: " + ", ".join(out["missing"]) + "."]
    groups = sorted({g for m in out["models"] for g in m.get("per_group", {})})
    if len(groups) > 1:
        lines += ["", "## Per storage and scale (median / p95 q-error)", ""]
        lines += ["| model | " + " | ".join(groups) + " |", "|---" * (len(groups) + 1) + "|"]
        for m in out["models"]:
            pg = m.get("per_group", {})
            lines.append(f"| {m['model']} | " + " | ".join(
                f"{pg[g]['qerror_p50']:.2f} / {pg[g]['qerror_p95']:.2f} (n {pg[g]['n']})" if g in pg else ""
                for g in groups) + " |")
    lines += ["", "![predicted vs actual](pred_vs_actual.png)", "", "![q-error CDF](qerror_cdf.png)", "",
              "## Per template (MSE / median q-error)", ""]
    names = [m["model"] for m in out["models"]]
    lines += ["| template | n | " + " | ".join(names) + " |", "|---" * (len(names) + 2) + "|"]
    temps = sorted(out["models"][0]["per_template"])
    for t in temps:
        row = [t, str(out["models"][0]["per_template"][t]["n"])]
        for m in out["models"]:
            pt = m["per_template"].get(t)
            row.append(f"{pt['mse']:.3f} / {pt['qerror_p50']:.2f}" if pt else "")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Baseline settings: " + "; ".join(f"{m['model']}: {json.dumps(m.get('settings', {}))}"
                                                   for m in out["models"] if m["kind"] == "baseline")]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--train-workdir", action="append", default=[],
                    help="include the predictions_test_*.json of a train workdir (repeatable)")
    ap.add_argument("--baselines", default="all")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a few epochs of the neural baselines (tests)")
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    os.makedirs(a.report, exist_ok=True)
    with open(os.path.join(a.bundle, "manifest.json")) as f:
        manifest = json.load(f)
    lo, hi = manifest["target"]["min"], manifest["target"]["max"]
    qs = load_queries(os.path.join(a.workdir, "queries.jsonl"))
    by = {"train": [], "val": [], "test": []}
    for q in qs:
        by[q["split"]].append(q)
    ln_of = {q["key"]: q["ln_cpu_s"] for q in qs}
    tmpl_of = {q["key"]: q["template"] for q in qs}
    grp_of = {q["key"]: group_of(q) for q in qs}
    y_of = lambda keys: np.array([ln_of[k] for k in keys])
    with open(os.path.join(a.workdir, "meta.json")) as f:
        meta = json.load(f)

    results, models, missing = [], [], []

    def add(name, kind, keys, p, settings=None, seconds=None):
        y = y_of(keys)
        m = {"model": name, "kind": kind, **metrics(y, p, lo, hi)}
        if settings is not None:
            m["settings"] = settings
        if seconds is not None:
            m["fit_seconds"] = round(seconds, 2)
        m["per_template"] = per_template(keys, y, p, tmpl_of, lo, hi)
        m["per_group"] = per_group(keys, y, p, grp_of, lo, hi)
        models.append(m)
        results.append((name, keys, p))
        print(f"eval: {name:28s} mse {m['mse']:.4f} q50 {m['qerror_p50']:.2f} q95 {m['qerror_p95']:.2f} "
              f"r {m['pearson_r'] if m['pearson_r'] == m['pearson_r'] else float('nan'):.3f}", file=sys.stderr)

    # the bundle's model, through ONNX Runtime
    from .train import onnx_predict
    z = load_npz(os.path.join(a.workdir, "test.npz"))
    keys = read_keys(os.path.join(a.workdir, "test.keys.txt"))
    p = denormalize(onnx_predict(os.path.join(a.bundle, "model.onnx"), z), lo, hi,
                    transform=manifest["target"]["transform"])
    P = manifest
    # an ensemble bundle (prestroid ensemble, --gate or not): named as
    # trainer.ensemble names its predictions
    members = len((P.get("training") or {}).get("ensemble") or [])
    suffix = "_" + kind_name(members, bool((P.get("training") or {}).get("gate"))) if members else ""
    own = f"prestroid_{P['N']}_{P['K']}_{P['Pf']}" + suffix
    add(pretty(own), "prestroid", keys, p)

    # other Tree-CNN models trained on the same queries (full-tree variants,
    # other N-K-Pf settings), from their training workdirs
    for wd in a.train_workdir:
        for path in sorted(glob.glob(os.path.join(wd, "predictions_test_*.json"))):
            name = os.path.basename(path)[len("predictions_test_"):-len(".json")]
            if name == own or any(m["model"] == pretty(name) for m in models):
                continue
            with open(path) as f:
                pred = json.load(f)
            ks = [k for k in keys if k in pred]
            if len(ks) != len(keys):
                print(f"eval: {path} covers {len(ks)}/{len(keys)} test queries (other records?)", file=sys.stderr)
            if ks:
                add(pretty(name), "prestroid", ks, np.array([pred[k] for k in ks]))

    wanted = B.ALL if a.baselines == "all" else () if a.baselines == "none" else tuple(a.baselines.split(","))
    test_order = {k: i for i, k in enumerate(keys)}
    test = sorted(by["test"], key=lambda q: test_order.get(q["key"], 1 << 30))
    for name in wanted:
        if name not in B.FUNCS:
            missing.append(f"{name} (unknown)")
            continue
        t0 = time.perf_counter()
        try:
            kw = {"vectors": os.path.join(a.bundle, "tokens.vec")} if name == "mscn" else {}
            if name in ("mscn", "wcnn"):
                kw["quick"] = a.quick
            pb, settings = B.FUNCS[name](by["train"], by["val"], test, lo, hi, seed=a.seed, **kw)
        except Exception as e:                 # a failing baseline is reported, not fatal
            print(f"eval: baseline {name} failed: {e!r}", file=sys.stderr)
            missing.append(f"{name} (failed: {e})")
            continue
        add(name, "baseline", [q["key"] for q in test], np.asarray(pb, np.float64), settings,
            time.perf_counter() - t0)
    missing += [b for b in B.ALL if b not in wanted]

    out = {"bundle": manifest["model_id"], "records": meta, "test_templates": len({q["template"] for q in test}),
           "normalization": {"min": lo, "max": hi}, "models": models, "missing": missing}
    out["records"] = {k: meta[k] for k in ("records", "usable", "per_split", "training_data_sha256", "files")}
    with open(os.path.join(a.report, "eval.json"), "w") as f:
        json.dump(clean(out), f, indent=2)
        f.write("\n")
    plots(a.report, results, y_of)
    with open(os.path.join(a.report, "report.md"), "w") as f:
        f.write(markdown(clean(out), manifest))
    print(f"eval: wrote {a.report}/eval.json, report.md, pred_vs_actual.png, qerror_cdf.png", file=sys.stderr)


if __name__ == "__main__":
    main()
