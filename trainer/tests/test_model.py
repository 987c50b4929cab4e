"""Model shapes, padded vs packed full trees, ONNX export parity."""
import io
import os

import numpy as np
import pytest
import torch

from trainer.data import load_npz, pad_full, pack_full, BASE_INPUTS, EST, INPUTS, PLAN
from trainer.model import ModelConfig, TreeCNN, one_hot
from trainer.train import SubTreeFeeder, TrainConfig, export_onnx, fit, model_inputs, onnx_predict

from .test_data import EXAMPLE, _tree


ANCHOR = {"lo": -6.9, "hi": 5.1, "x_ref": 15.0, "u0": 0.3, "r0": 0.5}


def _model(k, pf=4, n_ops=13, n_tables=5, seed=0, est=False, plan_skip=False, pool="concat", anchor=None):
    torch.manual_seed(seed)
    m = TreeCNN(ModelConfig(n_ops=n_ops, n_tables=n_tables, pf=pf, k=k, kernels=(8, 8, 8), dense=(6, 4),
                            est=EST if est or anchor else 0, plan=PLAN if est or anchor else 0, plan_skip=plan_skip,
                            pool=pool, anchor=anchor))
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


def _reference_forward(m, op, table, left, right, vote, pred, est=None, plan=None):
    """docs/design.md §3 written plainly: one-hot features, per-sub-tree gathers,
    ReLU(W_top x_i + W_left x_l + W_right x_r + b), slot 0 kept at zero,
    votes, max-pool, dense head."""
    B, K, S = op.shape
    x = m.features(op, table, pred, est).reshape(B * K, S, -1)
    left, right = left.long().reshape(B * K, S), right.long().reshape(B * K, S)
    g = lambda h, idx: torch.gather(h, 1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1]))
    for conv in m.convs:
        out = torch.relu(conv.top(x) + conv.left(g(x, left)) + conv.right(g(x, right)))
        x = torch.cat([torch.zeros_like(out[:, :1]), out[:, 1:]], 1)
    x = x * vote.reshape(B * K, S, 1)
    per_subtree = x.max(dim=1).values.reshape(B, K, -1)
    if m.cfg.pool == "concat":
        pooled = per_subtree.reshape(B, -1)
    else:
        pooled = torch.cat([sum(per_subtree[:, k] for k in range(K)),
                            torch.stack([per_subtree[:, k] for k in range(K)]).amax(0)], -1)
    z = m.head(torch.cat([pooled, plan], -1) if m.cfg.plan else pooled)
    if m.cfg.anchor is not None:
        a = m.cfg.anchor
        lo, span = a["lo"], a["hi"] - a["lo"]
        x = plan[:, :1] * 25.0
        ln = torch.logaddexp(lo + span * z[:, :1], lo + span * z[:, 1:] + x - a["x_ref"])
        return (ln - lo) / span
    if m.cfg.plan_skip:
        z = z + plan @ m.plan_skip.weight.t()
    return torch.sigmoid(z)


@pytest.mark.parametrize("est,plan_skip,pool,anchor", [(False, False, "concat", None), (True, False, "concat", None),
                                                      (True, True, "concat", None), (True, True, "sum-max", None),
                                                      (True, False, "concat", ANCHOR)])
def test_model_equals_the_plain_formulation(est, plan_skip, pool, anchor):
    """The flat, projection-first layers with id lookups compute the same as
    the plain one-hot, per-sub-tree formulation."""
    z = load_npz(EXAMPLE)
    m = _model(k=9, est=est, plan_skip=plan_skip, pool=pool, anchor=anchor)
    if plan_skip:
        torch.nn.init.normal_(m.plan_skip.weight)     # not the zeros an untrained path might hide behind
    with torch.no_grad():
        torch.testing.assert_close(m(*_inputs(z)), _reference_forward(m, *_inputs(z)), rtol=1e-5, atol=1e-6)
    assert one_hot(torch.tensor([0, 2]), 4).tolist() == [[0, 0, 0], [0, 1, 0]]


def test_estimates_change_the_prediction():
    z = load_npz(EXAMPLE)
    m = _model(k=9, est=True)
    base = m(*_inputs(z)).detach()
    for key in ("est", "plan"):
        z2 = dict(z)
        z2[key] = z[key] * 0.5
        assert not torch.allclose(m(*_inputs(z2)), base), key
    # the paper's model ignores them
    m0 = _model(k=9)
    z2 = dict(z)
    z2["est"], z2["plan"] = z["est"] * 0, z["plan"] * 0
    torch.testing.assert_close(m0(*_inputs(z2)), m0(*_inputs(z)))


@pytest.mark.parametrize("est,pool", [(False, "concat"), (True, "concat"), (True, "sum-max")])
def test_padded_equals_packed(est, pool):
    trees = [_tree(3, pf=4), _tree(7, pf=4, seed=1), _tree(1, pf=4, seed=2)]
    m = _model(k=1, n_ops=6, n_tables=3, est=est, pool=pool)
    p = pad_full(trees)
    y_pad = m(*(torch.from_numpy(p[k]) for k in INPUTS))
    q = pack_full(trees)
    y_pack = m.forward_packed(*(torch.from_numpy(q[k]) for k in INPUTS), torch.from_numpy(q["tree"]), len(trees))
    torch.testing.assert_close(y_pad, y_pack, rtol=1e-5, atol=1e-6)
    # padding to more slots than needed changes nothing either
    p2 = pad_full(trees, slots=20)
    torch.testing.assert_close(m(*(torch.from_numpy(p2[k]) for k in INPUTS)), y_pad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("est,plan_skip,pool,anchor", [(False, False, "concat", None), (True, False, "concat", None),
                                                      (True, True, "concat", None), (True, True, "sum-max", None),
                                                      (True, False, "concat", ANCHOR),
                                                      (True, False, "concat", dict(ANCHOR, scale_free=True)),
                                                      (True, False, "concat", dict(ANCHOR, scale_free=True, slope=True))])
def test_onnx_parity(tmp_path, est, plan_skip, pool, anchor):
    z = load_npz(EXAMPLE)
    m = _model(k=9, est=est, plan_skip=plan_skip, pool=pool, anchor=anchor)
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
    assert [i.name for i in g.input] == list(INPUTS if est else BASE_INPUTS) == list(model_inputs(m))
    assert [o.name for o in g.output] == ["y"]


def test_cost_anchor_scales_with_the_plan_cost():
    """The anchor's output rises one for one with ln Σ cpuCost once the rate
    term dominates (a plan ten times larger costs ten times the CPU, beyond
    the training range: no sigmoid caps it), and stays at the fixed cost
    U when the cost is small."""
    m = _model(k=9, anchor=ANCHOR)
    lo, span = ANCHOR["lo"], ANCHOR["hi"] - ANCHOR["lo"]
    z = torch.tensor([[0.0, 0.6], [0.5, -0.5]])          # rate dominates / fixed cost dominates
    plan = torch.zeros(2, PLAN)
    ln = lambda x: m.anchored(z, plan + torch.tensor([x / 25.0, 0, 0, 0, 0, 0]))[:, 0] * span + lo
    big = ln(ANCHOR["x_ref"] + np.log(10)) - ln(ANCHOR["x_ref"])
    assert abs(big[0].item() - np.log(10)) < 1e-3
    assert abs(big[1].item()) < 1e-3
    far = m.anchored(z, plan + torch.tensor([(ANCHOR["x_ref"] + 10) / 25.0, 0, 0, 0, 0, 0]))
    assert far[0, 0].item() > 1.2                        # past the training maximum (1.0)
    with pytest.raises(ValueError, match="anchor"):
        _model(k=9, plan_skip=True, anchor=ANCHOR)


def test_cost_anchor_starts_from_the_training_set():
    from trainer.train import build_model, cost_anchor, target_transform
    z = load_npz(EXAMPLE)
    z = dict(z, plan=z["plan"].copy(), target=np.array([0.2, 0.6], np.float32))
    z["plan"][:, 5] = 1.0
    a = cost_anchor(z, -6.9, 5.1)
    assert a["x_ref"] == pytest.approx(float(np.median(z["plan"][:, 0] * 25.0)), rel=1e-5)
    assert a["r0"] == pytest.approx(0.4) and a["u0"] == pytest.approx(0.24)
    cfg = ModelConfig(n_ops=13, n_tables=5, pf=4, k=9, kernels=(8, 8, 8), dense=(6, 4), est=EST, plan=PLAN, anchor=a)
    m = build_model(cfg, "cpu")
    assert m.head[-1].bias.tolist() == pytest.approx([0.24, 0.4])
    assert target_transform(cfg) == "ln_cpu_seconds_minmax_open"
    z["plan"][:, 5] = 0.0
    with pytest.raises(ValueError, match="no training plan"):
        cost_anchor(z, -6.9, 5.1)


def test_sum_max_pool_ignores_the_order_of_sub_trees():
    """pool="sum-max" gives the same output whatever order the sub-trees
    come in; the paper's concatenation does not."""
    z = load_npz(EXAMPLE)
    n = int(z["subtrees"][0])
    assert n >= 2
    perm = np.r_[np.arange(n)[::-1], np.arange(n, z["op"].shape[1])]
    z2 = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in z.items()}
    for k in ("op", "table", "left", "right", "vote", "pred", "est"):
        z2[k][0] = z[k][0][perm]
    for pool, same in (("sum-max", True), ("concat", False)):
        m = _model(k=9, est=True, pool=pool)
        with torch.no_grad():
            a, b = m(*_inputs(z)), m(*_inputs(z2))
        torch.testing.assert_close(a[1], b[1])          # the other query is unchanged
        assert torch.allclose(a[0], b[0], atol=1e-6) == same, pool


def test_unknown_pool_is_refused():
    with pytest.raises(ValueError, match="pool"):
        _model(k=9, pool="mean")


def test_ema_keeps_the_moving_average_of_the_trained_weights():
    """With ema = d the model fit returns holds avg_n = d*avg_(n-1) + (1-d)*w_n
    over the weights w_n after each optimizer step (avg_0 = the initial
    weights), not the last trained weights."""
    z = load_npz(EXAMPLE)
    rep = {k: np.concatenate([z[k]] * 8) for k in INPUTS}      # 16 queries: two steps of 8
    rng = np.random.default_rng(0)
    y = rng.random(16).astype(np.float32)
    feed = SubTreeFeeder(rep, "cpu")
    cfg = dict(lr=1e-2, batch=8, epochs=1, patience=100)
    # the trajectory, from a run without averaging (averaging does not change training)
    steps = []
    from torch.optim.optimizer import register_optimizer_step_post_hook
    hook = register_optimizer_step_post_hook(
        lambda opt, args, kw: steps.append([p.detach().clone() for g in opt.param_groups for p in g["params"]]))
    try:
        plain = _model(k=9)
        init = [p.detach().clone() for p in plain.parameters()]
        fit(plain, feed, feed, y, y, TrainConfig(**cfg), "cpu", log=io.StringIO())
    finally:
        hook.remove()
    assert len(steps) == 2
    d = 0.7
    want = init
    for w in steps:
        want = [d * a + (1 - d) * b for a, b in zip(want, w)]
    averaged = _model(k=9)
    fit(averaged, feed, feed, y, y, TrainConfig(ema=d, **cfg), "cpu", log=io.StringIO())
    for got, exp, last in zip(averaged.parameters(), want, plain.parameters()):
        torch.testing.assert_close(got.detach(), exp, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(g, l) for g, l in zip(averaged.parameters(), plain.parameters()))


def test_lr_plateau_halves_the_rate_when_validation_stalls():
    """With --lr-plateau the rate halves after epochs without validation
    improvement (targets unrelated to the trees: validation stalls); without
    it the rate stays constant."""
    z = load_npz(EXAMPLE)
    rep = {k: np.concatenate([z[k]] * 8) for k in INPUTS}      # 16 queries
    rng = np.random.default_rng(0)
    y_train = rng.random(16).astype(np.float32)
    y_val = rng.random(16).astype(np.float32)
    feed = SubTreeFeeder(rep, "cpu")
    for plateau in (0, 1):
        hist = fit(_model(k=9), feed, feed, y_train, y_val,
                   TrainConfig(lr=1e-2, batch=8, epochs=8, patience=100, lr_plateau=plateau), "cpu", log=io.StringIO())
        lrs = [h["lr"] for h in hist]
        assert len(lrs) == 8 and lrs[0] == 1e-2
        assert lrs == sorted(lrs, reverse=True)
        if plateau:
            assert lrs[-1] < 1e-2
            assert all(b in (a, a / 2) for a, b in zip(lrs, lrs[1:]))
        else:
            assert set(lrs) == {1e-2}


def test_scale_free_anchor_sees_a_larger_database_alike():
    """Under a scale-free anchor, every estimate ten times larger (ln + ln 10
    where known) gives the network the same input: only the anchor moves."""
    z = load_npz(EXAMPLE)
    m = _model(k=9, anchor=dict(ANCHOR, scale_free=True))
    est, plan = torch.from_numpy(z["est"]).clone(), torch.from_numpy(z["plan"]).clone()
    plan[:, 0] = plan[:, 0].clamp(min=0.3)                 # a known cost for every query
    d = float(np.log(10) / 25.0)
    big_est = est.clone()
    big_est[..., 1:4] += d * (est[..., :1] > 0)
    big_plan = plan.clone()
    big_plan[:, :4] += d * (plan[:, :4] > 0)
    B = plan.shape[0]
    a = m.scale_free(est, plan, plan.reshape(B, 1, 1, -1))
    b = m.scale_free(big_est, big_plan, big_plan.reshape(B, 1, 1, -1))
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    inputs = lambda e, p: tuple(torch.from_numpy(np.ascontiguousarray(z[k])) for k in BASE_INPUTS) + (e, p)
    with torch.no_grad():
        y, y10 = m(*inputs(est, plan)), m(*inputs(big_est, big_plan))
    span = ANCHOR["hi"] - ANCHOR["lo"]
    up = (y10 - y) * span                                  # ln CPU: between 0 (fixed cost) and ln 10 (rate)
    assert ((up >= -1e-5) & (up <= np.log(10) + 1e-5)).all()


def test_anchor_slope_is_the_plans_own():
    """With anchor["slope"] the third head output sets the plan's slope in
    ln cost, within SLOPES: a plan whose rate dominates grows by slope * ln 10
    for ten times the cost."""
    from trainer.model import SLOPES
    m = _model(k=9, anchor=dict(ANCHOR, slope=True))
    lo, span = ANCHOR["lo"], ANCHOR["hi"] - ANCHOR["lo"]
    plan = torch.zeros(3, PLAN)
    z = torch.tensor([[-0.5, 0.6, -30.0], [-0.5, 0.6, 30.0], [-0.5, 0.6, 0.0]])
    ln = lambda x: m.anchored(z, plan + torch.tensor([x / 25.0, 0, 0, 0, 0, 0]))[:, 0] * span + lo
    up = (ln(ANCHOR["x_ref"] + np.log(10)) - ln(ANCHOR["x_ref"])) / np.log(10)
    mid = SLOPES[0] + (SLOPES[1] - SLOPES[0]) / 2
    assert up.tolist() == pytest.approx([SLOPES[0], SLOPES[1], mid], abs=1e-3)
