"""The tensor reader on the Go featurizer's reference file."""
import os

import numpy as np
import pytest

from trainer.data import load_npz, pad_full, pack_full

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "estimator", "testdata", "example.npz")


def test_example_npz_layout():
    z = load_npz(EXAMPLE)
    p = z["params"]
    assert (p["N"], p["K"], p["C"], p["Pf"], p["full"]) == (15, 9, 3, 4, 0)
    B, K, S = z["op"].shape
    assert (B, K, S) == (2, 9, 16)
    assert z["pred"].shape == (2, 9, 16, 4)
    assert z["est"].shape == (2, 9, 16, 4) and z["plan"].shape == (2, 6)
    # estimates sit on OPR slots only (kind 1), with the "known" flag first
    assert not z["est"][z["kind"] != 1].any()
    # TPC-H sf1 plans: most operators have an estimate (RemoteSource has none)
    assert 0.8 < z["est"][..., 0][z["kind"] == 1].mean() < 1
    assert (z["plan"][:, 0] > 0).all() and (z["plan"] <= 2).all()
    # slot 0 of every sub-tree is the zero "no node" slot
    for k in ("op", "table", "kind", "left", "right", "vote"):
        assert not z[k][:, :, 0].any(), k
    assert not z["pred"][:, :, 0].any()
    # children sit at a higher slot than their parent, inside the sub-tree
    s = np.arange(S)[None, None, :]
    for k in ("left", "right"):
        c = z[k]
        assert ((c == 0) | (c > s)).all()
        assert (c < S).all()
    # padding sub-trees are all zero; real ones have a root in slot 1
    for b in range(B):
        n = z["subtrees"][b]
        assert 1 <= n <= K
        assert (z["kind"][b, :n, 1] > 0).all()
        assert not z["kind"][b, n:].any()
    assert set(np.unique(z["vote"])) <= {0.0, 1.0}
    assert "target" in z and z["target"].shape == (B,)


def test_bad_version_is_refused(tmp_path):
    with np.load(EXAMPLE) as src:
        arrays = dict(src)
    arrays["format_version"] = np.array(99, np.int32)
    path = tmp_path / "v99.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="version"):
        load_npz(str(path))


def _tree(n, pf=3, seed=0):
    """A left-deep chain of n nodes in full-tree slots (slot 0 empty)."""
    rng = np.random.default_rng(seed)
    t = {k: np.zeros(n + 1, np.int32) for k in ("op", "table", "left", "right")}
    t["vote"] = np.zeros(n + 1, np.float32)
    t["vote"][1:] = 1
    t["op"][1:] = rng.integers(2, 5, n)
    t["left"][1:n] = np.arange(2, n + 1)
    t["pred"] = rng.standard_normal((n + 1, pf)).astype(np.float32)
    t["pred"][0] = 0
    t["est"] = rng.random((n + 1, 4)).astype(np.float32)
    t["est"][0] = 0
    t["plan"] = rng.random(6).astype(np.float32)
    return t


def test_pack_and_pad():
    trees = [_tree(3), _tree(5, seed=1)]
    padded = pad_full(trees)
    assert padded["op"].shape == (2, 1, 6)
    packed = pack_full(trees)
    assert packed["op"].shape == (1 + 3 + 5,)
    # tree 1's slot 1 is flat position 4; its left child (slot 2) is flat 5
    assert packed["left"][4] == 5 and packed["tree"][4] == 1
    assert packed["left"][3] == 0            # tree 0's last node: no child
    np.testing.assert_array_equal(packed["pred"][4:], trees[1]["pred"][1:])
