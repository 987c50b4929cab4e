"""The Tree-CNN cost model (DESIGN §3; the paper's Prestroid).

Input per query: K sub-trees of S slots (TENSORS.md). A node's features are
[one-hot operator | one-hot table | predicate vector]; id 0 ("<none>", also
∅ and empty slots) maps to all zeros, so slot 0 stays the zero "no node".

    x            (B, K, S, F)     F = (n_ops - 1) + (n_tables - 1) + Pf
    3x TreeConv  (B*K, S, Ck)     h_i = ReLU(W_top x_i + W_left x_l + W_right x_r + b)
    bit mask     * vote           nodes without complete information are zeroed
    max-pool     (B*K, C3)        over the slots of each sub-tree
    concat       (B, K*C3)
    dense        ReLU, batch norm, dropout; twice
    sigmoid      (B, 1)           normalized ln(CPU seconds)

A tree-conv layer is one gather per child plus three matmuls (no loops over
nodes), so the ONNX export is a plain tensor graph. The full-tree models are
the same network with K = 1 (padded) or over a packed node array (packed).
"""
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    n_ops: int                      # operator vocabulary size (ids 0, 1 reserved)
    n_tables: int                   # table vocabulary size
    pf: int                         # predicate vector size
    k: int                          # sub-trees per query (1 for full trees)
    kernels: tuple = (128, 128, 128)  # tree-conv output channels per layer (the paper's TPC-DS size)
    dense: tuple = (32, 8)          # dense layer sizes
    dropout: float = 0.1


def one_hot(ids, n):
    """(..., ) int -> (..., n-1) float; id 0 gives zeros. Written as a
    comparison with a range (ONNX Equal) rather than F.one_hot."""
    rng = torch.arange(1, n, device=ids.device, dtype=ids.dtype)
    return (ids.unsqueeze(-1) == rng).to(torch.float32)


class TreeConv(nn.Module):
    """One tree-convolution layer over (T, S, F) nodes with child slots
    left/right (T, S); slot 0 of every tree is the zero "no node" slot."""

    def __init__(self, fin, fout):
        super().__init__()
        self.top = nn.Linear(fin, fout)
        self.left = nn.Linear(fin, fout, bias=False)
        self.right = nn.Linear(fin, fout, bias=False)

    def forward(self, h, left, right):
        idx_l = left.unsqueeze(-1).expand(-1, -1, h.shape[-1])
        idx_r = right.unsqueeze(-1).expand(-1, -1, h.shape[-1])
        hl = torch.gather(h, 1, idx_l)
        hr = torch.gather(h, 1, idx_r)
        out = F.relu(self.top(h) + self.left(hl) + self.right(hr))
        # keep slot 0 at zero so that "no child" keeps reading zeros
        return torch.cat([torch.zeros_like(out[:, :1]), out[:, 1:]], dim=1)


class TreeCNN(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        fin = (cfg.n_ops - 1) + (cfg.n_tables - 1) + cfg.pf
        chans = [fin] + list(cfg.kernels)
        self.convs = nn.ModuleList(TreeConv(a, b) for a, b in zip(chans[:-1], chans[1:]))
        self.drop = nn.Dropout(cfg.dropout)
        layers, d = [], cfg.k * chans[-1]
        for width in cfg.dense:
            layers += [nn.Linear(d, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(cfg.dropout)]
            d = width
        layers += [nn.Linear(d, 1)]
        self.head = nn.Sequential(*layers)

    def features(self, op, table, pred):
        return torch.cat([one_hot(op.long(), self.cfg.n_ops), one_hot(table.long(), self.cfg.n_tables), pred], -1)

    def convolve(self, x, left, right, vote):
        """x (T, S, F), left/right (T, S) int64, vote (T, S) -> masked node outputs (T, S, C3)."""
        for conv in self.convs:
            x = self.drop(conv(x, left, right))
        return x * vote.unsqueeze(-1)

    def forward(self, op, table, left, right, vote, pred):
        """Sub-tree (or padded full-tree) batch -> (B, 1) in [0, 1]."""
        B, K, S = op.shape
        x = self.features(op, table, pred).reshape(B * K, S, -1)
        h = self.convolve(x, left.long().reshape(B * K, S), right.long().reshape(B * K, S), vote.reshape(B * K, S))
        pooled = h.max(dim=1).values.reshape(B, -1)          # (B, K*C3); ReLU outputs, so masked zeros never win
        return torch.sigmoid(self.head(pooled))

    def forward_packed(self, op, table, left, right, vote, pred, tree, batch_size):
        """Packed full trees: one flat node array (T,) with the shared zero
        slot 0 and the query index of each node -> (B, 1)."""
        x = self.features(op, table, pred).unsqueeze(0)                  # (1, T, F)
        h = self.convolve(x, left.long().unsqueeze(0), right.long().unsqueeze(0), vote.unsqueeze(0))[0]
        pooled = torch.zeros(batch_size, h.shape[-1], device=h.device, dtype=h.dtype)
        idx = tree.unsqueeze(-1).expand(-1, h.shape[-1])
        pooled = pooled.scatter_reduce(0, idx[1:], h[1:], reduce="amax", include_self=True)
        return torch.sigmoid(self.head(pooled))


def count_params(model):
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
