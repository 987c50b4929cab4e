"""Template-level cross-validation of one Tree-CNN configuration, for model
choice without the test split and with more than one validation split.

The train and validation queries of a workdir are pooled and their templates
dealt into F folds (sorted by family, then by a hash of the template name,
then dealt round-robin, so every fold mixes the families and the assignment
depends only on the names). For every fold and seed the network is trained
on the other folds' templates, early-stopped on the held-out fold exactly as
`prestroid train` early-stops on the validation split, and its predictions
for the held-out fold are kept. Every pooled query is therefore predicted
once per seed by a model that never saw its template: the out-of-fold (OOF)
predictions. The test split is never read. A baseline (--baseline NAME,
trainer.baselines) is cross-validated on the same folds: fitted on the other
folds, tuned or early-stopped on the held-out fold as the network is.

    python -m trainer.cv --workdir W --name k47-skip --folds 5 --seeds 1,2 \\
        --kernels 32,32,32 --dense 16,8 --lr 1e-3 --epochs 40 --patience 8 --plan-skip
    python -m trainer.cv --workdir W --name tfidf_gbr --baseline tfidf_gbr     # a baseline, same folds
    python -m trainer.cv --compare W/cv_k47-skip.json W2/cv_k9-skip.json W/cv_tfidf_gbr.json

Writes W/cv_NAME.json after every (fold, seed) run; rerunning the same
command skips the runs already there (a changed configuration starts over
and moves the old file to cv_NAME.OLD_ID.json),
and several processes of one configuration can run at once, e.g. one per
core (each takes the runs no live process has taken; every save merges the
others' runs).
The summary gives per seed and for the seeds' mean prediction (what
`prestroid ensemble` of those seeds would predict) the OOF MSE on the
normalized target (the paper's metric), q-error p50/p95, and the MSE with
every template weighted equally (a few large templates cannot dominate it).
"""
import argparse
import fcntl
import hashlib
import json
import os
import socket
import sys
import time

import numpy as np
import torch

from . import baselines as B
from .data import load_npz, read_keys
from .metrics import clean, denormalize, qerrors, transform
from .model import count_params
from .train import (SubTreeFeeder, add_training_args, build_model, check_training_args, fit, pick_device, predict,
                    read_workdir_info, set_seed, subtree_config, training_config)


def assign_folds(templates, families, folds):
    """{template: fold}: sorted by (family, sha256(name)), dealt round-robin."""
    if folds < 2:
        raise ValueError(f"--folds {folds}: want at least 2")
    names = sorted(set(templates), key=lambda t: (families.get(t, ""), hashlib.sha256(t.encode()).hexdigest()))
    if len(names) < folds:
        raise ValueError(f"{len(names)} templates cannot fill {folds} folds")
    return {t: i % folds for i, t in enumerate(names)}


def pooled_keys(workdir):
    """The train then validation keys, in the tensors' row order, and their queries."""
    with open(os.path.join(workdir, "queries.jsonl")) as f:
        qs = {q["key"]: q for q in map(json.loads, f) if q.get("split") in ("train", "val")}
    keys = []
    for part in ("train", "val"):
        if os.path.exists(os.path.join(workdir, part + ".keys.txt")):
            keys += read_keys(os.path.join(workdir, part + ".keys.txt"))
    if not keys:
        raise ValueError(f"{workdir}: no train.keys.txt")
    missing = [k for k in keys if k not in qs]
    if missing:
        raise ValueError(f"{workdir}: {len(missing)} tensor rows have no train/val query in queries.jsonl "
                         f"(e.g. {missing[0]}); rerun the tensors step")
    return keys, [qs[k] for k in keys]


def pooled(workdir):
    """The train and validation tensors as one set (rows in pooled_keys order)."""
    parts = [load_npz(os.path.join(workdir, part + ".npz")) for part in ("train", "val")
             if os.path.exists(os.path.join(workdir, part + ".npz"))]
    if not parts:
        raise ValueError(f"{workdir}: no train.npz")
    z = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "params"}
    z["params"] = parts[0]["params"]
    return z


def take(z, idx):
    out = {k: v[idx] for k, v in z.items() if k != "params"}
    out["params"] = z["params"]
    return out


def summarize(res):
    """Per-seed and ensemble OOF metrics from a cv result (needs every fold of a seed)."""
    lo, hi = res["target"]["min"], res["target"]["max"]
    y = np.asarray(res["target_normalized"], np.float64)
    templates = np.asarray(res["templates"])
    fold_of = np.asarray(res["fold_of"])
    folds = res["folds"]
    out = {"seeds": {}, "queries": len(y), "templates": len(set(res["templates"]))}

    def score(p):
        tf = transform(res["flags"].get("cost_anchor", False))   # an anchored network's output may leave [0, 1]
        ln_y, ln_p = denormalize(y, lo, hi, clip=False), denormalize(p, lo, hi, transform=tf)
        pc = (ln_p - lo) / (hi - lo)
        q = qerrors(ln_y, ln_p)
        per_t = [float(np.mean((pc[templates == t] - y[templates == t]) ** 2)) for t in sorted(set(res["templates"]))]
        fold_mse = [float(np.mean((pc[fold_of == f] - y[fold_of == f]) ** 2)) for f in range(folds)]
        return {"mse": float(np.mean((pc - y) ** 2)), "mse_template_mean": float(np.mean(per_t)),
                "qerror_p50": float(np.percentile(q, 50)), "qerror_p95": float(np.percentile(q, 95)),
                "fold_mse": fold_mse}

    complete = []
    for seed, runs in sorted(res["runs"].items(), key=lambda kv: int(kv[0])):
        if len(runs) < folds:
            continue
        p = np.zeros(len(y))
        for f, r in runs.items():
            p[fold_of == int(f)] = r["pred"]
        out["seeds"][seed] = score(p) | {"epochs": [runs[str(f)].get("epochs") for f in range(folds)]}
        complete.append(p)
    if complete:
        single = [s["mse"] for s in out["seeds"].values()]
        out["single_mse_mean"] = float(np.mean(single))
        out["single_mse_min_max"] = [float(min(single)), float(max(single))]
        out["ensemble"] = score(np.mean(complete, 0)) | {"members": len(complete)}
    return out


def config_id(a, defaults, params):
    """What the results depend on: the flags not at their defaults (so a flag
    added later, at its default, keeps earlier results valid) and the tensors'
    N/K/C/Pf."""
    keep = {k: v for k, v in sorted(vars(a).items())
            if k not in ("workdir", "name", "seeds", "compare", "threads", "device") and v != defaults.get(k)}
    keep["params"] = params
    return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def run(a, defaults):
    torch.set_num_threads(a.threads)
    device = pick_device(a.device)
    W = a.workdir
    n_ops, n_tables, target = read_workdir_info(W)
    lo, hi = target["min"], target["max"]
    keys, queries = pooled_keys(W)
    templates = [q["template"] for q in queries]
    fold_of_t = assign_folds(templates, {q["template"]: q.get("family", "") for q in queries}, a.folds)
    fold_of = np.array([fold_of_t[t] for t in templates])
    if a.baseline:
        if a.baseline not in B.FUNCS:
            raise ValueError(f"--baseline {a.baseline}: want one of {', '.join(B.ALL)}")
        P = {"baseline": a.baseline}
        y = (np.array([q["ln_cpu_s"] for q in queries]) - lo) / (hi - lo)
        vectors = os.path.join(W, "tokens.vec")

        def fit_fold(seed, fold, tr, va):
            kw = {"vectors": vectors} if a.baseline == "mscn" else {}
            # tuned (or early-stopped) on the held-out fold, as the network is
            held = [queries[i] for i in va]
            p, settings = B.FUNCS[a.baseline]([queries[i] for i in tr], held, held, lo, hi, seed=seed, **kw)
            p = (np.asarray(p, np.float64) - lo) / (hi - lo)
            return p, {"settings": settings}
    else:
        z = pooled(W)
        if len(z["target"]) != len(keys):
            raise ValueError(f"{W}: {len(z['target'])} tensor rows for {len(keys)} keys; rerun the tensors step")
        P = z["params"]
        y = z["target"].astype(np.float64)
        mcfg = subtree_config(a, n_ops, n_tables, P, z, target)

        def fit_fold(seed, fold, tr, va):
            ztr, zva = take(z, tr), take(z, va)
            set_seed(seed)
            model = build_model(mcfg, device)
            hist = fit(model, SubTreeFeeder(ztr, device), SubTreeFeeder(zva, device), ztr["target"], zva["target"],
                       training_config(a, seed), device, name=f"{a.name} seed {seed} fold {fold}")
            p = predict(model, SubTreeFeeder(zva, device), len(va), device=device)
            return p, {"epochs": len(hist), "parameters": count_params(model)}
    cid = config_id(a, defaults, P)
    path = os.path.join(W, f"cv_{a.name}.json")
    res = None
    if os.path.exists(path):
        with open(path) as f:
            res = json.load(f)
        if res.get("config_id") != cid or res.get("keys") != keys:
            kept = os.path.join(W, f"cv_{a.name}.{res.get('config_id', 'old')}.json")
            os.replace(path, kept)
            print(f"cv: {path} is of another configuration or other queries: starting over (the old one is "
                  f"now {kept})", file=sys.stderr)
            res = None
    if res is None:
        res = {"name": a.name, "config_id": cid, "workdir": os.path.abspath(W), "params": P,
               "flags": {k: v for k, v in vars(a).items() if k not in ("compare",)},
               "target": target, "folds": a.folds, "keys": keys, "templates": templates,
               "fold_of": fold_of.tolist(), "target_normalized": y.tolist(),
               "fold_templates": [sorted(t for t, f in fold_of_t.items() if f == i) for i in range(a.folds)],
               "runs": {}}

    host = socket.gethostname()

    def locked(update=None):
        """Under the file's lock: merge in the runs and claims that other
        processes of this configuration wrote, apply update, write the file."""
        with open(path + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path) as f:
                    disk = json.load(f)
            except (OSError, ValueError):
                disk = None
            if disk and disk.get("config_id") == cid and disk.get("keys") == keys:
                for seed, runs in disk["runs"].items():
                    for fold, r in runs.items():
                        res["runs"].setdefault(seed, {}).setdefault(fold, r)
                res["claims"] = disk.get("claims", {})
            res.setdefault("claims", {})
            result = update() if update else None
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(clean(res), f)
            os.replace(tmp, path)
            return result

    def claim(seed, fold):
        """Whether this process takes the run: not done, not being done by a live process."""
        def update():
            if str(fold) in res["runs"].get(str(seed), {}):
                return False
            c = res["claims"].get(f"{seed}/{fold}")
            if c and c["host"] == host and c["pid"] != os.getpid() and alive(c["pid"]):
                return False
            res["claims"][f"{seed}/{fold}"] = {"host": host, "pid": os.getpid()}
            return True
        return locked(update)

    def done(seed, fold, run):
        def update():
            res["runs"].setdefault(str(seed), {})[str(fold)] = run
            res["claims"].pop(f"{seed}/{fold}", None)
        locked(update)

    for seed in (int(s) for s in a.seeds.split(",")):
        for fold in range(a.folds):
            if not claim(seed, fold):
                continue
            tr, va = np.nonzero(fold_of != fold)[0], np.nonzero(fold_of == fold)[0]
            t0 = time.perf_counter()
            p, extra = fit_fold(seed, fold, tr, va)
            mse = float(np.mean((np.clip(p, 0, 1) - y[va]) ** 2))
            run = {"pred": np.asarray(p, np.float64).tolist(), "held_out_mse": mse,
                   "seconds": time.perf_counter() - t0, "train": int(len(tr)), "held_out": int(len(va)), **extra}
            done(seed, fold, run)
            print(f"cv {a.name}: seed {seed} fold {fold + 1}/{a.folds}: held-out mse {mse:.5f} "
                  f"({len(va)} queries, {run['seconds']:.0f}s)", file=sys.stderr)
    locked(lambda: res.update(summary=summarize(res)))       # with every process's runs merged in
    return res


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def table(results):
    """A text table of cv results (the --compare output)."""
    lines = [f"{'configuration':24s} {'K':>3s} {'seeds':>5s} {'single MSE (min-max)':>26s} {'ensemble MSE':>12s} "
             f"{'tmpl-mean':>9s} {'q50':>5s} {'q95':>5s}  per-fold ensemble MSE"]
    for r in results:
        s = r["summary"]
        if "ensemble" not in s:
            lines.append(f"{r['name']:24s} (no seed has all folds yet)")
            continue
        e = s["ensemble"]
        mm = s["single_mse_min_max"]
        lines.append(f"{r['name']:24s} {str(r['params'].get('K', '-')):>3s} {e['members']:5d} "
                     f"{s['single_mse_mean']:9.5f} ({mm[0]:.5f}-{mm[1]:.5f}) {e['mse']:12.5f} "
                     f"{e['mse_template_mean']:9.5f} {e['qerror_p50']:5.2f} {e['qerror_p95']:5.2f}  "
                     + " ".join(f"{x:.5f}" for x in e["fold_mse"]))
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir")
    ap.add_argument("--name", help="configuration name: results go to WORKDIR/cv_NAME.json")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seeds", default="1", help="comma-separated seeds; all of them make the ensemble")
    ap.add_argument("--baseline", default="",
                    help="cross-validate this baseline (trainer.baselines) on the same folds instead of the network")
    ap.add_argument("--compare", nargs="+", metavar="CV_JSON", help="print a table of finished cv results and exit")
    ap.add_argument("--summary-out", help="with --compare: also write their summaries (no per-query arrays) as JSON")
    add_training_args(ap)
    a = ap.parse_args(argv)
    if a.compare:
        results = []
        for p in a.compare:
            with open(p) as f:
                r = json.load(f)
            r["summary"] = summarize(r)
            results.append(r)
        print(table(results))
        if a.summary_out:
            # the summaries without the per-query arrays: small enough to commit
            keep = ("name", "params", "flags", "folds", "fold_templates", "summary")
            with open(a.summary_out, "w") as f:
                json.dump(clean([{k: r.get(k) for k in keep} | {"runs": {s: {fold: {k: v for k, v in x.items()
                                                                                  if k != "pred"}
                                                                            for fold, x in runs.items()}
                                                                        for s, runs in r["runs"].items()}}
                                 for r in results]), f, indent=1)
                f.write("\n")
        return
    if not a.workdir or not a.name:
        ap.error("need --workdir and --name (or --compare)")
    check_training_args(ap, a)
    try:
        res = run(a, {k: ap.get_default(k) for k in vars(a)})
    except ValueError as e:
        sys.exit(f"cv: {e}")
    print(table([res]))


if __name__ == "__main__":
    main()
