"""Ensemble bundles: one ONNX graph whose output is the members' mean."""
import json
import os

import numpy as np
import pytest
import torch

from trainer.data import EST_SCALE, INPUTS, load_npz
from trainer.ensemble import build
from trainer.train import onnx_predict, write_bundle

from .test_data import EXAMPLE
from .test_model import ANCHOR, _inputs, _model


def _member(tmp_path, name, seed, z, workdir):
    m = _model(k=9, est=True, plan_skip=True, seed=seed)
    torch.nn.init.normal_(m.plan_skip.weight)          # members that clearly differ
    with torch.no_grad():
        expected = m(*_inputs(z)).reshape(-1).numpy()
    p = z["params"]
    manifest = {"format_version": 1, "model_id": f"subtree-15-9-4-{name}", "kind": "subtree",
                "N": p["N"], "K": p["K"], "C": p["C"], "Pf": p["Pf"], "slots": int(z["op"].shape[2]),
                "tensor_format_version": 2, "target": {"transform": "ln_cpu_seconds_minmax", "min": -7.0, "max": 5.0},
                "global_pred_vector": [0.0] * 4, "training_data_sha256": "ab" * 32,
                "training": {"seed": seed, "epochs": 1}, "metrics": {"test": {"mse": 0.1 * seed}},
                "inputs": list(INPUTS), "output": "y"}
    out = str(tmp_path / name)
    write_bundle(out, workdir, m, z, ["q1", "q2"], expected, manifest)
    return out, expected


def _workdir(tmp_path, train_x=None):
    """The example batch with targets, and a workdir of its vocabularies and
    test split; with train_x also a training split whose plans' ln cost
    (plan column 0) are train_x."""
    z = load_npz(EXAMPLE)
    z["target"] = np.array([0.4, 0.6], np.float32)
    wd = tmp_path / "work"
    wd.mkdir()
    (wd / "ops.json").write_text('["<none>", "<unknown>", "Aggregate"]')
    (wd / "tables.json").write_text('["<none>", "<unknown>"]')
    (wd / "tokens.vec").write_text("1 4\na 0 0 0 1\n")
    (wd / "test.keys.txt").write_text("q1\nq2\n")
    arrays = {k: v for k, v in z.items() if k != "params"}
    head = dict(format_version=np.array(2, np.int32), params=np.array([15, 9, 3, 4, 0], np.int32))
    np.savez(wd / "test.npz", **head, **arrays)
    if train_x is not None:
        train = dict(arrays, plan=arrays["plan"].copy())
        train["plan"][:, 0] = np.array(train_x) / EST_SCALE
        np.savez(wd / "train.npz", **head, **train)
    return z, str(wd)


@pytest.fixture
def members(tmp_path):
    z, wd = _workdir(tmp_path)
    bs = [_member(tmp_path, f"m{s}", s, z, wd) for s in (1, 2, 3)]
    return z, wd, bs


def test_ensemble_predicts_the_members_mean(tmp_path, members):
    z, wd, bs = members
    out = str(tmp_path / "ens")
    man = build([b for b, _ in bs], out, workdir=wd)
    want = np.mean([e for _, e in bs], 0)
    assert np.ptp([e for _, e in bs], 0).max() > 1e-3       # the members differ
    np.testing.assert_allclose(onnx_predict(os.path.join(out, "model.onnx"), z), want, atol=1e-5)
    g = np.load(os.path.join(out, "golden.npz"))
    np.testing.assert_allclose(g["expected"], want[:len(g["expected"])], atol=1e-5)
    with open(os.path.join(out, "manifest.json")) as f:
        m = json.load(f)
    assert m == json.loads(json.dumps(man))
    assert m["K"] == 9 and m["inputs"] == list(INPUTS) and "-x3-" in m["model_id"]
    assert [e["seed"] for e in m["training"]["ensemble"]] == [1, 2, 3]
    assert m["metrics"]["test"]["n"] == 2
    for name in ("ops.json", "tables.json", "tokens.vec"):
        assert open(os.path.join(out, name)).read() == open(os.path.join(bs[0][0], name)).read()
    with open(os.path.join(wd, "predictions_test_prestroid_15_9_4_x3.json")) as f:
        assert list(json.load(f)) == ["q1", "q2"]


def test_ensemble_refuses_members_of_different_featurizations(tmp_path, members):
    _, _, bs = members
    with open(os.path.join(bs[1][0], "tokens.vec"), "a") as f:
        f.write("b 1 0 0 0\n")
    with pytest.raises(ValueError, match="tokens.vec differs"):
        build([b for b, _ in bs], str(tmp_path / "ens"))
    with pytest.raises(ValueError, match="at least two"):
        build([bs[0][0]], str(tmp_path / "ens"))
    man = os.path.join(bs[2][0], "manifest.json")
    m = json.load(open(man))
    m["K"] = 47
    json.dump(m, open(man, "w"))
    with pytest.raises(ValueError, match="manifest K"):
        build([bs[0][0], bs[2][0]], str(tmp_path / "ens"))
    assert not os.path.exists(tmp_path / "ens")
    # a failure after the build started leaves neither the bundle nor its
    # temporary directory: golden inputs that differ between the members
    g = dict(np.load(os.path.join(bs[1][0], "golden.npz")))
    g["op"] = g["op"] + 1
    np.savez_compressed(os.path.join(bs[1][0], "golden.npz"), **g)
    with open(os.path.join(bs[1][0], "tokens.vec"), "w") as f:
        f.write(open(os.path.join(bs[0][0], "tokens.vec")).read())
    with pytest.raises(ValueError, match="golden inputs differ"):
        build([bs[0][0], bs[1][0]], str(tmp_path / "ens"))
    assert not os.path.exists(tmp_path / "ens") and not os.path.exists(tmp_path / "ens.tmp")


def _gate_members(tmp_path, pairs=1):
    """pairs of a plain and a scale-free cost-anchored member of one workdir
    whose training plans' ln cost is 19 or 21 (so its median is 20)."""
    z, wd = _workdir(tmp_path, train_x=[19.0, 21.0])
    anchor = dict(ANCHOR, scale_free=True)
    out = []
    for i in range(pairs):
        sfx = "" if i == 0 else f"{i + 1}"
        out += _gate_pair(tmp_path, z, wd, anchor, sfx, seeds=(1 + 2 * i, 2 + 2 * i))
    return z, wd, out


def _gate_pair(tmp_path, z, wd, anchor, sfx, seeds):
    out = []
    for name, m, tf, training in (
            ("plain" + sfx, _model(k=9, est=True, plan_skip=True, seed=seeds[0]), "ln_cpu_seconds_minmax",
             {"seed": seeds[0]}),
            ("anchored" + sfx, _model(k=9, anchor=anchor, seed=seeds[1]), "ln_cpu_seconds_minmax_open",
             {"seed": seeds[1], "cost_anchor": anchor})):
        with torch.no_grad():
            expected = m(*_inputs(z)).reshape(-1).numpy()
        p = z["params"]
        manifest = {"format_version": 1, "model_id": f"subtree-15-9-4-{name}", "kind": "subtree",
                    "N": p["N"], "K": p["K"], "C": p["C"], "Pf": p["Pf"], "slots": int(z["op"].shape[2]),
                    "tensor_format_version": 2, "target": {"transform": tf, "min": ANCHOR["lo"], "max": ANCHOR["hi"]},
                    "global_pred_vector": [0.0] * 4, "training_data_sha256": "ab" * 32,
                    "training": training, "metrics": {"test": {"mse": 0.1}}, "inputs": list(INPUTS), "output": "y"}
        b = str(tmp_path / name)
        write_bundle(b, wd, m, z, ["q1", "q2"], expected, manifest)
        out.append((b, m))
    return out


def test_gate_moves_from_the_plain_network_to_the_anchor_with_the_plan_cost(tmp_path):
    z, wd, ((plain, mp), (anch, ma)) = _gate_members(tmp_path)
    # the plain member carries a text stage: the gated bundle keeps it
    m = json.load(open(os.path.join(plain, "manifest.json")))
    m["text"] = {"model": "text.onnx", "dim": 8}
    json.dump(m, open(os.path.join(plain, "manifest.json"), "w"))
    open(os.path.join(plain, "text.onnx"), "wb").write(b"text stage")
    out = str(tmp_path / "gated")
    man = build([plain, anch], out, workdir=wd, gate=True, gate_quantile=0.5, gate_width=0.5, gate_input="cost")
    assert man["training"]["gate"] == {"input": "cost", "x_gate": pytest.approx(20.0, abs=1e-5), "quantile": 0.5, "width": 0.5}
    assert man["target"]["transform"] == "ln_cpu_seconds_minmax_open" and "-gated-" in man["model_id"]
    assert man["text"] == {"model": "text.onnx", "dim": 8}
    assert open(os.path.join(out, "text.onnx"), "rb").read() == b"text stage"

    def members(zz):
        with torch.no_grad():
            return [x(*_inputs(zz)).reshape(-1).numpy().astype(np.float64) for x in (mp, ma)]
    y0, y1 = members(z)
    assert np.abs(y1 - y0).min() > 1e-3                      # the members differ
    x = z["plan"][:, 0].astype(np.float64) * EST_SCALE       # 20.40 and 19.77
    g = 1 / (1 + np.exp(-(x - 20.0) / 0.5))
    assert 0.3 < g[1] < 0.5 < g[0] < 0.75
    got = onnx_predict(os.path.join(out, "model.onnx"), z)
    np.testing.assert_allclose(got, y0 + g * (y1 - y0), atol=1e-5)
    np.testing.assert_allclose(np.load(os.path.join(out, "golden.npz"))["expected"], got[:2], atol=1e-6)
    # a plan far beyond the training plans' cost is the anchor's alone, one far below the plain network's
    for shift, want in ((5.0, 1), (-5.0, 0)):
        zz = dict(z, plan=z["plan"].copy())
        zz["plan"][:, 0] += shift / EST_SCALE
        ys = members(zz)
        np.testing.assert_allclose(onnx_predict(os.path.join(out, "model.onnx"), zz), ys[want], atol=1e-4)
    # gated on the largest row estimate (plan column 3, the default input):
    # the same formula on that column, centred on the training plans' quantile of it
    man = build([plain, anch], out, workdir=wd, gate=True, gate_quantile=0.5)
    assert man["training"]["gate"]["input"] == "rows"
    rows = load_npz(os.path.join(wd, "train.npz"))["plan"][:, 3].astype(np.float64) * EST_SCALE
    assert man["training"]["gate"]["x_gate"] == pytest.approx(np.quantile(rows, 0.5), abs=1e-5)
    g = 1 / (1 + np.exp(-(z["plan"][:, 3] * EST_SCALE - man["training"]["gate"]["x_gate"]) / 1.0))
    np.testing.assert_allclose(onnx_predict(os.path.join(out, "model.onnx"), z), y0 + g * (y1 - y0), atol=1e-5)


def test_a_gate_of_several_pairs_gates_the_mean_of_each_side(tmp_path):
    z, wd, ms = _gate_members(tmp_path, pairs=3)
    out = str(tmp_path / "gated3")
    man = build([b for b, _ in ms], out, workdir=wd, gate=True, gate_quantile=0.5, gate_width=0.5, gate_input="cost")
    assert "-gated-x3-" in man["model_id"] and [e["seed"] for e in man["training"]["ensemble"]] == [1, 2, 3, 4, 5, 6]
    with torch.no_grad():
        ys = [m(*_inputs(z)).reshape(-1).numpy().astype(np.float64) for _, m in ms]
    y0, y1 = np.mean(ys[0::2], 0), np.mean(ys[1::2], 0)
    assert np.ptp(ys[0::2], 0).max() > 1e-3 and np.ptp(ys[1::2], 0).max() > 1e-3   # the seeds differ
    g = 1 / (1 + np.exp(-(z["plan"][:, 0].astype(np.float64) * EST_SCALE - 20.0) / 0.5))
    np.testing.assert_allclose(onnx_predict(os.path.join(out, "model.onnx"), z), y0 + g * (y1 - y0), atol=1e-5)
    with open(os.path.join(wd, "predictions_test_prestroid_15_9_4_gated-x3.json")) as f:
        assert list(json.load(f)) == ["q1", "q2"]
    # the first pair keeps the names m0_ and m1_ (the targets heads read their trunk)
    import onnx
    names = {o for n in onnx.load(os.path.join(out, "model.onnx")).graph.node for o in n.output}
    assert any(n.startswith("m0_/") for n in names) and any(n.startswith("m1_/") for n in names)
    assert any(n.startswith("m5_/") for n in names)
    # an odd count, or a pair in the wrong order, is refused
    bs = [b for b, _ in ms]
    with pytest.raises(ValueError, match="pairs of bundles"):
        build(bs[:3], str(tmp_path / "g"), workdir=wd, gate=True)
    with pytest.raises(ValueError, match="member 3 .a pair's first. must be a plain"):
        build(bs[:2] + [bs[3], bs[2]], str(tmp_path / "g"), workdir=wd, gate=True)
    m = json.load(open(os.path.join(bs[3], "manifest.json")))
    m["training"]["cost_anchor"] = dict(m["training"]["cost_anchor"], x_ref=1.0)
    json.dump(m, open(os.path.join(bs[3], "manifest.json"), "w"))
    with pytest.raises(ValueError, match="cost anchor"):
        build(bs[:4], str(tmp_path / "g"), workdir=wd, gate=True)
    assert not os.path.exists(tmp_path / "g")


def test_gate_refuses_members_in_the_wrong_roles(tmp_path):
    _, wd, ((plain, _), (anch, _)) = _gate_members(tmp_path)
    with pytest.raises(ValueError, match="first member must be a plain"):
        build([anch, plain], str(tmp_path / "g"), workdir=wd, gate=True)
    with pytest.raises(ValueError, match="second member must be cost-anchored"):
        build([plain, plain], str(tmp_path / "g"), workdir=wd, gate=True)
    with pytest.raises(ValueError, match="needs --workdir"):
        build([plain, anch], str(tmp_path / "g"), gate=True)
    with pytest.raises(ValueError, match="gate input"):
        build([plain, anch], str(tmp_path / "g"), workdir=wd, gate=True, gate_input="bytes")
    with pytest.raises(ValueError, match="quantile"):
        build([plain, anch], str(tmp_path / "g"), workdir=wd, gate=True, gate_quantile=1.0)
    m = json.load(open(os.path.join(anch, "manifest.json")))
    m["target"]["max"] = 6.0
    json.dump(m, open(os.path.join(anch, "manifest.json"), "w"))
    with pytest.raises(ValueError, match="target range"):
        build([plain, anch], str(tmp_path / "g"), workdir=wd, gate=True)
    assert not os.path.exists(tmp_path / "g")
