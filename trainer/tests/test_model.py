"""Model shapes, padded vs packed full trees, ONNX export parity."""
import os

import numpy as np
import pytest
import torch

from trainer.data import load_npz, pad_full, pack_full, INPUTS
from trainer.model import ModelConfig, TreeCNN
from trainer.train import export_onnx, onnx_predict

from .test_data import EXAMPLE, _tree


def _model(k, pf=4, n_ops=13, n_tables=5, seed=0):
    torch.manual_seed(seed)
    m = TreeCNN(ModelConfig(n_ops=n_ops, n_tables=n_tables, pf=pf, k=k, kernels=(8, 8, 8), dense=(6, 4)))
    return m.eval()


def _inputs(z):
    return tuple(torch.from_numpy(np.ascontiguousarray(z[k])) for k in INPUTS)


def test_subtree_shapes_and_range():
    z = load_npz(EXAMPLE)
    m = _model(k=9)
    y = m(*_inputs(z))
    assert y.shape == (2, 1)
    assert ((y > 0) & (y < 1)).all()
    m.train()
    y = m(*_inputs(z))                    # batch norm in training mode
    y.sum().backward()
    assert all(p.grad is not None for p in m.parameters())


def test_no_node_slot_and_votes_matter():
    """Changing a non-voting node's subtree outside the conv reach, or an
    unused slot, leaves the output alone; zeroing the votes changes it."""
    z = load_npz(EXAMPLE)
    m = _model(k=9)
    base = m(*_inputs(z)).detach()
    z2 = dict(z)
    z2["vote"] = np.zeros_like(z["vote"])
    assert not torch.allclose(m(*_inputs(z2)), base)
    # padding sub-trees beyond subtrees[b] are all zero: filling their pred
    # with noise but keeping vote 0 and no links changes nothing
    z3 = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in z.items()}
    b, n = 0, int(z["subtrees"][0])
    if n < z["op"].shape[1]:
        z3["pred"][b, n:, 1:] = 5.0
        torch.testing.assert_close(m(*_inputs(z3)), base)


def test_padded_equals_packed():
    trees = [_tree(3, pf=4), _tree(7, pf=4, seed=1), _tree(1, pf=4, seed=2)]
    m = _model(k=1, n_ops=6, n_tables=3)
    p = pad_full(trees)
    y_pad = m(*(torch.from_numpy(p[k]) for k in INPUTS))
    q = pack_full(trees)
    y_pack = m.forward_packed(*(torch.from_numpy(q[k]) for k in INPUTS), torch.from_numpy(q["tree"]), len(trees))
    torch.testing.assert_close(y_pad, y_pack, rtol=1e-5, atol=1e-6)
    # padding to more slots than needed changes nothing either
    p2 = pad_full(trees, slots=20)
    torch.testing.assert_close(m(*(torch.from_numpy(p2[k]) for k in INPUTS)), y_pad, rtol=1e-5, atol=1e-6)


def test_onnx_parity(tmp_path):
    z = load_npz(EXAMPLE)
    m = _model(k=9)
    path = str(tmp_path / "m.onnx")
    export_onnx(m, z, path)
    with torch.no_grad():
        want = m(*_inputs(z)).reshape(-1).numpy()
    got = onnx_predict(path, z)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # the batch axis is dynamic
    one = {k: v[:1] for k, v in z.items() if k != "params"}
    np.testing.assert_allclose(onnx_predict(path, one), want[:1], atol=1e-5)
    import onnx
    g = onnx.load(path).graph
    assert [i.name for i in g.input] == list(INPUTS)
    assert [o.name for o in g.output] == ["y"]
