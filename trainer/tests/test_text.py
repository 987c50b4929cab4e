import numpy as np
import torch

from trainer.text import Calibrated, TextQuantiles, calibrate, pinball, routing_view


def test_quantiles_never_cross():
    torch.manual_seed(0)
    m = TextQuantiles(32, hidden=16).eval()
    q = m(torch.randn(200, 32) * 5).detach().numpy()
    assert (q[:, 0] <= q[:, 1]).all() and (q[:, 1] <= q[:, 2]).all()


def test_pinball_is_zero_only_at_the_target():
    y = torch.tensor([1.0, 2.0])
    exact = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    assert float(pinball(exact, y)) == 0.0
    # one unit off: the mean over (0.1, 0.5, 0.9) of q (under) or 1 - q (over)
    assert abs(float(pinball(exact - 1, y)) - 0.5) < 1e-6
    assert abs(float(pinball(exact + 1, y)) - 0.5) < 1e-6
    # only the 0.9 quantile too low: it pays 0.9, a third of the mean
    only = exact.clone()
    only[:, 2] -= 1
    assert abs(float(pinball(only, y)) - 0.3) < 1e-6


def test_conformal_margin_reaches_the_coverage_on_held_out_data():
    rng = np.random.default_rng(1)
    y = rng.normal(0, 1, 2000)
    q = np.stack([np.full_like(y, -0.5), np.zeros_like(y), np.full_like(y, 0.5)], axis=1)  # covers ~38%
    m = calibrate(y[:1000], q[:1000], 0.8)
    assert m > 0
    inside = (y[1000:] >= q[1000:, 0] - m) & (y[1000:] <= q[1000:, 2] + m)
    assert 0.76 <= inside.mean() <= 0.84
    wide = np.stack([np.full_like(y, -9), np.zeros_like(y), np.full_like(y, 9)], axis=1)
    assert calibrate(y, wide, 0.8) == 0.0          # never narrows


def test_calibrated_model_widens_only_the_outer_quantiles():
    torch.manual_seed(0)
    base = TextQuantiles(8, hidden=8).eval()
    x = torch.randn(5, 8)
    a, b = base(x), Calibrated(base, 0.5)(x)
    assert torch.allclose(b[:, 0], a[:, 0] - 0.5) and torch.allclose(b[:, 1], a[:, 1])
    assert torch.allclose(b[:, 2], a[:, 2] + 0.5)


def test_routing_view_counts_intervals_on_one_side():
    ln = np.log
    y = np.array([ln(0.1), ln(5.0), ln(0.5), ln(3.0)])
    q = np.array([[ln(0.05), ln(0.1), ln(0.2)],      # below 1 s: decided, right
                  [ln(2.0), ln(4.0), ln(8.0)],       # above: decided, right
                  [ln(0.3), ln(0.9), ln(2.0)],       # straddles: not decided
                  [ln(0.2), ln(0.5), ln(0.9)]])      # below, but actual above: decided, wrong
    v = routing_view(y, q, bounds=(1.0,))["1s"]
    assert v["decided"] == 0.75
    assert abs(v["decided_right"] - 2 / 3) < 1e-9
    assert v["actual_above"] == 0.5


def test_weighted_pinball_ignores_zero_weight_rows_and_by_warmth_splits():
    from trainer.text import by_warmth
    y = torch.tensor([1.0, 2.0])
    pred = torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])   # the second row one unit over
    assert float(pinball(pred, y, torch.tensor([1.0, 0.0]))) == 0.0
    assert abs(float(pinball(pred, y, torch.tensor([1.0, 1.0]))) - float(pinball(pred, y))) < 1e-6
    part = {"y": np.log(np.array([1.0, 1.0, 2.0, 2.0])), "warm": np.array([1, 1, 0, 0], np.float32)}
    q = np.repeat(np.log(np.array([[1.0], [1.0], [1.0], [1.0]])), 3, axis=1)
    m = by_warmth(part, q, 0.0, 1.0)
    assert set(m) == {"warm", "cold"} and m["warm"]["n"] == 2 and m["cold"]["n"] == 2
    assert m["warm"]["qerror_p50"] == 1.0 and abs(m["cold"]["qerror_p50"] - 2.0) < 1e-9
    assert m["cold"]["median_ln_ratio"] < 0 < 1 + m["warm"]["median_ln_ratio"]
