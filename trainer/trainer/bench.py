"""Training efficiency, the paper's Fig 6: input bytes per batch and epoch
time of sub-tree models against full-tree models, 0-padded (to the longest
tree of the set, the paper's setting) and packed (no padding), at several
batch sizes, measured side by side in one process on the same queries.

    python -m trainer.bench --sub W/n15k9 --sub W/n32k11 --full W/n15k9 --batches 32,64,256

Each --sub is a workdir with train.npz (and train.keys.txt); --full a
workdir with full_train_*.npz of the same queries in the same order.
"""
import argparse
import json
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

from .data import load_npz, load_full, pad_full
from .model import ModelConfig, TreeCNN
from .train import SubTreeFeeder, PackedFeeder, set_seed


def epoch(model, feeder, y, batch, opt, gen):
    """One training epoch; returns (seconds, mean input bytes per batch)."""
    model.train()
    perm = torch.randperm(feeder.n, generator=gen)
    nbytes, batches = 0, 0
    t0 = time.perf_counter()
    for lo in range(0, feeder.n, batch):
        idx = perm[lo:lo + batch]
        if len(idx) < 2:
            continue
        nbytes += feeder.nbytes(idx)
        batches += 1
        loss = F.huber_loss(feeder.run(model, idx).reshape(-1), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return time.perf_counter() - t0, nbytes / max(batches, 1)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sub", action="append", default=[], help="sub-tree workdir (repeatable)")
    ap.add_argument("--full", default="", help="workdir with the full-tree chunks")
    ap.add_argument("--batches", default="32,64,256")
    ap.add_argument("--epochs", type=int, default=2, help="timed epochs per setting (after one warm-up epoch)")
    ap.add_argument("--min-nodes", type=int, default=0, help="only queries whose O-T-P tree has at least this many nodes")
    ap.add_argument("--kernels", default="128,128,128")
    ap.add_argument("--dense", default="32,8")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--out", default="")
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    kernels = tuple(int(x) for x in a.kernels.split(","))
    dense = tuple(int(x) for x in a.dense.split(","))
    with open(f"{(a.sub or [a.full])[0]}/ops.json") as f:
        n_ops = len(json.load(f))
    with open(f"{(a.sub or [a.full])[0]}/tables.json") as f:
        n_tables = len(json.load(f))

    trees, y_full = load_full(a.full, "train") if a.full else ([], None)
    sizes = np.array([len(t["op"]) - 1 for t in trees]) if trees else None
    keep = None
    if a.min_nodes and sizes is not None:
        keep = np.nonzero(sizes >= a.min_nodes)[0]
    setups = []                              # (name, feeder factory, y, k)
    for w in a.sub:
        z = load_npz(f"{w}/train.npz")
        if keep is not None:
            z = {k: (v[keep] if isinstance(v, np.ndarray) and v.ndim > 0 else v) for k, v in z.items()}
        p = z["params"]
        name = f"Sub({p['N']}-{p['K']}-{p['Pf']})"
        setups.append((name, SubTreeFeeder(z, dev), torch.from_numpy(z["target"]).to(dev), p["K"], p["Pf"]))
    if trees:
        if keep is not None:
            trees, y_full = [trees[i] for i in keep], y_full[keep]
        pf = trees[0]["pred"].shape[-1]
        yt = torch.from_numpy(y_full).to(dev)
        smax = max(len(t["op"]) for t in trees)
        setups.append((f"Full-{pf} padded", SubTreeFeeder(pad_full(trees, smax), dev), yt, 1, pf))
        setups.append((f"Full-{pf} packed", PackedFeeder(trees, dev), yt, 1, pf))
    n = setups[0][1].n
    info = {"queries": n, "min_nodes": a.min_nodes, "threads": a.threads, "device": str(dev),
            "kernels": list(kernels), "dense": list(dense)}
    if sizes is not None:
        s = sizes[keep] if keep is not None else sizes
        info.update(full_nodes_max=int(s.max()), full_nodes_median=float(np.median(s)))
    print(f"bench train: {n} training queries" + (f" with >= {a.min_nodes} O-T-P nodes" if a.min_nodes else "") +
          (f", full trees median {info['full_nodes_median']:.0f} / max {info['full_nodes_max']} nodes"
           if sizes is not None else "") + f", kernels {a.kernels}, dense {a.dense}, {a.threads} threads",
          file=sys.stderr)
    rows = []
    for batch in (int(b) for b in a.batches.split(",")):
        for name, feeder, y, k, pf in setups:
            set_seed(1)
            model = TreeCNN(ModelConfig(n_ops=n_ops, n_tables=n_tables, pf=pf, k=k, kernels=kernels,
                                        dense=dense)).to(dev)
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)
            gen = torch.Generator().manual_seed(1)
            epoch(model, feeder, y, batch, opt, gen)                # warm-up
            times, nb = [], 0
            for _ in range(a.epochs):
                t, nb = epoch(model, feeder, y, batch, opt, gen)
                times.append(t)
            rows.append({"model": name, "batch": batch, "bytes_per_batch": nb, "epoch_seconds": float(np.median(times))})
    # ratios against the padded full tree at the same batch size
    for r in rows:
        ref = next((x for x in rows if x["batch"] == r["batch"] and x["model"].endswith("padded")), None)
        if ref:
            r["bytes_reduction_vs_full_padded"] = ref["bytes_per_batch"] / r["bytes_per_batch"]
            r["speedup_vs_full_padded"] = ref["epoch_seconds"] / r["epoch_seconds"]
    print(f"{'model':22s} {'batch':>5s} {'MiB/batch':>10s} {'epoch s':>8s} {'bytes x':>8s} {'speedup':>8s}")
    for r in rows:
        print(f"{r['model']:22s} {r['batch']:5d} {r['bytes_per_batch'] / 2**20:10.3f} {r['epoch_seconds']:8.3f} "
              f"{r.get('bytes_reduction_vs_full_padded', float('nan')):8.2f} {r.get('speedup_vs_full_padded', float('nan')):8.2f}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"info": info, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
