"""Readers for what the Go featurizer writes (estimator/TENSORS.md) and for
queries.jsonl (one line per usable query, written by `prestroid train`).

A batch of sub-tree tensors (B queries, K sub-trees, S = N + 1 slots):

    op, table, left, right : int32   (B, K, S)
    kind                   : int8    (B, K, S)
    vote                   : float32 (B, K, S)
    pred                   : float32 (B, K, S, Pf)
    est                    : float32 (B, K, S, EST)   optimizer estimates of OPR slots
    plan                   : float32 (B, PLAN)        plan-level estimate vector
    subtrees               : int32   (B,)
    target                 : float32 (B,)    optional
"""
import glob
import json
import os

import numpy as np

FORMAT_VERSION = 2
EST, PLAN = 4, 6            # estimator.EstDim, estimator.PlanDim
EST_SCALE = 25.0            # estimator.EstScale: plan[0] = ln(1 + Σ cpuCost) / EST_SCALE
# The model's inputs, in the order of the ONNX graph (BUNDLE.md): every
# model takes BASE_INPUTS; a model with optimizer-estimate features also
# takes "est" and "plan".
BASE_INPUTS = ("op", "table", "left", "right", "vote", "pred")
INPUTS = BASE_INPUTS + ("est", "plan")
ARRAYS = INPUTS + ("kind", "subtrees")
DTYPES = {"op": np.int32, "table": np.int32, "left": np.int32, "right": np.int32,
          "vote": np.float32, "pred": np.float32, "est": np.float32, "plan": np.float32,
          "kind": np.int8, "subtrees": np.int32}
NODE_ARRAYS = ("op", "table", "left", "right", "vote", "pred", "est")   # one row per slot


def load_npz(path):
    """Load one .npz batch; check its version, dtypes and shapes.

    Returns a dict of arrays plus "params" = dict(N, K, C, Pf, full).
    """
    with np.load(path) as z:
        version = int(z["format_version"])
        if version != FORMAT_VERSION:
            raise ValueError(f"{path}: tensor format version {version}, want {FORMAT_VERSION}")
        N, K, C, Pf, full = (int(v) for v in z["params"])
        out = {k: z[k] for k in ARRAYS}
        if "target" in z.files:
            out["target"] = z["target"].astype(np.float32)
    B, K2, S = out["op"].shape
    if K2 != K:
        raise ValueError(f"{path}: op has K={K2}, params say {K}")
    for k in ARRAYS:
        if out[k].dtype != DTYPES[k]:
            raise ValueError(f"{path}: {k} is {out[k].dtype}, want {np.dtype(DTYPES[k])}")
        want = {"subtrees": (B,), "pred": (B, K, S, Pf), "est": (B, K, S, EST), "plan": (B, PLAN)}.get(k, (B, K, S))
        if out[k].shape != want:
            raise ValueError(f"{path}: {k} has shape {out[k].shape}, want {want}")
    out["params"] = dict(N=N, K=K, C=C, Pf=Pf, full=full)
    return out


def load_full(workdir, part):
    """Load the full-tree chunks full_{part}_NNN.npz as a list of per-query
    dicts trimmed to their own size (n + 1 slots: slot 0 plus n nodes), and
    the targets. Re-padding (padded model) or packing (packed model) happens
    per batch."""
    trees, targets = [], []
    for path in sorted(glob.glob(os.path.join(workdir, f"full_{part}_*.npz"))):
        z = load_npz(path)
        if z["params"]["full"] != 1:
            raise ValueError(f"{path}: not a full-tree batch")
        used = (z["kind"][:, 0, :] != 0)                       # (B, S)
        for b in range(used.shape[0]):
            n = int(np.nonzero(used[b])[0].max()) if used[b].any() else 0   # last used slot
            t = {k: z[k][b, 0, :n + 1] for k in NODE_ARRAYS}
            t["plan"] = z["plan"][b]
            trees.append(t)
        targets.append(z["target"])
    return trees, (np.concatenate(targets) if targets else np.zeros(0, np.float32))


def pad_full(trees, slots=None):
    """Stack full trees into (B, 1, S) arrays, 0-padded to `slots` (default:
    the largest tree of the list)."""
    S = slots or max(len(t["op"]) for t in trees)
    B, Pf = len(trees), trees[0]["pred"].shape[-1]
    out = {k: np.zeros((B, 1, S), DTYPES[k]) for k in ("op", "table", "left", "right", "vote")}
    out["pred"] = np.zeros((B, 1, S, Pf), np.float32)
    out["est"] = np.zeros((B, 1, S, EST), np.float32)
    for i, t in enumerate(trees):
        n = len(t["op"])
        for k in out:
            out[k][i, 0, :n] = t[k]
    out["plan"] = np.stack([t["plan"] for t in trees]).astype(np.float32)
    return out


def pack_full(trees):
    """Pack full trees without padding: one flat node array with a shared
    zero slot 0, child indices shifted to the flat positions, and the query
    index of every node (for per-query pooling)."""
    sizes = [len(t["op"]) - 1 for t in trees]                  # real nodes (slot 0 dropped)
    T = 1 + sum(sizes)
    Pf = trees[0]["pred"].shape[-1]
    out = {k: np.zeros(T, DTYPES[k]) for k in ("op", "table", "left", "right", "vote")}
    out["pred"] = np.zeros((T, Pf), np.float32)
    out["est"] = np.zeros((T, EST), np.float32)
    out["plan"] = np.stack([t["plan"] for t in trees]).astype(np.float32)   # (B, PLAN): per query
    out["tree"] = np.zeros(T, np.int64)
    pos = 1
    for i, (t, n) in enumerate(zip(trees, sizes)):
        sl = slice(pos, pos + n)
        for k in ("op", "table", "vote", "pred", "est"):
            out[k][sl] = t[k][1:]
        for k in ("left", "right"):
            c = t[k][1:]
            out[k][sl] = np.where(c > 0, c - 1 + pos, 0)         # slot s of tree i -> pos + s - 1
        out["tree"][sl] = i
        pos += n
    return out


def load_queries(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def read_keys(path):
    with open(path) as f:
        return [line.strip() for line in f if line.strip()]
