"""Python half of the test bundle fixture (see gen.sh): an UNTRAINED model.

Builds model.onnx by hand with the onnx helper API: the docs/design.md §3 network
(three tree-convolution layers as gather + matmul, bit mask by vote, max
pooling per sub-tree, two dense ReLU layers with batch norm between them,
sigmoid output) with random weights from a fixed seed. Then runs the golden
inputs written by gen_inputs.go through onnxruntime and stores its outputs as
golden.npz "expected", and writes manifest.json (BUNDLE.md, format 1).

    python gen_model.py OUTDIR WORKDIR
"""
import hashlib
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# The committed fixture is tiny; FIXTURE_PF=100 FIXTURE_CONV=128 FIXTURE_DENSE=32,8
# give a bundle of the paper's TPC-DS size for benchmarks (see gen.sh).
N, K, C = 15, 9, 3
PF = int(os.environ.get("FIXTURE_PF", "16"))
S = N + 1
E_OP, E_TBL = 8, 8          # embedding sizes
CONV = [int(os.environ.get("FIXTURE_CONV", "16"))] * 3   # tree-convolution kernels
DENSE = [int(x) for x in os.environ.get("FIXTURE_DENSE", "16,8").split(",")]
TARGET_MIN, TARGET_MAX = -4.6, 7.3


def main(out, work):
    rng = np.random.default_rng(7)
    ops = json.load(open(os.path.join(out, "ops.json")))
    tables = json.load(open(os.path.join(out, "tables.json")))
    glob = json.load(open(os.path.join(work, "global.json")))
    names = json.load(open(os.path.join(work, "names.json")))

    inits, nodes = [], []

    def w(name, shape, scale=None, zero_rows=()):
        fan_in = shape[0] if len(shape) > 1 else 1
        a = (rng.standard_normal(shape) * (scale if scale else 1.0 / np.sqrt(fan_in))).astype(np.float32)
        for r in zero_rows:
            a[r] = 0
        inits.append(numpy_helper.from_array(a, name))
        return name

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    def node(op, ins, outs, **kw):
        nodes.append(helper.make_node(op, ins, outs, **kw))
        return outs[0]

    # Embeddings (row 0 = <none> is zero so empty slots stay zero).
    w("emb_op", (len(ops), E_OP), scale=1.0, zero_rows=(0,))
    w("emb_tbl", (len(tables), E_TBL), scale=1.0, zero_rows=(0,))
    node("Gather", ["emb_op", "op"], ["x_op"], axis=0)          # (B,K,S,E_OP)
    node("Gather", ["emb_tbl", "table"], ["x_tbl"], axis=0)     # (B,K,S,E_TBL)
    h = node("Concat", ["x_op", "x_tbl", "pred"], ["x0"], axis=-1)  # (B,K,S,F0)

    # Slot 0 is the "no node" slot children point to: keep it zero.
    slot_mask = np.ones((1, 1, S, 1), np.float32)
    slot_mask[0, 0, 0, 0] = 0
    const("slot_mask", slot_mask)
    const("axes_last", np.array([-1], np.int64))
    node("Unsqueeze", ["left", "axes_last"], ["left_u"])
    node("Unsqueeze", ["right", "axes_last"], ["right_u"])
    node("Unsqueeze", ["vote", "axes_last"], ["vote_u"])

    f_in = E_OP + E_TBL + PF
    for i, f_out in enumerate(CONV):
        node("Shape", [h], [f"shape{i}"])
        node("Expand", ["left_u", f"shape{i}"], [f"li{i}"])
        node("Expand", ["right_u", f"shape{i}"], [f"ri{i}"])
        node("GatherElements", [h, f"li{i}"], [f"hl{i}"], axis=2)   # h[left]
        node("GatherElements", [h, f"ri{i}"], [f"hr{i}"], axis=2)   # h[right]
        node("MatMul", [h, w(f"w_top{i}", (f_in, f_out))], [f"mt{i}"])
        node("MatMul", [f"hl{i}", w(f"w_left{i}", (f_in, f_out))], [f"ml{i}"])
        node("MatMul", [f"hr{i}", w(f"w_right{i}", (f_in, f_out))], [f"mr{i}"])
        node("Add", [f"mt{i}", f"ml{i}"], [f"s1_{i}"])
        node("Add", [f"s1_{i}", f"mr{i}"], [f"s2_{i}"])
        node("Add", [f"s2_{i}", w(f"b{i}", (f_out,), scale=0.1)], [f"s3_{i}"])
        node("Relu", [f"s3_{i}"], [f"r{i}"])
        h = node("Mul", [f"r{i}", "slot_mask"], [f"h{i + 1}"])
        f_in = f_out

    node("Mul", [h, "vote_u"], ["masked"])                         # bit mask
    node("ReduceMax", ["masked", const("axes_s", np.array([2], np.int64))], ["pooled"], keepdims=0)  # (B,K,F)
    node("Flatten", ["pooled"], ["flat"], axis=1)                  # (B,K*F)
    node("Gemm", ["flat", w("d1_w", (K * CONV[-1], DENSE[0])), w("d1_b", (DENSE[0],), scale=0.1)], ["d1"])
    node("Relu", ["d1"], ["d1r"])
    const("bn_scale", rng.uniform(0.5, 1.5, DENSE[0]).astype(np.float32))
    const("bn_bias", (rng.standard_normal(DENSE[0]) * 0.1).astype(np.float32))
    const("bn_mean", rng.uniform(0.0, 0.5, DENSE[0]).astype(np.float32))
    const("bn_var", rng.uniform(0.5, 2.0, DENSE[0]).astype(np.float32))
    node("BatchNormalization", ["d1r", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"], epsilon=1e-5)
    node("Gemm", ["bn", w("d2_w", (DENSE[0], DENSE[1])), w("d2_b", (DENSE[1],), scale=0.1)], ["d2"])
    node("Relu", ["d2"], ["d2r"])
    node("Gemm", ["d2r", w("out_w", (DENSE[1], 1)), w("out_b", (1,), scale=0.1)], ["logit"])
    node("Sigmoid", ["logit"], ["y"])

    i32, f32 = TensorProto.INT32, TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info(n_, i32, ["B", K, S]) for n_ in ("op", "table", "left", "right")]
    inputs.append(helper.make_tensor_value_info("vote", f32, ["B", K, S]))
    inputs.append(helper.make_tensor_value_info("pred", f32, ["B", K, S, PF]))
    output = helper.make_tensor_value_info("y", f32, ["B", 1])
    graph = helper.make_graph(nodes, "prestroid_fixture_untrained", inputs, [output], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], producer_name="prestroid-fixture")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    model_path = os.path.join(out, "model.onnx")
    onnx.save(model, model_path)

    z = np.load(os.path.join(work, "inputs.npz"))
    assert int(z["format_version"]) == 1
    assert list(z["params"]) == [N, K, C, PF, 0], z["params"]
    feeds = {n_: z[n_] for n_ in ("op", "table", "left", "right", "vote", "pred")}
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    y = sess.run(["y"], feeds)[0]
    assert y.shape == (len(names), 1), y.shape
    # Batch-of-one runs must agree with the batch (B is dynamic).
    for i in range(len(names)):
        yi = sess.run(["y"], {k_: v[i:i + 1] for k_, v in feeds.items()})[0]
        assert abs(float(yi[0, 0]) - float(y[i, 0])) < 1e-6
    golden = dict(z)
    golden["expected"] = y[:, 0].astype(np.float32)
    golden["names"] = np.frombuffer("|".join(names).encode(), dtype=np.uint8)
    np.savez_compressed(os.path.join(out, "golden.npz"), **golden)

    sha = hashlib.sha256()
    for n_ in ("ops.json", "tables.json", "tokens.vec"):
        sha.update(open(os.path.join(out, n_), "rb").read())
    manifest = {
        "format_version": 1,
        "model_id": f"fixture-untrained-subtree-15-9-{PF}" + ("" if CONV[0] == 16 else f"-conv{CONV[0]}"),
        "created": "2026-12-02T00:00:00Z",
        "kind": "subtree",
        "N": N, "K": K, "C": C, "Pf": PF,
        "slots": S,
        "tensor_format_version": 1,
        "target": {"transform": "ln_cpu_seconds_minmax", "min": TARGET_MIN, "max": TARGET_MAX},
        "global_pred_vector": [round(float(x), 6) for x in glob],
        "training_data_sha256": sha.hexdigest(),
        "training": {"untrained": True, "records": 0, "epochs": 0, "seed": 7, "device": "none",
                     "note": "UNTRAINED test fixture: random weights (estimator/testdata/bundle-fixture/gen.sh)"},
        "metrics": {},
        "inputs": ["op", "table", "left", "right", "vote", "pred"],
        "output": "y",
    }
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")
    print("expected:", [round(float(v), 6) for v in y[:, 0]])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
