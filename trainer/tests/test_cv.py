"""Template-level cross-validation (trainer.cv)."""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from trainer import baselines as B
from trainer import cv
from trainer.data import load_npz

from .test_data import EXAMPLE

FAMILIES = ("tpch", "tpcds", "gen")


def test_folds_hold_each_template_once_and_mix_the_families():
    templates = [f"{fam}/q{i}" for fam in FAMILIES for i in range(7)]
    families = {t: t.split("/")[0] for t in templates}
    f = cv.assign_folds(templates * 3, families, 4)
    assert set(f) == set(templates) and set(f.values()) == {0, 1, 2, 3}
    for fold in range(4):
        held = [t for t, x in f.items() if x == fold]
        assert 5 <= len(held) <= 6
        assert {families[t] for t in held} == set(FAMILIES)
    assert cv.assign_folds(list(reversed(templates)), families, 4) == f      # names only, not order
    with pytest.raises(ValueError, match="cannot fill"):
        cv.assign_folds(templates[:3], families, 4)


def _workdir(tmp_path):
    """12 templates x 2 queries, tiled from the example tensors, 16 train + 8 val rows."""
    z = load_npz(EXAMPLE)
    rng = np.random.default_rng(3)
    rows = 24
    arrays = {k: np.concatenate([v] * (rows // 2)) for k, v in z.items() if k != "params"}
    arrays["target"] = rng.uniform(0.1, 0.9, rows).astype(np.float32)
    templates = [f"{FAMILIES[(i // 2) % 3]}/t{i // 2}" for i in range(rows)]
    keys = [f"k{i:02d}" for i in range(rows)]
    split = ["val" if (i // 2) % 4 == 0 else "train" for i in range(rows)]
    wd = tmp_path / "work"
    wd.mkdir()
    (wd / "ops.json").write_text(json.dumps([f"op{i}" for i in range(13)]))
    (wd / "tables.json").write_text(json.dumps([f"t{i}" for i in range(5)]))
    (wd / "target.json").write_text('{"min": -7.0, "max": 5.0}')
    with open(wd / "queries.jsonl", "w") as f:
        for k, t, s in zip(keys, templates, split):
            y = float(arrays["target"][keys.index(k)])
            f.write(json.dumps({"key": k, "template": t, "family": t.split("/")[0], "split": s,
                                "ln_cpu_s": -7.0 + 12.0 * y, "otp_nodes": 3 + int(2 ** (8 * y))}) + "\n")
        f.write(json.dumps({"key": "x", "template": "tpch/secret", "family": "tpch", "split": "test"}) + "\n")
    for part in ("train", "val"):
        idx = [i for i in range(rows) if split[i] == part]
        np.savez(wd / f"{part}.npz", format_version=np.array(2, np.int32),
                 params=np.array([15, 9, 3, 4, 0], np.int32), **{k: v[idx] for k, v in arrays.items()})
        (wd / f"{part}.keys.txt").write_text("".join(keys[i] + "\n" for i in idx))
    return str(wd), dict(zip(keys, templates)), dict(zip(keys, arrays["target"].tolist()))


ARGS = ["--name", "tiny", "--folds", "3", "--seeds", "1,2", "--epochs", "2", "--patience", "2", "--kernels",
        "4,4,4", "--dense", "4,2", "--device", "cpu", "--threads", "1", "--lr", "1e-2", "--batch", "8"]


def test_cv_predicts_every_query_out_of_fold_and_resumes(tmp_path, capsys):
    wd, template_of, target_of = _workdir(tmp_path)
    cv.main(["--workdir", wd] + ARGS)
    path = os.path.join(wd, "cv_tiny.json")
    with open(path) as f:
        r = json.load(f)
    assert "x" not in r["keys"] and "tpch/secret" not in r["templates"]      # the test split is never read
    assert sorted(r["keys"]) == sorted(template_of)
    assert [template_of[k] for k in r["keys"]] == r["templates"]
    assert [target_of[k] for k in r["keys"]] == pytest.approx(r["target_normalized"])
    held = [set(ts) for ts in r["fold_templates"]]
    assert set().union(*held) == set(template_of.values()) and sum(map(len, held)) == 12
    for t, f in zip(r["templates"], r["fold_of"]):
        assert t in held[f]
    y, fold_of = np.array(r["target_normalized"]), np.array(r["fold_of"])
    oof = {}
    for seed in ("1", "2"):
        runs = r["runs"][seed]
        assert sorted(runs) == ["0", "1", "2"]
        p = np.zeros(len(y))
        for f, run in runs.items():
            assert run["held_out"] == (fold_of == int(f)).sum() and run["train"] == len(y) - run["held_out"]
            p[fold_of == int(f)] = run["pred"]
            assert np.mean((np.clip(run["pred"], 0, 1) - y[fold_of == int(f)]) ** 2) == pytest.approx(
                run["held_out_mse"], rel=1e-4)
        oof[seed] = np.clip(p, 0, 1)
    assert not np.allclose(oof["1"], oof["2"])                               # the seeds differ
    s = r["summary"]
    assert s["seeds"]["1"]["mse"] == pytest.approx(np.mean((oof["1"] - y) ** 2))
    assert s["ensemble"]["mse"] == pytest.approx(np.mean(((oof["1"] + oof["2"]) / 2 - y) ** 2))
    assert "tiny" in capsys.readouterr().out

    # rerun: nothing is trained again; a changed configuration starts over
    mtime = os.path.getmtime(path)
    before = {s: {f: x["seconds"] for f, x in runs.items()} for s, runs in r["runs"].items()}
    cv.main(["--workdir", wd] + ARGS)
    with open(path) as f:
        again = json.load(f)
    assert {s: {f: x["seconds"] for f, x in runs.items()} for s, runs in again["runs"].items()} == before
    assert os.path.getmtime(path) >= mtime
    cv.main(["--workdir", wd] + ARGS[:5] + ["1"] + ARGS[6:] + ["--dropout", "0.2"])
    with open(path) as f:
        changed = json.load(f)
    assert sorted(changed["runs"]) == ["1"] and changed["config_id"] != r["config_id"]
    with open(os.path.join(wd, f"cv_tiny.{r['config_id']}.json")) as f:      # the old results are kept aside
        assert json.load(f)["runs"] == again["runs"]


def test_cv_compare_prints_one_row_per_configuration(tmp_path, capsys):
    wd, _, _ = _workdir(tmp_path)
    cv.main(["--workdir", wd] + ARGS)
    capsys.readouterr()
    out = str(tmp_path / "summary.json")
    cv.main(["--compare", os.path.join(wd, "cv_tiny.json"), os.path.join(wd, "cv_tiny.json"), "--summary-out", out])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("tiny") for line in lines[1:])
    with open(out) as f:
        s = json.load(f)
    assert [x["name"] for x in s] == ["tiny", "tiny"] and s[0]["summary"]["ensemble"]["members"] == 2
    assert sorted(s[0]["runs"]["1"]) == ["0", "1", "2"] and "pred" not in s[0]["runs"]["1"]["0"]


def test_cv_processes_share_the_runs_of_one_configuration(tmp_path):
    """Two processes with the same seeds at once: each run is trained once, all land in one file."""
    wd, _, _ = _workdir(tmp_path)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = [subprocess.Popen([sys.executable, "-m", "trainer.cv", "--workdir", wd] + ARGS, cwd=here,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    trained = []
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        trained += [line for line in err.splitlines() if line.startswith("cv tiny: seed")]
    with open(os.path.join(wd, "cv_tiny.json")) as f:
        r = json.load(f)
    assert {s: sorted(runs) for s, runs in r["runs"].items()} == {"1": ["0", "1", "2"], "2": ["0", "1", "2"]}
    assert len(trained) == 6, trained
    assert r["claims"] == {}


def test_cv_of_a_baseline_uses_the_same_folds(tmp_path, capsys):
    wd, template_of, target_of = _workdir(tmp_path)
    cv.main(["--workdir", wd] + ARGS)
    cv.main(["--workdir", wd, "--name", "logbin", "--baseline", "logbin", "--folds", "3"])
    with open(os.path.join(wd, "cv_tiny.json")) as f:
        net = json.load(f)
    with open(os.path.join(wd, "cv_logbin.json")) as f:
        r = json.load(f)
    assert r["keys"] == net["keys"] and r["fold_of"] == net["fold_of"]
    assert r["target_normalized"] == pytest.approx(net["target_normalized"], abs=1e-6)
    with open(os.path.join(wd, "queries.jsonl")) as f:
        qs = {q["key"]: q for q in map(json.loads, f)}
    fold_of = np.array(r["fold_of"])
    sensitive = 0                              # folds where tuning on the held-out fold matters
    for fold in range(3):
        held = [qs[k] for k, f in zip(r["keys"], fold_of) if f == fold]
        rest = [qs[k] for k, f in zip(r["keys"], fold_of) if f != fold]
        want, _ = B.logbin(rest, held, held, -7.0, 5.0)
        tuned_on_train, _ = B.logbin(rest, rest, held, -7.0, 5.0)
        sensitive += not np.allclose(want, tuned_on_train)
        np.testing.assert_allclose(r["runs"]["1"][str(fold)]["pred"], (want + 7.0) / 12.0, atol=1e-12)
    assert sensitive and 0 < r["summary"]["ensemble"]["mse"] < 1
    capsys.readouterr()
    cv.main(["--compare", os.path.join(wd, "cv_tiny.json"), os.path.join(wd, "cv_logbin.json")])
    out = capsys.readouterr().out
    assert "logbin" in out and "tiny" in out
    with pytest.raises(SystemExit, match="unknown"):
        cv.main(["--workdir", wd, "--name", "x", "--baseline", "unknown", "--folds", "3"])


def test_config_id_ignores_flags_at_their_defaults():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seeds", default="1")
    params = {"N": 15, "K": 9}
    ids = {}
    for name, argv in {"default": [], "seeds": ["--seeds", "1,2"], "lr": ["--lr", "1e-2"]}.items():
        a = ap.parse_args(argv)
        ids[name] = cv.config_id(a, {k: ap.get_default(k) for k in vars(a)}, params)
    ap.add_argument("--new-flag", default="")               # added by a later version, at its default
    a = ap.parse_args([])
    ids["later"] = cv.config_id(a, {k: ap.get_default(k) for k in vars(a)}, params)
    assert ids["default"] == ids["seeds"] == ids["later"] != ids["lr"]
    assert cv.config_id(a, {k: ap.get_default(k) for k in vars(a)}, {"N": 15, "K": 47}) != ids["default"]
