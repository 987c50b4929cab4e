import json
import math
import random

import pytest

from trainer.served import Line, Plane, main, paired, pool, quantile, replay, session_filter, versus_path, wilson


def test_line_through_the_origin_holds_the_weight_to_0_1():
    line = Line()
    for x in (1.0, -2.0, 0.5):
        line.add(x, 0.3 * x)
    assert abs(line.predict(2.0) - 0.6) < 1e-12
    steep = Line()
    for x in (1.0, 2.0):
        steep.add(x, 3 * x)          # the optimizer "more than right": held to its own number
    assert steep.predict(1.0) == 1.0
    assert Line().predict(1.0) is None


def test_replay_learns_which_number_to_trust():
    rng = random.Random(1)
    runs = []
    for i in range(200):
        truth = rng.gauss(1.0, 1.0)       # ln CPU seconds, mostly >= 1 s
        model = truth + rng.gauss(0, 1.5)  # a noisy model
        opt = truth + rng.gauss(0, 0.1)    # a close optimizer
        runs.append({"pass": 0, "stmt": i, "kind": "new shape", "source": "model", "actual": math.exp(truth),
                     "model": math.exp(model), "optimizer": math.exp(opt), "est": math.exp((model + opt) / 2)})
    s = replay(runs, all_sizes=True, min_fit=10)
    assert len(s.q["line"]) == 200
    assert quantile(s.q["line"], 0.5) < quantile(s.q["served"], 0.5)
    assert quantile(s.q["line"], 0.9) < 1.5
    # Repeats and other sources are not scored, nor learned from.
    other = [dict(r, source="text") for r in runs[:5]] + [dict(r, kind="repeat") for r in runs[:5]]
    assert replay(other).q.get("served", []) == []


def test_warm_up_is_learned_from_not_scored_and_the_file_order_is_the_order():
    rng = random.Random(2)

    def row(kind, p, stmt):
        truth = rng.gauss(1.0, 1.0)
        return {"pass": p, "stmt": stmt, "kind": kind, "source": "model", "actual": math.exp(truth),
                "model": math.exp(truth + 1.0), "optimizer": math.exp(truth), "est": math.exp(truth + 1.0)}

    # the measured pass written first in the file, its statements' numbers descending;
    # the warm-up (pass -1) after it: it still runs, and teaches, first
    runs = [row("new shape", 0, 100 - i) for i in range(5)] + [row("warm-up", -1, i) for i in range(12)]
    s = replay(runs, all_sizes=True, min_fit=10)
    assert len(s.q["served"]) == 5
    assert max(s.q["line"]) < 1.0 + 1e-9   # the optimizer's weight learned as 1 from the warm-up
    assert min(s.q["served"]) > 2.7


def test_plane_holds_the_weights_to_the_simplex():
    p = Plane()
    rng = random.Random(3)
    for _ in range(50):
        x1, x2 = rng.gauss(0, 1), rng.gauss(0, 1)
        p.add(x1, x2, 0.3 * x1 + 0.5 * x2)
    w1, w2 = p.weights()
    assert abs(w1 - 0.3) < 1e-9 and abs(w2 - 0.5) < 1e-9
    q = Plane()
    for _ in range(50):
        x1, x2 = rng.gauss(0, 1), rng.gauss(0, 1)
        q.add(x1, x2, 2 * x1 + 2 * x2)   # beyond both numbers: held to w1 + w2 = 1
    w1, w2 = q.weights()
    assert abs(w1 + w2 - 1) < 1e-9 and w1 >= 0 and w2 >= 0
    assert Plane().predict(1.0, 1.0) is None


def test_pool_counts_over_runs_without_the_warm_up():
    def x(kind, source, est, lo, hi, actual, cls, opt=0.0):
        return {"kind": kind, "source": source, "est": est, "lo": lo, "hi": hi, "actual": actual, "class": cls, "opt": opt}

    runs = [
        [x("warm-up", "model", 1, 0.5, 2, 50, 0),                # not scored: would be too small
         x("new shape", "model", 2, 1, 4, 4, 0, opt=1.0),        # q 2, covered, class <= 2 s for 4 s: too small
         x("repeat", "history", 4, 3, 5, 4.4, 1)],               # q 1.1, covered
        [x("new literals", "text", 0.1, 0.05, 0.2, 0.4, 0),      # q 4, not covered
         x("repeat", "history", 0.5, 0.4, 0.6, 0.5, 0)],
    ]
    p = pool(runs, [2.0, 20.0])
    assert p["executions"] == 4
    assert p["q"]["first sight"]["n"] == 2 and p["q"]["first sight >= 1 s"]["n"] == 1
    assert abs(p["q"]["first sight >= 1 s"]["median"] - 2.0) < 1e-12
    assert p["coverage"]["history"]["share"] == 1.0 and p["coverage"]["text"]["share"] == 0.0
    assert p["too_small"]["share"] == 0.25
    assert p["vs_optimizer"]["n"] == 1 and p["vs_optimizer"]["optimizer"][0] == 4.0
    lo, hi = wilson(80, 100)
    assert lo < 0.8 < hi and hi - lo < 0.15


def test_quantile_interpolates():
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert math.isnan(quantile([], 0.5))


def test_paired_scores_both_proxies_against_the_pairs_mean_cpu():
    def x(pass_, stmt, kind, est, actual, first):
        return {"pass": pass_, "stmt": stmt, "kind": kind, "est": est, "actual": actual, "first": first}

    a = [x(-1, 0, "warm-up", 1, 1, True),                 # not scored
         x(0, 0, "new shape", 2, 4, True),                # mean CPU 2: a 1, b 4; a ran first, 4 over 1
         x(0, 1, "new literals", 0.5, 0.25, False),       # mean 0.25: a 2, b 1; b first, 0.25 over 0.25
         x(0, 2, "new shape", 1, 1, True),                # b did not complete it: not scored
         x(1, 0, "repeat", 2, 2, False)]
    b = [x(-1, 0, "warm-up", 1, 1, False),
         x(0, 0, "new shape", 8, 1, False),
         x(0, 1, "new literals", 0.25, 0.25, True),
         x(1, 0, "repeat", 2, 2, True)]
    p = paired([(a, b)], draws=200)
    g = p["groups"]
    assert g["first sight"]["n"] == 2 and g["first sight >= 1 s"]["n"] == 1 and g["repeat"]["n"] == 1
    assert g["first sight >= 1 s"]["median"]["a"] == 1.0 and g["first sight >= 1 s"]["median"]["b"] == 4.0
    assert g["first sight"]["median"]["a"] == 1.5 and g["first sight"]["median"]["b"] == 2.5
    assert g["first sight"]["a_closer"] == 0.5
    lo, hi = g["first sight >= 1 s"]["median"]["b_minus_a_90ci"]
    assert lo == hi == 3.0                                # one pair: every draw is it
    assert p["first_over_second_median"] == 2.5 and p["first_sights_ordered"] == 2
    assert versus_path("r/x.runs.jsonl.gz") == "r/x.versus.runs.jsonl.gz" and versus_path("x.runs.jsonl") == "x.versus.runs.jsonl"


def test_session_filter_splits_the_runs_by_a_session_property(tmp_path, capsys):
    def x(kind, est, actual, session=None):
        r = {"pass": 0 if kind != "repeat" else 1, "stmt": 0, "kind": kind, "source": "model", "est": est,
             "lo": est / 2, "hi": est * 2, "actual": actual, "class": 1, "opt": 0.0}
        if session:
            r["session"] = session
        return r

    off = {"enable_dynamic_filtering": "false"}
    runs = [x("warm-up", 1, 1),
            x("new shape", 1, 4, off),                                        # q 4, dynamic filtering off
            x("new literals", 2, 2.2, {"join_distribution_type": "BROADCAST"}),  # q 1.1
            x("new literals", 3, 3)]                                          # q 1, default session
    keep = session_filter(["enable_dynamic_filtering=false"], [])
    assert [r["actual"] for r in runs if keep(r)] == [1, 4]                   # the warm-up always passes
    keep = session_filter([], ["enable_dynamic_filtering=false"])
    assert [r["actual"] for r in runs if keep(r)] == [1, 2.2, 3]
    with pytest.raises(ValueError):
        session_filter(["enable_dynamic_filtering"], [])
    path = tmp_path / "r.runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    assert main(["--pooled", "--session", "enable_dynamic_filtering=false", str(path)]) == 0
    out = capsys.readouterr().out
    assert "1 executions" in out and "median 4.00" in out
    assert main(["--pooled", "--not-session", "enable_dynamic_filtering=false", str(path)]) == 0
    assert "2 executions" in capsys.readouterr().out
    # a run that records no session: its statements count as run in the default session, with a warning
    old = tmp_path / "old.runs.jsonl"
    old.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "session"}) + "\n" for r in runs))
    assert main(["--pooled", "--not-session", "enable_dynamic_filtering=false", str(old)]) == 0
    cap = capsys.readouterr()
    assert "3 executions" in cap.out and "records no session" in cap.err
    with pytest.raises(SystemExit):
        main(["--session", "enable_dynamic_filtering=false", str(path)])      # the replay needs every execution
    with pytest.raises(SystemExit):
        main(["--pooled", "--session", "enable_dynamic_filtering", str(path)])  # not NAME=VALUE: a usage error
