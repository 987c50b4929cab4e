"""The Tree-CNN cost model (docs/design.md §3; the paper's Prestroid).

Input per query: K sub-trees of S slots (TENSORS.md). A node's features are
[one-hot operator | one-hot table | predicate vector | estimate vector]; id 0
("<none>", also ∅ and empty slots) maps to all zeros, so slot 0 stays the
zero "no node". The estimate vector (the optimizer's rows, bytes and cpuCost
of OPR nodes) and the plan vector (plan-wide sums) go past the paper, which
uses neither; ModelConfig(est=0, plan=0) is the paper's network.

    x            (B, K, S, F)     F = (n_ops - 1) + (n_tables - 1) + Pf + est
    3x TreeConv  (B*K, S, Ck)     h_i = ReLU(W_top x_i + W_left x_l + W_right x_r + b)
    bit mask     * vote           nodes without complete information are zeroed
    max-pool     (B*K, C3)        over the slots of each sub-tree
    concat       (B, K*C3 + plan) the plan vector joins here (pool="sum-max":
                 (B, 2*C3 + plan), the sum and maximum over the K sub-trees)
    dense        ReLU, batch norm, dropout; twice
    (+ w·plan)   (B, 1)           with plan_skip: the plan vector also straight to the output
    sigmoid      (B, 1)           normalized ln(CPU seconds)

With a cost anchor (ModelConfig.anchor) the head has two outputs instead,
a fixed cost U and a rate R, both ln seconds, and

    ln CPU = logaddexp(U, R + x - x_ref)      x = ln(1 + Σ cpuCost)

"a constant plus a rate times the optimizer's cost": the network reads the
plan's shape and the cost term carries its size, with slope 1 in x for a
large plan, so a plan ten times the size of anything in training is
predicted ten times the CPU instead of the largest CPU seen (a sigmoid
cannot leave its training range). The output is the same normalized ln,
unbounded (the bundle's transform "ln_cpu_seconds_minmax_open"). Scale-free
(anchor["scale_free"]), the network sees only ratios of the estimates, so
that the size reaches the output through x alone (models/README.md, "The
cost anchor").

A tree-conv layer is one gather per child plus matmuls (no loops over
nodes), so the ONNX export is a plain tensor graph. The B*K sub-trees are
one flat node array; each layer projects every node once
(x @ [W_top | W_left | W_right]) and gathers the children's projections by
flat position (two Gathers per layer; slot 0 of each sub-tree is masked back
to zero). The first layer never builds the one-hot part of x: the
columns of W for operator and table ids are looked up by id (a Gather), which
is the same product. The full-tree models are the same network with K = 1
(padded) or over a packed node array (packed).
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from .data import EST_SCALE


@dataclass
class ModelConfig:
    n_ops: int                      # operator vocabulary size (ids 0, 1 reserved)
    n_tables: int                   # table vocabulary size
    pf: int                         # predicate vector size
    k: int                          # sub-trees per query (1 for full trees)
    kernels: tuple = (128, 128, 128)  # tree-conv output channels per layer (the paper's TPC-DS size)
    dense: tuple = (32, 8)          # dense layer sizes
    dropout: float = 0.1
    est: int = 0                    # node estimate features (data.EST), 0 = none (the paper's model)
    plan: int = 0                   # plan vector size (data.PLAN), 0 = none
    plan_skip: bool = False         # also a linear path from the plan vector to the output (before the sigmoid)
    pool: str = "concat"            # how the K sub-trees' pooled vectors reach the dense layers (POOLS)
    # cost anchor: ln CPU = logaddexp(U, R + x - x_ref) with x = ln(1 + the
    # optimizer's Σ cpuCost) and U, R two outputs of the head (ln seconds);
    # None = the sigmoid output. A dict: lo, hi (the target's min-max
    # normalization), x_ref (a typical x of the training set), u0, r0 (the
    # head's starting biases, train.cost_anchor); scale_free (the network
    # reads only ratios of the estimates: TreeCNN.scale_free), slope (a
    # third head output: the plan's own slope in x, within SLOPES).
    anchor: dict = None


# The range of a plan's slope in ln cost with anchor["slope"]: the CPU of a
# plan grows at most 1.5 times as fast as its cost in ln, at least 0.25 times.
SLOPES = (0.25, 1.5)

# "concat": the paper's, K*C3 features, each tied to a sub-tree position
# (the k-th sub-tree in breadth-first order); "sum-max": the sum and the
# maximum over the K sub-trees, 2*C3 features that do not depend on the
# order (padding sub-trees are all zeros, so they add nothing), an additive
# bias for a cost that adds up over the plan's parts.
POOLS = ("concat", "sum-max")


def one_hot(ids, n):
    """(..., ) int -> (..., n-1) float; id 0 gives zeros (the reference
    form of the first layer's input; the model itself uses lookups)."""
    rng = torch.arange(1, n, device=ids.device, dtype=ids.dtype)
    return (ids.unsqueeze(-1) == rng).to(torch.float32)


class TreeConv(nn.Module):
    """One tree-convolution layer: h_i = ReLU(W_top x_i + W_left x_l + W_right x_r + b)."""

    def __init__(self, fin, fout):
        super().__init__()
        self.fout = fout
        self.top = nn.Linear(fin, fout)
        self.left = nn.Linear(fin, fout, bias=False)
        self.right = nn.Linear(fin, fout, bias=False)

    def weight(self):
        """(fin, 3*fout): [W_top | W_left | W_right] as one matrix."""
        return torch.cat([self.top.weight, self.left.weight, self.right.weight], 0).t()

    def combine(self, proj, li, ri, keep):
        """Per-node projections (M, 3*fout) of a flat node array -> layer
        output (M, fout). li/ri (M,) are the flat positions of each node's
        children (a "no child" position holds a zero node); keep (M, 1) is 0
        at those zero nodes so that they stay zero."""
        f = self.fout
        return F.relu(proj[:, :f] + self.top.bias + proj[:, f:2 * f].index_select(0, li)
                      + proj[:, 2 * f:].index_select(0, ri)) * keep


class TreeCNN(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        fin = (cfg.n_ops - 1) + (cfg.n_tables - 1) + cfg.pf + cfg.est
        chans = [fin] + list(cfg.kernels)
        self.convs = nn.ModuleList(TreeConv(a, b) for a, b in zip(chans[:-1], chans[1:]))
        self.drop = nn.Dropout(cfg.dropout)
        if cfg.pool not in POOLS:
            raise ValueError(f"pool {cfg.pool!r}: want one of {POOLS}")
        layers, d = [], (cfg.k if cfg.pool == "concat" else 2) * chans[-1] + cfg.plan
        for width in cfg.dense:
            layers += [nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(cfg.dropout)]
            d = width
        if cfg.anchor is not None and (not cfg.plan or cfg.plan_skip):
            raise ValueError("a cost anchor needs the plan vector and no plan skip")
        outs = 1 if cfg.anchor is None else (3 if cfg.anchor.get("slope") else 2)
        layers += [nn.Linear(d, outs)]
        self.head = nn.Sequential(*layers)
        # wide & deep: the optimizer's plan-wide cost reaches the output
        # without competing with K*C3 pooled features in the dense layers
        self.plan_skip = nn.Linear(cfg.plan, 1, bias=False) if cfg.plan and cfg.plan_skip else None
        if cfg.anchor is not None:
            a = cfg.anchor
            self.register_buffer("anchor", torch.tensor([a["lo"], a["hi"] - a["lo"], a["x_ref"]], dtype=torch.float32))

    def features(self, op, table, pred, est=None):
        """The first layer's input x in full (one-hot form): the reference
        for input_projection, used by tests."""
        parts = [one_hot(op.long(), self.cfg.n_ops), one_hot(table.long(), self.cfg.n_tables), pred]
        if self.cfg.est:
            parts.append(est)
        return torch.cat(parts, -1)

    def input_projection(self, op, table, pred, est):
        """x @ W of the first layer without building x: (..., S) ids ->
        (..., S, 3*C1). Operator and table columns are looked up by id (row 0
        of each lookup table is zero: id 0 is "no operator/table")."""
        w = self.convs[0].weight()                          # (fin, 3*C1)
        no, nt, pf = self.cfg.n_ops - 1, self.cfg.n_tables - 1, self.cfg.pf
        zero = torch.zeros_like(w[:1])
        w_op = torch.cat([zero, w[:no]], 0)                 # (n_ops, 3*C1)
        w_tbl = torch.cat([zero, w[no:no + nt]], 0)         # (n_tables, 3*C1)
        p = F.embedding(op.long(), w_op) + F.embedding(table.long(), w_tbl) + pred @ w[no + nt:no + nt + pf]
        if self.cfg.est:
            p = p + est @ w[no + nt + pf:]
        return p

    def convolve(self, proj, li, ri, keep, vote):
        """Flat node array: first-layer projections (M, 3*C1), child
        positions li/ri (M,), keep (M, 1), vote (M,) -> masked node outputs
        (M, C3)."""
        x = self.drop(self.convs[0].combine(proj, li, ri, keep))
        for conv in self.convs[1:]:
            x = self.drop(conv.combine(x @ conv.weight(), li, ri, keep))
        return x * vote.reshape(-1, 1)

    def output(self, pooled, net_plan, plan):
        """Pooled sub-tree features (B, K, C3), the plan vector as the
        network reads it (network_view) and as given -> (B, 1)."""
        if self.cfg.pool == "concat":
            pooled = pooled.reshape(pooled.shape[0], -1)
        else:
            pooled = torch.cat([pooled.sum(1), pooled.max(1).values], -1)
        z = self.head(torch.cat([pooled, net_plan], -1) if self.cfg.plan else pooled)
        if self.cfg.anchor is not None:
            return self.anchored(z, plan)
        if self.plan_skip is not None:
            z = z + self.plan_skip(plan)
        return torch.sigmoid(z)

    def network_view(self, est, plan, per_node):
        """The estimates as the network reads them: as given, or under a
        scale-free anchor only their ratios (scale_free); per_node() is
        the plan vector broadcast to est's nodes."""
        if self.cfg.anchor is not None and self.cfg.anchor.get("scale_free"):
            return self.scale_free(est, plan, per_node())
        return est, plan

    def scale_free(self, est, plan, node_plan):
        """The network's view of the estimates under a scale-free anchor:
        only ratios, so that multiplying every row, byte and cost estimate
        by ten (a ten times larger database) leaves the network's input as
        it was and the size reaches the output through the anchor alone.
        est (..., 4) [known, ln rows, ln bytes, ln cpuCost] -> [known,
        ln rows - ln max rows, ln bytes - ln rows, ln cpuCost - ln Σ
        cpuCost]; plan (B, 6) [ln Σ cpu, ln max cpu, ln Σ net, ln max rows,
        nodes, known share] -> [0, ln max cpu - ln Σ cpu, ln Σ net - ln Σ cpu,
        ln max rows - ln Σ cpu, nodes, known share] (a ratio only where both
        sides are known); node_plan is plan broadcast to est's nodes."""
        known = est[..., :1]
        rows, by, cpu = est[..., 1:2], est[..., 2:3], est[..., 3:4]
        e = torch.cat([known, (rows - node_plan[..., 3:4]) * known, (by - rows) * known,
                       (cpu - node_plan[..., 0:1]) * known], -1)
        has = (plan[:, 0:1] > 0).to(plan.dtype)
        ratio = lambda i: (plan[:, i:i + 1] - plan[:, 0:1]) * has * (plan[:, i:i + 1] > 0).to(plan.dtype)
        p = torch.cat([torch.zeros_like(plan[:, :1]), ratio(1), ratio(2), ratio(3), plan[:, 4:]], -1)
        return e, p

    def anchored(self, z, plan):
        """Head outputs (B, 2) in normalized units and the plan vector ->
        normalized logaddexp(U, R + x - x_ref), (B, 1). logaddexp by hand
        (max + ln(1 + e^-|d|)): plain ONNX operators."""
        lo, span, x_ref = self.anchor[0], self.anchor[1], self.anchor[2]
        x = plan[:, :1] * EST_SCALE
        u = lo + span * z[:, :1]
        slope = 1.0
        if self.cfg.anchor.get("slope"):    # the plan's own slope in its cost, SLOPES[0]..SLOPES[1]
            slope = SLOPES[0] + (SLOPES[1] - SLOPES[0]) * torch.sigmoid(z[:, 2:3])
        r = lo + span * z[:, 1:2] + slope * (x - x_ref)
        ln = torch.maximum(u, r) + torch.log(1 + torch.exp(-torch.abs(u - r)))
        return (ln - lo) / span

    def forward(self, op, table, left, right, vote, pred, est=None, plan=None):
        """Sub-tree (or padded full-tree) batch -> (B, 1) in [0, 1]. The
        B*K sub-trees of S slots are one flat array of B*K*S nodes; a child
        slot c of sub-tree t sits at t*S + c, and slot 0 of every sub-tree is
        its zero "no node"."""
        B, K, S = op.shape
        T = B * K
        net_est, net_plan = self.network_view(est, plan, lambda: plan.reshape(B, 1, 1, -1))
        proj = self.input_projection(op, table, pred, net_est).reshape(T * S, -1)
        base = (torch.arange(T, device=op.device) * S).unsqueeze(1)
        li = (left.long().reshape(T, S) + base).reshape(-1)
        ri = (right.long().reshape(T, S) + base).reshape(-1)
        keep = (torch.arange(S, device=op.device) > 0).to(proj.dtype).repeat(T).unsqueeze(1)
        h = self.convolve(proj, li, ri, keep, vote)
        pooled = h.reshape(B, K, S, -1).max(dim=2).values   # ReLU outputs: masked zeros never win
        return self.output(pooled, net_plan, plan)

    def forward_packed(self, op, table, left, right, vote, pred, est, plan, tree, batch_size):
        """Packed full trees: one flat node array (T,) with the shared zero
        slot 0, children as flat positions, and the query index of each node
        -> (B, 1)."""
        net_est, net_plan = self.network_view(est, plan, lambda: plan[tree])
        proj = self.input_projection(op, table, pred, net_est)           # (T, 3*C1)
        keep = (torch.arange(op.shape[0], device=op.device) > 0).to(proj.dtype).unsqueeze(1)
        h = self.convolve(proj, left.long(), right.long(), keep, vote)
        pooled = torch.zeros(batch_size, h.shape[-1], device=h.device, dtype=h.dtype)
        idx = tree.unsqueeze(-1).expand(-1, h.shape[-1])
        pooled = pooled.scatter_reduce(0, idx[1:], h[1:], reduce="amax", include_self=True)
        return self.output(pooled.unsqueeze(1), net_plan, plan)


def count_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
