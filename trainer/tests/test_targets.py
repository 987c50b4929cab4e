"""Targets beyond CPU (trainer.targets): labels, the scale split, and the
graph splice that must leave the CPU output untouched."""
import numpy as np
import pytest
import torch

from trainer import targets as TT


def test_memory_costs_walk_every_fragment_and_skip_nan():
    plan = {"0": {"id": "1", "estimates": [{"memoryCost": 10.0}], "children": [
                {"id": "2", "estimates": [{"memoryCost": "NaN"}, {"memoryCost": 5.0}], "children": []}]},
            "1": {"id": "3", "estimates": [{"memoryCost": float("nan")}], "children": []}}
    acc = []
    TT._memory_costs(plan, acc)
    assert acc == [10.0, 5.0]


def test_scale_split_holds_out_the_largest_scale_whatever_the_template():
    def part(scales):
        n = len(scales)
        return {"keys": [f"k{i}{s}" for i, s in enumerate(scales)], "feat": np.arange(n, dtype=np.float32)[:, None],
                "y": np.zeros(n, np.float32), "ln": np.arange(n, dtype=np.float64),
                "q": [{"key": f"k{i}{s}", "scale": s} for i, s in enumerate(scales)]}
    parts = {"train": part(["tiny", "sf1", "sf10"]), "val": part(["sf1", "sf10"]), "test": part(["tiny", "sf10"])}
    out, held = TT.scale_split(parts)
    assert held == "sf10"
    assert [q["scale"] for q in out["test"]["q"]] == ["sf10"] * 3
    assert sorted(q["scale"] for q in out["train"]["q"]) == ["sf1", "tiny", "tiny"]   # test templates train
    assert [q["scale"] for q in out["val"]["q"]] == ["sf1"]


def test_pool_summarizes_each_member_without_positions():
    pool = TT.Pool([(2, 3, 1), (2, 1, 1)])
    feat = torch.tensor([[1., 2., 3., 4., 5., 6., 7., 8., 9., 10.]])   # member 0: 2x3 + plan 7; member 1: 2x1 + plan 10
    y = torch.tensor([[0.5]])
    got = pool(feat, y)[0].tolist()
    assert got == [4., 5., 6., 2.5, 3.5, 4.5, 7., 9., 8.5, 10., 0.5]


def test_splice_adds_outputs_and_keeps_y(tmp_path):
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper

    # A stand-in for a gated graph: y = sigmoid(sum(trunk)), trunk tensors under the real names.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 8])
    yv = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 1])
    nodes = [helper.make_node("Identity", ["x"], [TT.TRUNK[0]]), helper.make_node("Identity", ["x"], [TT.TRUNK[1]]),
             helper.make_node("ReduceSum", [TT.TRUNK[0], "axes"], ["s"], keepdims=1),
             helper.make_node("Sigmoid", ["s"], ["y"])]
    g = helper.make_graph(nodes, "g", [x], [yv], [helper.make_tensor("axes", TensorProto.INT64, [1], [1])])
    base = str(tmp_path / "base.onnx")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8                    # the bundle's (ONNX Runtime 1.30 reads up to 13)
    onnx.save(m, base)
    feat_path = str(tmp_path / "feat.onnx")
    TT.concat_feat_node(base, feat_path)

    layout = [(2, 3, 2), (2, 3, 2)]     # each trunk tensor: 2 sub-trees x 3 channels + 2 plan values
    torch.manual_seed(0)
    head = TT.Mean([TT.Head(TT.Pool(layout), np.zeros(17, np.float32), np.ones(17, np.float32), 4) for _ in range(2)]).eval()
    hp = str(tmp_path / "head.onnx")
    TT.export_head(head, 16, hp)
    out = str(tmp_path / "out.onnx")
    TT.splice(feat_path, [("t_m_", hp, "y_memory", {"feat": "targets_feat", "ycpu": "y"})], out, None)

    xs = np.random.default_rng(1).normal(size=(5, 8)).astype(np.float32)
    old = TT.run_onnx(base, {"x": xs}, ["y"])[0]
    y, ym = TT.run_onnx(out, {"x": xs}, ["y", "y_memory"])
    assert np.array_equal(old, y)
    ref = TT.head_predict(head, (np.concatenate([xs, xs], 1), y.reshape(-1, 1)))
    assert np.allclose(ym.reshape(-1), ref, atol=1e-5)


def test_text_blend_weight_minimizes_the_mean_absolute_ln_error():
    rng = np.random.default_rng(1)
    y = rng.normal(size=2000)
    head = y + rng.normal(scale=1.0, size=2000)      # two independent errors of equal spread: w = 0.5
    text = y + rng.normal(scale=1.0, size=2000)
    w, sigma, maes = TT.fit_text_blend(y, head, text)
    assert 0.4 <= w <= 0.6
    assert maes[w] < maes[0.0] and maes[w] < maes[1.0]
    assert sigma == pytest.approx(np.std((1 - w) * head + w * text - y))
    # a text model that only adds noise gets no weight
    w, _, _ = TT.fit_text_blend(y, y + 0.01, y + rng.normal(scale=3.0, size=2000))
    assert w == 0.0


def test_served_blend_keeps_the_head_where_the_text_is_far():
    tables = [[{"rows": 1000, "known": True}], [{"rows": 1000, "known": False}], [{"rows": 1e9, "known": True}]]
    far = [TT.text_far(t, max_train=np.log1p(1e6)) for t in tables]
    assert far == [False, True, True]
    got = TT.served_blend(np.array([1.0, 1.0, 1.0]), np.array([3.0, 3.0, 3.0]), 0.25, far)
    assert got.tolist() == [1.5, 1.0, 1.0]


def test_a_head_with_a_linear_path_starts_as_the_head_without():
    pool = TT.Pool([(2, 3, 1), (2, 1, 1)])
    mean, std = np.zeros(11, np.float32), np.ones(11, np.float32)
    torch.manual_seed(1)
    plain = TT.Head(pool, mean, std, 4).eval()
    torch.manual_seed(1)
    lin = TT.Head(pool, mean, std, 4, skip=True).eval()
    feat, y = torch.randn(5, 10), torch.rand(5, 1)
    assert torch.equal(plain(feat, y), lin(feat, y))          # the linear path starts at 0
    with torch.no_grad():
        lin.lin.weight[0, -1] = 2.0                            # ... and adds a linear function of the inputs
    assert torch.allclose(lin(feat, y) - plain(feat, y), 2.0 * y)


def test_trunk_features_are_kept_per_bundle(tmp_path):
    # a cache of one bundle's trunk features is never another's: the targets
    # step on an ensemble after the gated bundle of the same workdir read the
    # gated bundle's CPU output (its heads then disagreed with their graph)
    from trainer.targets import cache_path
    a, b = tmp_path / "a", tmp_path / "b"
    for d, graph in ((a, b"graph one"), (b, b"graph two")):
        d.mkdir()
        (d / "model.onnx").write_bytes(graph)
    cache = str(tmp_path / "cache")
    pa, pb = cache_path(cache, str(a), "train"), cache_path(cache, str(b), "train")
    assert pa != pb and pa.startswith(cache) and pa != cache_path(cache, str(a), "test")
    assert pa == cache_path(cache, str(a), "train")


def test_text_tables_of_a_text_stage_that_reads_the_text_alone(tmp_path):
    # Without --table-stats the text step writes no tables file: no statement is far.
    assert TT.text_tables(str(tmp_path), "val", 3) == [[], [], []]
    assert not any(TT.text_far(t, 5.0) for t in TT.text_tables(str(tmp_path), "val", 3))
    (tmp_path / "text_val.tables.jsonl").write_text('[{"rows": 10, "bytes": 100, "known": true}]\n[]\n')
    assert TT.text_tables(str(tmp_path), "val", 2)[0][0]["rows"] == 10
    with pytest.raises(SystemExit, match="holds 2 queries"):
        TT.text_tables(str(tmp_path), "val", 3)
