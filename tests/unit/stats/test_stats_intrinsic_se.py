"""The label-free sd of the real F around the intrinsic F (calibrated scores)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.stats.alerting import disagreement
from monitor.stats.estimate import Estimate
from monitor.stats.falpha import (
    falpha_exact,
    intrinsic_falpha,
    intrinsic_falpha_se_from_sums,
)


def _sums(score: np.ndarray, pred: np.ndarray) -> tuple[float, float, float, float]:
    return (
        float(np.sum(pred * score)),
        float(np.sum(pred)),
        float(np.sum(score)),
        float(score.size),
    )


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("rate", [0.03, 0.2])
def test_bounds_the_spread_of_the_real_f_under_calibrated_labels(
    rng: np.random.Generator, alpha: float, rate: float
) -> None:
    logit = rng.normal(math.log(rate / (1 - rate)) - 1.0, 2.0, 6000)
    score = 1.0 / (1.0 + np.exp(-logit))
    pred = (score >= 0.5).astype(np.int8)
    labels = (rng.random((2000, score.size)) < score).astype(np.int8)
    real = np.array([falpha_exact(pred, y, alpha) for y in labels])
    bound = intrinsic_falpha_se_from_sums(*_sums(score, pred), alpha)
    g = intrinsic_falpha(score, pred, alpha)
    assert abs(np.nanmean(real) - g) < 3 * bound / math.sqrt(len(real)) + 0.01
    spread = float(np.nanstd(real))
    assert spread <= bound * 1.05  # an upper bound (5% Monte Carlo slack)...
    assert bound <= spread * 3.0  # ...but not a vacuous one


def test_undefined_intrinsic_f_has_no_se() -> None:
    assert math.isnan(intrinsic_falpha_se_from_sums(0.0, 0.0, 0.0, 10.0, 1.0))


def test_reference_uncertainty_widens_the_disagreement_test() -> None:
    est = Estimate(0.87, 0.015, 0.84, 0.90, 300, 250.0, 0.95)
    assert disagreement(est, 0.833, 0.05)[0]  # outside when the intrinsic F is taken as exact
    assert not disagreement(est, 0.833, 0.05, value_se=0.021)[0]  # inside with its own sd
