import math
import random

from trainer.served import Line, quantile, replay


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


def test_quantile_interpolates():
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert math.isnan(quantile([], 0.5))
