"""The novelty section: how much wider the model errs off its training families."""
import json

import numpy as np
import pytest

from trainer import novelty


def test_widen_is_the_ratio_of_the_quantiles_held_to_one_and_four():
    rng = np.random.default_rng(3)
    train = np.abs(rng.normal(0, 0.5, 4000))
    val = np.abs(rng.normal(0, 0.6, 4000))
    w, v = novelty.fit(train, val)
    assert w == pytest.approx(np.quantile(val, 0.8) / np.quantile(train, 0.8))
    assert 1.1 < w < 1.3 and v["train"]["n"] == 4000 and v["val"]["abs_error_q"] > v["train"]["abs_error_q"]
    # A model no worse off its families is not narrowed; one far worse is bounded.
    assert novelty.fit(val, train)[0] == 1.0
    assert novelty.fit(train, train * 10)[0] == novelty.MAX_WIDEN


def test_main_writes_the_section_beside_the_rest_of_the_manifest(tmp_path, monkeypatch):
    bundle, work = tmp_path / "b", tmp_path / "w"
    bundle.mkdir()
    work.mkdir()
    manifest = {"model_id": "m", "target": {"transform": "ln_cpu_seconds_minmax", "min": -7.0, "max": 5.0}}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    (work / "target.json").write_text(json.dumps(manifest["target"]))
    errs = {"train": np.array([0.1, 0.2, 0.4, 0.5, 1.0]), "val": np.array([0.2, 0.4, 0.8, 1.0, 2.0])}
    monkeypatch.setattr(novelty, "abs_errors", lambda b, tgt, w, part, t: errs[part])
    novelty.main(["--workdir", str(work), "--bundle", str(bundle), "--families", "7"])
    got = json.loads((bundle / "manifest.json").read_text())
    assert got["model_id"] == "m" and got["target"] == manifest["target"]
    n = got["novelty"]
    assert n["file"] == "families.txt" and n["families"] == 7 and n["quantile"] == 0.8
    assert n["widen"] == pytest.approx(2.0) and n["validation"]["val"]["n"] == 5
