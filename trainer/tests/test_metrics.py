import numpy as np

from trainer.metrics import metrics, qerrors
from trainer.w2v import train_vectors


def test_qerror_symmetric():
    y, p = np.log([1.0, 2.0]), np.log([2.0, 1.0])
    np.testing.assert_allclose(qerrors(y, p), [2.0, 2.0])


def test_metrics_perfect_and_provisioning():
    y = np.log([1.0, 4.0, 9.0])
    m = metrics(y, y, lo=0.0, hi=3.0)
    assert m["mse"] == 0 and m["qerror_max"] == 1 and abs(m["pearson_r"] - 1) < 1e-12
    m = metrics(y, y + np.log(2), lo=0.0, hi=3.0)       # everything predicted twice as large
    assert abs(m["over_provisioned_cpu"] - 1.0) < 1e-12 and m["under_provisioned_cpu"] == 0
    assert m["over_provisioned_queries"] == 1.0


def test_w2v_lowers_min_count_on_tiny_corpora():
    sents = [["a", "b", "="], ["a", "c", "<"], ["b", "="]] * 2
    wv, eff, note = train_vectors(sents, size=4, min_count=10, seed=1, epochs=2)
    assert eff < 10 and "lowered" in note
    assert wv.vector_size == 4 and "a" in wv.key_to_index


def test_model_names():
    from trainer.eval import pretty
    assert pretty("prestroid_15_47_50") == "prestroid(15-47-50)"
    assert pretty("prestroid_15_47_50_paper") == "prestroid(15-47-50)-paper"
    assert pretty("prestroid_15_9_50_x5") == "prestroid(15-9-50)-x5"
    assert pretty("prestroid_full_50_packed_paper") == "prestroid(full-50)-packed-paper"
    assert pretty("tfidf_gbr") == "tfidf_gbr"


def test_per_storage_and_scale_groups():
    from trainer.eval import group_of, per_group
    qs = [{"key": "a", "scale": "sf1", "storage": "iceberg"}, {"key": "b", "scale": "sf1", "storage": "iceberg"},
          {"key": "c", "scale": "tiny", "storage": "connector"}, {"key": "d", "scale": "tiny"}, {"key": "e"}]
    grp = {q["key"]: group_of(q) for q in qs}
    assert grp == {"a": "iceberg/sf1", "b": "iceberg/sf1", "c": "connector/tiny", "d": "connector/tiny", "e": "live"}
    keys = ["a", "b", "c", "d", "e"]
    y = np.log([1.0, 1.0, 1.0, 1.0, 1.0])
    p = np.log([2.0, 4.0, 1.0, 1.0, 3.0])
    g = per_group(keys, y, p, grp, lo=-5.0, hi=5.0)
    assert set(g) == {"iceberg/sf1", "connector/tiny", "live"}
    assert g["iceberg/sf1"]["n"] == 2 and abs(g["iceberg/sf1"]["qerror_p50"] - 3.0) < 1e-12
    assert g["connector/tiny"]["qerror_p95"] == 1.0 and g["live"]["n"] == 1
